"""Env files: one per module in the materialize folder, written atomically, mode 0600.

Each file is `<module>.env`: a comment header, then one `NAME="value"` line per variable,
sorted by name. Values are double-quoted with `\\`, `"`, `$` and `` ` `` escaped by a backslash;
every other character, newline, `#`, `'`, spaces and Unicode included, is written as is. That is
the quoting POSIX `sh` (`. file`) and systemd's `EnvironmentFile=` read the same way: inside
double quotes both take exactly those four escapes and keep a literal newline.

A file is replaced through a temporary file in the same folder (`state.files.write_atomically`: an
exclusive temporary file of a random name, mode 0600 set on it, fsync, rename, fsync of the
folder), and only when its bytes or its mode differ from what is wanted, so an edited file or a
changed mode is put back while an unchanged one is never rewritten. The ledger and the digest
key are the node's state (`provisioner_client.state`), written and read the same way: only a
regular file, never through a link. A folder where one of them goes is an error naming it; the
client never removes it.

The files the client wrote are listed in a ledger (`state.records.LEDGER`, in the same folder).
Only files in the ledger are ever replaced or removed: a file the client did not write is never
touched, even where a module's file would go. The ledger is not trusted either: an entry
is taken only if it is a plain `<module>.env` name of that module, so a file inside the folder;
anything else (`../x`, an absolute path, another module's name) is reported and ignored, never
touched. The ledger also remembers which module each manifest file declared (`manifests`), so
that a manifest corrupted later still holds the module it declared.

The digest of a file (recorded in `applied`, which operators read through the verb) is an
HMAC-SHA-256 keyed with a node-local secret (`state.records.KEY`: 32 random bytes, mode 0600, created on
first write, in the same folder): an unsalted hash of a file holding a secret could be searched
offline. Losing or replacing that key costs little and loses nothing: the env
files are compared by their bytes, so none is rewritten, but every module's digest changes once,
so each module's `applied` record is rewritten once and each change action runs once.

The change action last run on each module's file is kept here too (`acted_on`, `ran`:
`state.records.ACTIONS`), the node's own word of what it acted on.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from provisioner_client.errors import MaterializeError
from provisioner_client.resolving.manifest import MODULE_PATTERN
from provisioner_client.state import files, records
from provisioner_client.state.files import MODE
from provisioner_client.state.records import ActionsDocument, LedgerDocument, create_key, digest, read_key
from registry.contract import ActionRecord

log = logging.getLogger(__name__)

LEDGER = records.LEDGER.name
_ESCAPED = str.maketrans({"\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`"})


def quote(value: str) -> str:
    """`value` as one double-quoted word that sh and systemd both read back unchanged."""
    return '"' + value.translate(_ESCAPED) + '"'


def render(module: str, env: Mapping[str, str]) -> bytes:
    header = f"# Written by mesh-provisioner-client for module {module}; edits are put back.\n"
    lines = [f"{name}={quote(value)}\n" for name, value in sorted(env.items())]
    return (header + "".join(lines)).encode("utf-8")


@dataclass(frozen=True)
class Ledger:
    """What the ledger says: env file name to module, manifest file name to the module it
    declared, and the entries that were refused (each with why)."""

    files: dict[str, str] = field(default_factory=dict)
    manifests: dict[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def read_ledger(path: Path) -> Ledger:
    """The ledger of the env folder `path` is in, each entry judged (`problems`: those ignored)."""
    document = records.LEDGER.read(path.parent)
    if document is None:
        return Ledger()
    problems: list[str] = []
    entries = _entries(document.files, _plain_env_file, problems, "files")
    manifests = _entries(document.manifests, _plain_manifest, problems, "manifests")
    return Ledger(entries, manifests, tuple(problems))


def _entries(
    found: Mapping[str, object], check: Callable[[str, str], bool], problems: list[str], section: str
) -> dict[str, str]:
    entries: dict[str, str] = {}
    for name, module in found.items():
        if isinstance(module, str) and check(name, module):
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


class FileObserver(Protocol):
    """Told, at the moment it happens, that a module's env file now holds what the client wants
    (written, or found so) and of which digest, or that the client removed it: watch mode's drift
    watch (`provisioner_client.watch.drift`) judges the files against this, never against what an
    earlier reconcile wanted."""

    def wrote(self, module: str, path: Path, digest: str) -> None: ...

    def removed(self, module: str) -> None: ...


class EnvFolder:
    """The materialize folder, the ledger of the files the client wrote there, and the digest key;
    `observer` is told of each env file materialized or removed."""

    def __init__(self, folder: Path, *, observer: FileObserver | None = None) -> None:
        self.folder = folder
        self._observer = observer
        self._key: bytes | None = None
        self._ledger: Ledger | None = None  # read once per reconcile (an EnvFolder lives for one), kept on writes
        self._actions: ActionsDocument | None = None  # likewise

    def path_of(self, module: str) -> Path:
        if not is_module(module):  # a module name always names a file inside the folder
            raise MaterializeError(self.folder, f"{module[:80]!r} is not a module name")
        return self.folder / f"{module}.env"

    def remove_leftovers(self) -> list[Path]:
        """Removes the temporary files of the env files, the ledger and the key that a killed client
        left (only while holding the node's lease: no write of another client is under way)."""
        removed = records.remove_leftovers(self.folder, is_env_file=_is_env_file)
        for path in removed:
            log.info("removed %s: a temporary file a stopped client left", path)
        return removed

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
            self._key = read_key(self.folder)
        if self._key is None and create:
            self._key = create_key(self.folder)
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

    def content_on_disk(self, module: str) -> bytes | None:
        """What the module's file holds now, if the client wrote it and it is still there."""
        if not is_module(module) or f"{module}.env" not in self.ledger():
            return None
        return _read_regular(self.path_of(module), mode=None)

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
        written = path.name not in ledger.files or not _holds(path, content)
        if written:
            if path.name not in ledger.files:
                self._write_ledger({**ledger.files, path.name: module}, ledger.manifests)
            files.write_atomically(path, content, what="env file")
            log.info("wrote %s for module %s (%s)", path, module, wanted)
        if self._observer is not None:
            self._observer.wrote(module, path, wanted)
        return Materialized(path, wanted, written=written)

    def acted_on(self, module: str) -> ActionRecord | None:
        """The change action last run on the module's file, as this node recorded it; None when it
        recorded none (or the record cannot be read: said)."""
        return self._read_actions().modules.get(module)

    def ran(self, module: str, action: ActionRecord) -> None:
        """Keeps, on disk before the bus is told, that the module's change action ran: a bus that
        loses its last writes never makes it run again, or be skipped, for that. A failure to keep
        it is said: the applied record still tells."""
        actions = self._read_actions()
        actions.modules[module] = action
        self._write_actions(actions)

    def remove_except(self, keep: set[str]) -> list[Path]:
        """Removes the files the client wrote for modules not in `keep`; returns their paths."""
        ledger = self.read_ledger()
        gone = {name: module for name, module in ledger.files.items() if module not in keep}
        removed = []
        for module in sorted(gone.values()):
            path = self.path_of(module)  # the ledger's entries are plain `<module>.env` names: inside the folder
            if files.remove(path, what="env file"):
                removed.append(path)
                log.info("removed %s: module %s is no longer declared", path, module)
            if self._observer is not None:
                self._observer.removed(module)
        if gone:
            files.fsync_folder(self.folder)
            self._write_ledger({n: m for n, m in ledger.files.items() if n not in gone}, ledger.manifests)
        self._forget_actions(keep)
        return removed

    def _read_actions(self) -> ActionsDocument:
        if self._actions is None:
            try:
                self._actions = records.ACTIONS.read(self.folder) or ActionsDocument()
            except MaterializeError as err:
                log.warning("%s; the change actions are judged by the applied records", err)
                self._actions = ActionsDocument()
        return self._actions

    def _write_actions(self, actions: ActionsDocument) -> None:
        try:
            records.ACTIONS.write(self.folder, actions)
        except MaterializeError as err:
            log.warning("%s; the change actions are judged by the applied records", err)

    def _forget_actions(self, keep: set[str]) -> None:
        """The actions of modules no longer declared forgotten: declared again, a module acts anew."""
        actions = self._read_actions()
        kept = {module: action for module, action in actions.modules.items() if module in keep}
        if kept != actions.modules:
            actions.modules = kept
            self._write_actions(actions)

    def _write_ledger(self, entries: Mapping[str, str], manifests: Mapping[str, str]) -> None:
        records.LEDGER.write(self.folder, LedgerDocument(files=dict(entries), manifests=dict(manifests)))
        self._ledger = Ledger(dict(entries), dict(manifests))


def _is_env_file(name: str) -> bool:
    return name.endswith(".env") and is_module(name.removesuffix(".env"))


def as_written(path: Path, wanted: str, key: bytes) -> bool:
    """The file is a regular file of mode 0600 whose keyed digest is `wanted`: the one judge of
    "is this file as the client wrote it" (`EnvFolder.intact`, `drift.DriftWatch`)."""
    content = _read_regular(path, mode=MODE)
    return content is not None and hmac.compare_digest(digest(content, key), wanted)


def _holds(path: Path, content: bytes) -> bool:
    return _read_regular(path, mode=MODE) == content


MAX_FILE_BYTES = 64 * 1024 * 1024  # an env file larger than this is not one the client wrote: never read whole


def _read_regular(path: Path, *, mode: int | None) -> bytes | None:
    """The bytes of `path` if it is a regular file (never through a link, never a FIFO, device or
    folder), of `mode` when given, and at most `MAX_FILE_BYTES`; else None: a judgement, never an
    error. Judged on the file opened, so nothing swapped in between a check and the read is read."""
    try:
        found = files.read_regular(path, limit=MAX_FILE_BYTES, what="env file")
    except MaterializeError:
        return None
    if found is None or (mode is not None and found.mode != mode):
        return None
    return found.content
