"""What a declared directory holds that the host did not write, and moving it out (`unknown: move-out`).

A stray is an entry of the folder that is neither declared, nor in the footprint, nor known
(`knows`), nor the host's own (its state, the moved-out folder), and holds none of these: it is
taken whole (a folder of strays is one stray). An entry holding something kept is looked into.
A declared folder inside is its own step's, with its own policy.

Moved out, a stray goes to `~/.local/state/mesh-moved/<module>/` under its full path
(`/etc/app/old.conf` → `mesh-moved/app/etc/app/old.conf`, `.1`, `.2` after it, or after a folder on
its way, when taken), and a
line of `moved.jsonl` there says what was moved, from where, to where and when.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath

from mesh_host.applying.roots import Root

MOVED_LIST = "moved.jsonl"
MAX_SUFFIX = 1000


def strays(
    root: Root, folder: PurePosixPath, kept: Collection[PurePosixPath], into: Collection[PurePosixPath] = ()
) -> list[PurePosixPath]:
    """The entries under `folder` the host did not write and nobody knows, each taken whole, sorted;
    the folders `into` (an archive's) are the host's yet looked into."""
    holding = {parent for path in kept for parent in path.parents} | set(into)
    return _strays(root, folder, frozenset(kept), holding)


def _strays(
    root: Root, folder: PurePosixPath, kept: frozenset[PurePosixPath], holding: set[PurePosixPath]
) -> list[PurePosixPath]:
    found = []
    with os.scandir(root.real(folder)) as entries:
        listed = sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries)
    for name, is_folder in listed:
        path = folder / name
        if path in kept:
            continue
        if path in holding:
            if is_folder:
                found.extend(_strays(root, path, kept, holding))
            continue
        found.append(path)
    return found


@dataclass(frozen=True)
class Moved:
    source: PurePosixPath
    to: PurePosixPath


def destination(root: Root, path: PurePosixPath, folder: PurePosixPath) -> PurePosixPath:
    """Where `path` would be moved in `folder`: under its full path, with a suffix on the first part
    that is taken (by anything, or for a folder on the way, by what is not a folder)."""
    *folders, name = path.relative_to("/").parts
    at = folder
    for part in folders:
        at = _free(root, at, part, folder=True)
    return _free(root, at, name, folder=False)


def _free(root: Root, at: PurePosixPath, name: str, *, folder: bool) -> PurePosixPath:
    for suffix in range(MAX_SUFFIX):
        candidate = at / (name if suffix == 0 else f"{name}.{suffix}")
        try:
            now = os.lstat(root.real(candidate))
        except FileNotFoundError:
            return candidate
        if folder and stat.S_ISDIR(now.st_mode):
            return candidate
    raise FileExistsError(errno.EEXIST, f"{MAX_SUFFIX} moved-out copies already", str(root.real(at / name)))


def move_out(root: Root, path: PurePosixPath, folder: PurePosixPath) -> Moved:
    """Moves `path` whole into `folder` and lists it there."""
    target = destination(root, path, folder)
    root.makedirs(target.parent)
    source, landing = root.real(path), root.real(target)
    try:
        os.rename(source, landing)
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
        shutil.move(source, landing)  # another filesystem: copied (links as links), then removed
    moved = Moved(path, target)
    _list(root, folder, moved)
    return moved


def _list(root: Root, folder: PurePosixPath, moved: Moved) -> None:
    line = {"from": str(moved.source), "to": str(moved.to), "at": datetime.now(UTC).isoformat(timespec="seconds")}
    descriptor = os.open(root.real(folder / MOVED_LIST), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(line) + "\n")
        stream.flush()
        os.fsync(stream.fileno())
