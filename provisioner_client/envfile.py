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
is never touched, even where a module's file would go.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from provisioner_client.errors import MaterializeError

log = logging.getLogger(__name__)

MODE = 0o600
LEDGER = ".mesh-provisioner-client.json"
_ESCAPED = str.maketrans({"\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`"})


def quote(value: str) -> str:
    """`value` as one double-quoted word that sh and systemd both read back unchanged."""
    return '"' + value.translate(_ESCAPED) + '"'


def render(module: str, env: Mapping[str, str]) -> bytes:
    header = f"# Written by mesh-provisioner-client for module {module}; edits are put back.\n"
    lines = [f"{name}={quote(value)}\n" for name, value in sorted(env.items())]
    return (header + "".join(lines)).encode("utf-8")


def digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


@dataclass(frozen=True)
class Materialized:
    path: Path
    digest: str
    written: bool


class EnvFolder:
    """The materialize folder and the ledger of the files the client wrote there."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path_of(self, module: str) -> Path:
        return self.folder / f"{module}.env"

    def ledger(self) -> dict[str, str]:
        """File name to module, for every file the client wrote and has not removed."""
        try:
            data = json.loads((self.folder / LEDGER).read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise MaterializeError(self.folder / LEDGER, f"the ledger cannot be read: {err}") from None
        files = data.get("files", {}) if isinstance(data, dict) else {}
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}

    def digest_on_disk(self, module: str) -> str | None:
        """The digest of the module's file if the client wrote it and it is still there."""
        path = self.path_of(module)
        if path.name not in self.ledger():
            return None
        try:
            return digest(path.read_bytes())
        except OSError:
            return None

    def materialize(self, module: str, content: bytes) -> Materialized:
        """Makes the module's file hold `content` with mode 0600; writes only on a difference."""
        path = self.path_of(module)
        wanted = digest(content)
        ledger = self.ledger()
        if path.name not in ledger and os.path.lexists(path):
            raise MaterializeError(path, "exists but was not written by this client; move it away to let it manage it")
        if path.name in ledger and _holds(path, content):
            return Materialized(path, wanted, written=False)
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.name not in ledger:
            self._write_ledger({**ledger, path.name: module})
        _write_atomically(path, content)
        log.info("wrote %s for module %s (%s)", path, module, wanted)
        return Materialized(path, wanted, written=True)

    def remove_except(self, keep: set[str]) -> list[Path]:
        """Removes the files the client wrote for modules not in `keep`; returns their paths."""
        ledger = self.ledger()
        gone = {name: module for name, module in ledger.items() if module not in keep}
        removed = []
        for name, module in sorted(gone.items()):
            path = self.folder / name
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
            self._write_ledger({n: m for n, m in ledger.items() if n not in gone})
        return removed

    def _write_ledger(self, files: dict[str, str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        document = json.dumps({"files": dict(sorted(files.items()))}, indent=2) + "\n"
        _write_atomically(self.folder / LEDGER, document.encode())


def _holds(path: Path, content: bytes) -> bool:
    try:
        status = path.lstat()
        if not stat.S_ISREG(status.st_mode) or stat.S_IMODE(status.st_mode) != MODE:
            return False
        return path.read_bytes() == content
    except OSError:
        return False


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
