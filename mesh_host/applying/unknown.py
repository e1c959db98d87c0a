"""What a declared directory holds that the host did not write, and moving it out (`unknown: move-out`).

A stray is an entry of the folder that is neither declared, nor in the footprint, nor known
(`knows`), nor the host's own (its state, the moved-out folder), and holds none of these: it is
taken whole (a folder of strays is one stray). An entry holding something kept is looked into.
A declared folder inside is its own step's, with its own policy.

Moved out, a stray goes to `~/.local/state/mesh-moved/<module>/` under its full path
(`/etc/app/old.conf` → `mesh-moved/app/etc/app/old.conf`, `.1`, `.2` after it, or after a folder on
its way, when taken), and a
line of `moved.jsonl` there says what was moved, from where, to where and when.

Every folder is walked by descriptor (safe_fs) and each stray renamed out of the folder found when
listing it: a module swapping a folder on the way for a link, mid-walk, moves nothing through it.
A stray gone between its listing and its move is left gone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath

from mesh_host.applying import safe_fs
from mesh_host.applying.roots import Root
from mesh_host.applying.safe_fs import closing

MOVED_LIST = "moved.jsonl"
MAX_SUFFIX = 1000

Visit = Callable[[PurePosixPath, int, str], None]  # a stray's path, the descriptor of its folder, its name


def strays(
    root: Root,
    folder: PurePosixPath,
    kept: Collection[PurePosixPath],
    top: PurePosixPath | None = None,
    into: Collection[PurePosixPath] = (),
) -> list[PurePosixPath]:
    """The entries under `folder` the host did not write and nobody knows, each taken whole, sorted.
    `top`: the outermost folder the host governs over `folder` (itself when not given); the folders
    `into` (an archive's) are the host's yet looked into."""
    found: list[PurePosixPath] = []
    _walk_strays(root, folder, kept, top, lambda path, _fd, _name: found.append(path), into=into)
    return found


def _walk_strays(
    root: Root,
    folder: PurePosixPath,
    kept: Collection[PurePosixPath],
    top: PurePosixPath | None,
    visit: Visit,
    *,
    into: Collection[PurePosixPath],
) -> None:
    holding = {parent for path in kept for parent in path.parents} | set(into)
    with closing(root.open_folder(folder, top or folder)) as descriptor:
        _strays(descriptor, folder, frozenset(kept), holding, visit)


def _strays(
    descriptor: int, folder: PurePosixPath, kept: frozenset[PurePosixPath], holding: set[PurePosixPath], visit: Visit
) -> None:
    for name, is_folder in safe_fs.listing(descriptor):
        path = folder / name
        if path in kept:
            continue
        if path not in holding:
            visit(path, descriptor, name)
        elif is_folder:
            try:
                inner = safe_fs.open_child(descriptor, name)
            except (safe_fs.LinkRefused, safe_fs.NotAFolder, FileNotFoundError):
                continue  # swapped since listed: what holds a kept path is never taken, nor followed
            with closing(inner):
                _strays(inner, path, kept, holding, visit)


@dataclass(frozen=True)
class Moved:
    source: PurePosixPath
    to: PurePosixPath


def destination(root: Root, path: PurePosixPath, folder: PurePosixPath) -> PurePosixPath:
    """Where `path` would be moved in `folder`: under its full path, with a suffix on the first part
    that is taken (by anything, or for a folder on the way, by what is not a folder)."""
    try:
        at = root.open_folder(folder)
    except FileNotFoundError:
        return folder / path.relative_to("/")
    with closing(at), _landing(at, path, folder, make=False) as (_, target):
        return target


@contextlib.contextmanager
def _landing(
    at: int | None, path: PurePosixPath, folder: PurePosixPath, *, make: bool
) -> Iterator[tuple[int | None, PurePosixPath]]:
    """The descriptor of the folder `path` lands in under `folder` (`at`), its folders made when
    `make` (None when one is missing and not made), and the path it lands at."""
    *folders, name = path.relative_to("/").parts
    target, held = folder, None if at is None else os.dup(at)
    try:
        for part in folders:
            free = _free(held, part, folder=True)
            target /= free
            if held is not None and safe_fs.stat_at(held, free) is None:
                if not make:
                    os.close(held)
                    held = None
                    continue
                safe_fs.make_folder(held, free)
            if held is not None:
                inner = safe_fs.open_child(held, free)
                os.close(held)
                held = inner
        yield held, target / _free(held, name, folder=False)
    finally:
        if held is not None:
            os.close(held)


def _free(at: int | None, name: str, *, folder: bool) -> str:
    for suffix in range(MAX_SUFFIX):
        candidate = name if suffix == 0 else f"{name}.{suffix}"
        now = None if at is None else safe_fs.stat_at(at, candidate)
        if now is None or (folder and stat.S_ISDIR(now.st_mode)):
            return candidate
    raise FileExistsError(errno.EEXIST, f"{MAX_SUFFIX} moved-out copies already", name)


def move_out(
    root: Root,
    folder: PurePosixPath,
    kept: Collection[PurePosixPath],
    top: PurePosixPath | None,
    to: PurePosixPath,
    *,
    into: Collection[PurePosixPath] = (),
    done: Callable[[Moved], None],
) -> None:
    """Moves each stray of `folder` whole into `to` and lists it there, telling `done` of each once moved."""
    root.makedirs(to)
    with closing(root.open_folder(to)) as landing:

        def one(path: PurePosixPath, descriptor: int, name: str) -> None:
            with _landing(landing, path, to, make=True) as (landed, target):
                assert landed is not None  # its folders were made
                if _move(descriptor, name, landed, target.name):
                    moved = Moved(path, target)
                    _list(landing, moved)
                    done(moved)

        _walk_strays(root, folder, kept, top, one, into=into)


def _move(descriptor: int, name: str, into: int, to_name: str) -> bool:
    """Renames the entry across folders held; False when it is gone since listed."""
    try:
        safe_fs.rename(descriptor, name, into, to_name)
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
        safe_fs.copy_tree(descriptor, name, into, to_name)  # another filesystem: copied (links as links), removed
        safe_fs.remove_tree(descriptor, name)
    return True


def _list(landing: int, moved: Moved) -> None:
    line = {"from": str(moved.source), "to": str(moved.to), "at": datetime.now(UTC).isoformat(timespec="seconds")}
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(MOVED_LIST, flags, 0o600, dir_fd=landing), "a", encoding="utf-8") as stream:
        stream.write(json.dumps(line) + "\n")
        stream.flush()
        os.fsync(stream.fileno())
