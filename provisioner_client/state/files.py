"""The client's own files, every one opened the same way: env files, the node's records, the
digest key and the last good env files are written and read here and nowhere else.

- **Written** through a temporary file beside the target (`write_atomically`, or `write_new`
  where an existing file must never be replaced): created with `O_CREAT | O_EXCL | O_NOFOLLOW`
  under a random name (`.<target>.<16 hex digits>.tmp`), so nothing planted in the folder (a
  link, a file of another mode) is ever written through or reused; mode 0600 set on the
  descriptor, whatever the umask; the bytes fsynced, then renamed (or linked) into place and the
  folder fsynced. A failed write removes its temporary file.
- **Read** (`read_regular`) with `O_NOFOLLOW | O_NONBLOCK`, judged on the descriptor opened: only a
  regular file is read, and no more of it than a bound, so a link, a FIFO or a device is never
  followed, blocked on or read without end.
- Something other than a regular file in a file's place is a `MaterializeError` naming the path
  and what is there ("is a folder, not a regular file"), never an `OSError` escaping.
- A client killed between writing a temporary file and renaming it leaves it behind (an env
  file's holds secrets): `remove_leftovers` removes, at the next start, the regular files of the
  folder itself that the store (`records.is_leftover`) takes for its leftovers, by `target_of`
  (the file a temporary name is for) or by the names it gave them before; never anything else.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from provisioner_client.errors import MaterializeError
from registry.contract import kind_of, read_at_most

MODE = 0o600
FOLDER_MODE = 0o700
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NAMES_TRIED = 8
_TEMPORARY = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{16}\.tmp")


@dataclass(frozen=True)
class OnDisk:
    """A regular file's bytes and its permission bits, as read from one descriptor."""

    content: bytes
    mode: int


def write_atomically(path: Path, content: bytes, *, what: str) -> None:
    """Makes `path` a regular file of mode 0600 holding `content`, all at once, whatever was there
    (a link or a FIFO is replaced, never followed); a folder in its place is an error."""
    temporary = _temporary_holding(path, content, what=what)
    try:
        os.replace(temporary, path)
    except OSError as err:
        _remove(temporary)
        raise _refused(path, "cannot be written", err, what=what) from None
    fsync_folder(path.parent)


def write_new(path: Path, content: bytes, *, what: str) -> bool:
    """Links a new file of mode 0600 holding `content` into place only if nothing is at `path`;
    whether it did (something already there is never replaced)."""
    temporary = _temporary_holding(path, content, what=what)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    except OSError as err:
        raise _refused(path, "cannot be made", err, what=what) from None
    finally:
        _remove(temporary)
    fsync_folder(path.parent)
    return True


def read_regular(path: Path, *, limit: int, what: str) -> OnDisk | None:
    """The bytes of the regular file at `path` (at most `limit`); None when nothing is there."""
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _refused(path, "cannot be read", err, what=what) from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise MaterializeError(path, _not_regular(status.st_mode), what=what)
        content = read_at_most(fd, limit + 1)
    except OSError as err:
        raise _refused(path, "cannot be read", err, what=what) from None
    finally:
        os.close(fd)
    if len(content) > limit:
        raise MaterializeError(path, f"is more than the {limit:,} bytes allowed", what=what)
    return OnDisk(content, stat.S_IMODE(status.st_mode))


def remove(path: Path, *, what: str) -> bool:
    """Removes the file at `path` (a link itself, never what it leads to); whether one was there.
    A folder in its place is an error: the client never removes one."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise _refused(path, "cannot be removed", err, what=what) from None
    return True


def make_folder(folder: Path, *, what: str = "env folder") -> None:
    """The folder, made (mode 0700) if it is not there."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
    except OSError as err:
        raise _refused(folder, "cannot be made", err, what=what, wanted="a folder") from None


def fsync_folder(folder: Path, *, what: str = "env folder") -> None:
    """The folder's entries (a rename, a link, a removal) made durable."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise _refused(folder, "cannot be synced", err, what=what, wanted="a folder") from None


def remove_leftovers(folder: Path, is_leftover: Callable[[str], bool]) -> list[Path]:
    """Removes the temporary files a killed client left in `folder` (not below it), those whose
    names `is_leftover` takes: regular files only, never a link or a folder. Only while no write
    of the client's is under way (the node's lease, held by this process, whose writes finish
    before it awaits anything). Returns what it removed."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise _refused(folder, "cannot be listed", err, what="env folder", wanted="a folder") from None
    removed = []
    for entry in entries:
        if is_leftover(entry.name) and entry.is_file(follow_symlinks=False):
            path = Path(entry.path)
            if remove(path, what="temporary file"):
                removed.append(path)
    if removed:
        fsync_folder(folder)
    return removed


def temporary_name(target: str) -> str:
    return f".{target}.{_random_part()}.tmp"


def target_of(name: str) -> str | None:
    """The name of the file a temporary file named `name` was made for, if it is one of ours."""
    found = _TEMPORARY.fullmatch(name)
    return None if found is None else found["target"]


def _random_part() -> str:
    return secrets.token_hex(8)


def _temporary_holding(path: Path, content: bytes, *, what: str) -> Path:
    """A new temporary file beside `path`, of mode 0600, holding `content` on disk."""
    make_folder(path.parent)
    temporary, fd = _exclusive_temporary(path, what=what)
    try:
        os.fchmod(fd, MODE)
        _write_all(fd, content)
        os.fsync(fd)
    except OSError as err:
        _remove(temporary)
        raise _failed(path, "cannot be written", err, what=what) from None
    finally:
        os.close(fd)
    return temporary


def _exclusive_temporary(path: Path, *, what: str) -> tuple[Path, int]:
    for _ in range(_NAMES_TRIED):
        temporary = path.with_name(temporary_name(path.name))
        try:
            return temporary, os.open(temporary, _CREATE, MODE)
        except FileExistsError:  # taken: a leftover, or something planted to be written through
            continue
        except OSError as err:
            raise _failed(path, "cannot be written", err, what=what) from None
    raise MaterializeError(
        path, f"cannot be written: {_NAMES_TRIED} random temporary names beside it were all taken", what=what
    )


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _refused(path: Path, doing: str, err: OSError, *, what: str, wanted: str = "a regular file") -> MaterializeError:
    """What stands in the way, when something other than `wanted` is at `path`; else the system's word."""
    kind = _kind_at(path)
    if kind is not None and kind != wanted and err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return MaterializeError(path, f"is {kind}, not {wanted}; {_ADVICE}", what=what)
    return _failed(path, doing, err, what=what)


def _failed(path: Path, doing: str, err: OSError, *, what: str) -> MaterializeError:
    return MaterializeError(path, f"{doing}: {err.strerror or err}", what=what)


_ADVICE = "the client never removes it: move it away"


def _not_regular(mode: int) -> str:
    return f"is {kind_of(mode)}, not a regular file; {_ADVICE}"


def _kind_at(path: Path) -> str | None:
    try:
        return kind_of(os.lstat(path).st_mode)
    except OSError:
        return None
