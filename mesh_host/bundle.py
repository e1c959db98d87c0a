"""What a built host carries: the declaration put inside its one file by `mesh_host.build --bundle`.

The build adds a folder `_bundle` beside this module (PyInstaller's `--add-data ...:mesh_host/_bundle`,
unpacked under `sys._MEIPASS` with the package when the file runs), holding the declaration's text
as it was given and where it was read from. A default build, and this source tree, have no such
folder: they carry nothing, and `reconcile` refuses, saying so.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from mesh_host.declaration import MAX_DECLARATION_BYTES

BUNDLED = Path(__file__).parent / "_bundle"  # frozen: <sys._MEIPASS>/mesh_host/_bundle
DECLARATION = "declaration.json"
SOURCE = "source.txt"
MAX_DECLARATION = MAX_DECLARATION_BYTES  # the most the host reads of a declaration file, carried or not
MAX_SOURCE = 4096  # bytes of the line saying where the declaration came from


class BundleBroken(Exception):
    """The host's bundle is there but cannot be used: a broken build, never a default one."""


@dataclass(frozen=True)
class Carried:
    """The declaration a built host carries: its JSON text, unparsed, and where it came from."""

    text: str
    source: str  # the file given to `--bundle` at build time, as the build read it

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def carried(folder: Path = BUNDLED) -> Carried | None:
    """The declaration this host carries, or None for a default build (no bundle folder).

    Raises `BundleBroken` when the folder is there but its declaration is missing, larger than
    `MAX_DECLARATION`, or not UTF-8."""
    if not folder.is_dir():
        return None
    text = _read_bounded(folder / DECLARATION, MAX_DECLARATION, "the carried declaration")
    source_file = folder / SOURCE
    source = _read_bounded(source_file, MAX_SOURCE, "where it came from").strip() if source_file.exists() else ""
    return Carried(text, source or "(not recorded by the build)")


def _read_bounded(path: Path, limit: int, what: str) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as err:
        raise BundleBroken(f"this host's bundle is broken: {what} ({path}) cannot be read: {err}") from err
    if len(data) > limit:
        raise BundleBroken(f"this host's bundle is broken: {what} ({path}) is larger than {limit} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        raise BundleBroken(f"this host's bundle is broken: {what} ({path}) is not UTF-8: {err}") from err


def stage(folder: Path, text: str, source: str) -> Path:
    """Writes the bundle folder `carried` reads (`folder/_bundle`), for the build to add to the file."""
    bundle = folder / BUNDLED.name
    bundle.mkdir(parents=True)
    (bundle / DECLARATION).write_text(text)
    (bundle / SOURCE).write_text(source + "\n")
    return bundle
