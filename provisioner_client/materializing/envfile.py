"""Env files: one per module in the materialize folder, written atomically, mode 0600.

Each file is `<module>.env`: a comment header, then one `NAME="value"` line per variable,
sorted by name. Values are double-quoted with `\\`, `"`, `$` and `` ` `` escaped by a backslash;
every other character, newline, `#`, `'`, spaces and Unicode included, is written as is. That is
the quoting POSIX `sh` (`. file`) and systemd's `EnvironmentFile=` read the same way: inside
double quotes both take exactly those four escapes and keep a literal newline.

A file is replaced through a temporary file in the same folder (fsync, rename, fsync of the
folder), and only when its bytes or its mode differ from what is wanted, so an edited file or a
changed mode is put back while an unchanged one is never rewritten.

The files the client wrote are listed in a ledger (`.mesh-provisioner-client.json` in the same
folder). Only files in the ledger are ever replaced or removed: a file the client did not write
is never touched, even where a module's file would go. The ledger is not trusted either: an entry
is taken only if it is a plain `<module>.env` name of that module, so a file inside the folder;
anything else (`../x`, an absolute path, another module's name) is reported and ignored, never
touched. The ledger also remembers which module each manifest file declared (`manifests`), so
that a manifest corrupted later still holds the module it declared.

The digest of a file (recorded in `applied`, which operators read through the verb) is an
HMAC-SHA-256 keyed with a node-local secret, `.mesh-provisioner-client.key` in the same folder
(32 random bytes, mode 0600, created on first write): an unsalted hash of a file holding a secret
could be searched offline. Losing or replacing that key costs little and loses nothing: the env
files are compared by their bytes, so none is rewritten, but every module's digest changes once,
so each module's `applied` record is rewritten once and each change action runs once.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from provisioner_client.errors import MaterializeError
from provisioner_client.resolving.manifest import MODULE_PATTERN
from registry.contract import JsonRefused, read_json_file

log = logging.getLogger(__name__)

MODE = 0o600
LEDGER = ".mesh-provisioner-client.json"
KEY = ".mesh-provisioner-client.key"
KEY_BYTES = 32
_ESCAPED = str.maketrans({"\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`"})


def quote(value: str) -> str:
    """`value` as one double-quoted word that sh and systemd both read back unchanged."""
    return '"' + value.translate(_ESCAPED) + '"'


def render(module: str, env: Mapping[str, str]) -> bytes:
    header = f"# Written by mesh-provisioner-client for module {module}; edits are put back.\n"
    lines = [f"{name}={quote(value)}\n" for name, value in sorted(env.items())]
    return (header + "".join(lines)).encode("utf-8")


def digest(content: bytes, key: bytes) -> str:
    """The keyed digest of an env file: without the node's key it tells nothing of the content."""
    return "hmac-sha256:" + hmac.new(key, content, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Ledger:
    """What the ledger says: env file name to module, manifest file name to the module it
    declared, and the entries that were refused (each with why)."""

    files: dict[str, str] = field(default_factory=dict)
    manifests: dict[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def read_ledger(path: Path) -> Ledger:
    try:
        data = read_json_file(path)
    except FileNotFoundError:
        return Ledger()
    except OSError as err:
        raise MaterializeError(path, f"the ledger cannot be read: {err.strerror}") from None
    except JsonRefused as err:
        raise MaterializeError(path, f"the ledger cannot be read: {err.reason}") from None
    document = data if isinstance(data, dict) else {}
    problems: list[str] = []
    files = _entries(document.get("files"), _plain_env_file, problems, "files")
    manifests = _entries(document.get("manifests"), _plain_manifest, problems, "manifests")
    return Ledger(files, manifests, tuple(problems))


def _entries(found: object, check: Callable[[str, str], bool], problems: list[str], section: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for name, module in found.items() if isinstance(found, dict) else ():
        if isinstance(name, str) and isinstance(module, str) and check(name, module):
            entries[name] = module
        else:
            problems.append(
                f"ledger {section} entry {str(name)[:80]!r} ignored: not a plain <module>.env "
                f"name of its module inside the folder"
            )
    return entries


@dataclass(frozen=True)
class Materialized:
    path: Path
    digest: str
    written: bool


def _plain_env_file(name: str, module: str) -> bool:
    return is_module(module) and name == f"{module}.env"


def _plain_manifest(name: str, module: str) -> bool:
    return is_module(module) and "/" not in name and name not in ("", ".", "..") and "\0" not in name


def is_module(name: str) -> bool:
    return re.fullmatch(MODULE_PATTERN, name) is not None


class EnvFolder:
    """The materialize folder, the ledger of the files the client wrote there, and the digest key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._key: bytes | None = None
        self._ledger: Ledger | None = None  # read once per reconcile (an EnvFolder lives for one), kept on writes

    def path_of(self, module: str) -> Path:
        if not is_module(module):  # a module name always names a file inside the folder
            raise MaterializeError(self.folder, f"{module[:80]!r} is not a module name")
        return self.folder / f"{module}.env"

    def read_ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = read_ledger(self.folder / LEDGER)
        return self._ledger

    def ledger(self) -> dict[str, str]:
        """File name to module, for every file the client wrote and has not removed."""
        return self.read_ledger().files

    def remember(self, manifests: Mapping[str, str]) -> None:
        """Keeps which module each manifest file declared, for when that file is unreadable."""
        ledger = self.read_ledger()
        if ledger.manifests != dict(manifests) and (manifests or ledger.manifests):
            self._write_ledger(ledger.files, manifests)

    def key(self, *, create: bool = False) -> bytes | None:
        """The node-local digest key; made on first use when `create`."""
        if self._key is None:
            self._key = _read_key(self.folder / KEY)
        if self._key is None and create:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._key = _create_key(self.folder / KEY)
        return self._key

    def digest(self, content: bytes) -> str:
        key = self.key(create=True)
        assert key is not None  # created above
        return digest(content, key)

    def digest_on_disk(self, module: str) -> str | None:
        """The digest of the module's file if the client wrote it and it is still there."""
        if not is_module(module):
            return None
        path = self.path_of(module)
        key = self.key()
        if key is None or path.name not in self.ledger():
            return None
        content = _read_regular(path, mode=None)
        return digest(content, key) if content is not None else None

    def intact(self, module: str, wanted: str) -> bool:
        """Whether the module's file is still the one of digest `wanted`, mode 0600, as written."""
        key = self.key()
        if key is None or not is_module(module) or f"{module}.env" not in self.ledger():
            return False
        return as_written(self.path_of(module), wanted, key)

    def materialize(self, module: str, content: bytes) -> Materialized:
        """Makes the module's file hold `content` with mode 0600; writes only on a difference."""
        path = self.path_of(module)
        wanted = self.digest(content)
        ledger = self.read_ledger()
        if path.name not in ledger.files and os.path.lexists(path):
            raise MaterializeError(path, "exists but was not written by this client; move it away to let it manage it")
        if path.name in ledger.files and _holds(path, content):
            return Materialized(path, wanted, written=False)
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.name not in ledger.files:
            self._write_ledger({**ledger.files, path.name: module}, ledger.manifests)
        _write_atomically(path, content)
        log.info("wrote %s for module %s (%s)", path, module, wanted)
        return Materialized(path, wanted, written=True)

    def remove_except(self, keep: set[str]) -> list[Path]:
        """Removes the files the client wrote for modules not in `keep`; returns their paths."""
        ledger = self.read_ledger()
        gone = {name: module for name, module in ledger.files.items() if module not in keep}
        removed = []
        for module in sorted(gone.values()):
            path = self.path_of(module)  # the ledger's entries are plain `<module>.env` names: inside the folder
            try:
                path.unlink()
                removed.append(path)
                log.info("removed %s: module %s is no longer declared", path, module)
            except FileNotFoundError:
                pass
            except OSError as err:
                raise MaterializeError(path, f"cannot be removed: {err.strerror}") from None
        if gone:
            _fsync_folder(self.folder)
            self._write_ledger({n: m for n, m in ledger.files.items() if n not in gone}, ledger.manifests)
        return removed

    def _write_ledger(self, files: Mapping[str, str], manifests: Mapping[str, str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        document = {"files": dict(sorted(files.items())), "manifests": dict(sorted(manifests.items()))}
        _write_atomically(self.folder / LEDGER, (json.dumps(document, indent=2) + "\n").encode())
        self._ledger = Ledger(dict(files), dict(manifests))


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise MaterializeError(path, f"the digest key cannot be read: {err.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        regular = stat.S_ISREG(os.fstat(file.fileno()).st_mode)
        key = file.read(KEY_BYTES + 1) if regular else b""
    if len(key) != KEY_BYTES:
        raise MaterializeError(
            path,
            f"the digest key is not {KEY_BYTES} bytes in a regular file; remove it and a "
            f"new one is made (every module's digest changes once)",
        )
    return key


def _create_key(path: Path) -> bytes:
    """A new random key, linked into place only if none is there yet (never overwrites one)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), MODE)
            file.write(secrets.token_bytes(KEY_BYTES))
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    except OSError as err:
        raise MaterializeError(path, f"the digest key cannot be made: {err.strerror}") from None
    finally:
        Path(temporary).unlink(missing_ok=True)
    _fsync_folder(path.parent)
    key = _read_key(path)
    assert key is not None  # linked above, or by another writer first
    return key


def as_written(path: Path, wanted: str, key: bytes) -> bool:
    """The file is a regular file of mode 0600 whose keyed digest is `wanted`: the one judge of
    "is this file as the client wrote it" (`EnvFolder.intact`, `drift.DriftWatch`)."""
    content = _read_regular(path, mode=MODE)
    return content is not None and hmac.compare_digest(digest(content, key), wanted)


def _holds(path: Path, content: bytes) -> bool:
    return _read_regular(path, mode=MODE) == content


MAX_FILE_BYTES = 64 * 1024 * 1024  # an env file larger than this is not one the client wrote: never read whole


def _read_regular(path: Path, *, mode: int | None) -> bytes | None:
    """The bytes of `path` if it is a regular file (never through a link, never a FIFO or device
    that would block or never end), of `mode` when given, and at most `MAX_FILE_BYTES`; else None.
    Judged on the file opened, so nothing swapped in between a check and the read is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode) or (mode is not None and stat.S_IMODE(status.st_mode) != mode):
            return None
        content = file.read(MAX_FILE_BYTES + 1)
    return content if len(content) <= MAX_FILE_BYTES else None


def _write_atomically(path: Path, content: bytes) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), MODE)
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as err:
        Path(temporary).unlink(missing_ok=True)
        raise MaterializeError(path, f"cannot be written: {err.strerror}") from None
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
