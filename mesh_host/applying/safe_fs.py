"""Working below a folder by descriptors: no path is looked up twice, no link is followed.

A step finds its folder once: the trusted part (the machine's folders, down to the outermost one the
host declares or owns, whose links `/lib -> usr/lib` are followed) by its path, then each folder
below opened from the one before with `O_DIRECTORY|O_NOFOLLOW`. Everything after goes through the
folder's descriptor: entries are listed with `os.scandir(fd)`, and a rename, unlink, mode or owner
change names one entry of it (`dir_fd=`, never following a link there). A module writing in the
folder can swap a folder for a link at any moment: the host then either holds the folder it opened
(and works in it, wherever it has been moved) or is refused with `LinkRefused`; it never reaches
through the link. Linux only (`O_PATH`, `/proc/self/fd`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
COPY_CHUNK = 1024 * 1024
FOLLOWS_NO_LINK = "the host follows no link it did not make"


class LinkRefused(OSError):
    """A symbolic link stands where a folder is walked into, or where an entry is changed."""

    def __init__(self, name: str, where: str = "there now") -> None:
        super().__init__(errno.ELOOP, f"a symbolic link stands {where}: {FOLLOWS_NO_LINK}", name)


class NotAFolder(OSError):
    """Something other than a folder stands where a folder is walked into."""

    def __init__(self, name: str, kind: str) -> None:
        super().__init__(errno.ENOTDIR, f"{kind} stands where a folder is walked into", name)


def kind(now: os.stat_result) -> str:
    """What stands there, as a message says it."""
    if stat.S_ISLNK(now.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(now.st_mode):
        return "a directory"
    if stat.S_ISREG(now.st_mode):
        return "a file"
    return "something other than a file or directory"


@contextlib.contextmanager
def closing(descriptor: int) -> Iterator[int]:
    """`descriptor`, closed on leaving."""
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def open_trusted(folder: Path) -> int:
    """A descriptor of `folder`, found by its path: links on its way are followed (the machine's)."""
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_child(dir_fd: int, name: str) -> int:
    """A descriptor of the folder `name` in `dir_fd`: a link there is refused, never followed."""
    try:
        return os.open(name, FOLDER, dir_fd=dir_fd)
    except OSError as err:
        if err.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        now = stat_at(dir_fd, name)
        if now is not None and stat.S_ISLNK(now.st_mode):
            raise LinkRefused(name, "at a folder on its way") from None
        raise NotAFolder(name, kind(now) if now is not None else "nothing") from None


def open_below(dir_fd: int, names: Iterable[str]) -> int:
    """A descriptor of the folder reached from `dir_fd` through `names`, each opened without
    following a link (a new descriptor even when `names` is empty)."""
    at = os.dup(dir_fd)
    for name in names:
        with closing(at):
            at = open_child(at, name)
    return at


def open_folder(trusted: Path, names: Iterable[str] = ()) -> int:
    """A descriptor of the folder `trusted`/`names`: `trusted` by its path, each of `names` below
    it without following a link."""
    with closing(open_trusted(trusted)) as top:
        return open_below(top, names)


def stat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """What stands at `name` in `dir_fd`, the link itself for a link; None when nothing does."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def listing(dir_fd: int) -> list[tuple[str, bool]]:
    """The entries of the folder `dir_fd`, sorted by name, each with whether it is a folder (a link is not)."""
    with os.scandir(dir_fd) as entries:
        return sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries)


def make_folder(dir_fd: int, name: str, mode: int = 0o700) -> None:
    os.mkdir(name, mode, dir_fd=dir_fd)


def rename(dir_fd: int, name: str, to_fd: int, to_name: str) -> None:
    """Renames the entry (a link as a link) from one folder to another, both held."""
    os.rename(name, to_name, src_dir_fd=dir_fd, dst_dir_fd=to_fd)


def remove_file(dir_fd: int, name: str) -> None:
    os.unlink(name, dir_fd=dir_fd)


def remove_folder(dir_fd: int, name: str) -> None:
    os.rmdir(name, dir_fd=dir_fd)


def remove_tree(dir_fd: int, name: str) -> None:
    """Removes the entry `name` whole; walked by descriptors (shutil's own walk follows no link)."""
    assert shutil.rmtree.avoids_symlink_attacks  # the descriptor-based walk: Linux has it
    if (now := stat_at(dir_fd, name)) is not None and not stat.S_ISDIR(now.st_mode):
        remove_file(dir_fd, name)
        return
    shutil.rmtree(name, dir_fd=dir_fd)


def open_entry(dir_fd: int, name: str) -> int:
    """An `O_PATH` descriptor of what stands at `name`, a link itself (never where it leads)."""
    return os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def set_attributes(dir_fd: int, name: str, mode: int, owner: tuple[int, int] | None, *, folder: bool) -> None:
    """Sets the owner (when given), then the mode (chown may clear set-id bits), of the file or folder
    at `name`, through a descriptor of it: a link (or anything else) swapped in since it was judged
    is refused, never changed. `O_PATH` opens even what the host cannot read (0200)."""
    with closing(open_entry(dir_fd, name)) as entry:
        now = os.fstat(entry)
        expected = stat.S_ISDIR if folder else stat.S_ISREG
        if stat.S_ISLNK(now.st_mode):
            raise LinkRefused(name)
        if not expected(now.st_mode):
            raise (
                NotAFolder(name, kind(now))
                if folder
                else IsADirectoryError(errno.EISDIR, f"{kind(now)} stands there now, not a file", name)
            )
        through = f"/proc/self/fd/{entry}"  # the inode the descriptor holds: chmod has no fchmod for O_PATH
        try:
            if owner is not None:
                os.chown(through, *owner)
            os.chmod(through, mode)
        except OSError as err:  # said of the entry, not of the descriptor's path
            raise type(err)(err.errno, err.strerror, name) from None


def read_at(dir_fd: int, name: str, limit: int) -> bytes:
    """At most `limit` bytes of the file at `name` (a link refused)."""
    with os.fdopen(_open_file(dir_fd, name), "rb") as stream:
        return stream.read(limit)


def digest_at(dir_fd: int, name: str) -> str:
    """The sha256 of the file at `name` (a link refused)."""
    with os.fdopen(_open_file(dir_fd, name), "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def _open_file(dir_fd: int, name: str) -> int:
    try:
        descriptor = os.open(name, READ, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise LinkRefused(name) from None
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise IsADirectoryError(errno.EISDIR, "not a file", name)
    return descriptor


def write_at(dir_fd: int, name: str, data: bytes | IO[bytes], mode: int, owner: tuple[int, int] | None) -> None:
    """Writes a new file beside `name` with its content (bytes, or a stream copied), owner and mode,
    flushed, then renames it over (a link at `name` is replaced, never followed)."""
    temporary = f".{name}.mesh-host-{os.getpid()}"
    descriptor = os.open(temporary, CREATE, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            if isinstance(data, bytes):
                stream.write(data)
            else:
                shutil.copyfileobj(data, stream, COPY_CHUNK)
            stream.flush()
            if owner is not None:
                os.fchown(stream.fileno(), *owner)
            os.fchmod(stream.fileno(), mode)
            os.fsync(stream.fileno())
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def copy_tree(dir_fd: int, name: str, to_fd: int, to_name: str) -> None:
    """Copies the entry `name` whole into `to_fd` (a link as a link, modes and times kept), every
    folder of it held by a descriptor; what is neither file, folder nor link is refused."""
    now = stat_at(dir_fd, name)
    if now is None:
        raise FileNotFoundError(errno.ENOENT, "gone", name)
    if stat.S_ISLNK(now.st_mode):
        os.symlink(os.readlink(name, dir_fd=dir_fd), to_name, dir_fd=to_fd)
        return
    if stat.S_ISREG(now.st_mode):
        _copy_file(dir_fd, name, to_fd, to_name)
    elif stat.S_ISDIR(now.st_mode):
        make_folder(to_fd, to_name)
        with closing(open_child(dir_fd, name)) as source, closing(open_child(to_fd, to_name)) as target:
            for entry, _ in listing(source):
                copy_tree(source, entry, target, entry)
    else:
        raise OSError(errno.EPERM, f"{kind(now)}: only files, folders and links are copied", name)
    os.chmod(to_name, stat.S_IMODE(now.st_mode), dir_fd=to_fd)
    os.utime(to_name, ns=(now.st_atime_ns, now.st_mtime_ns), dir_fd=to_fd)


def _copy_file(dir_fd: int, name: str, to_fd: int, to_name: str) -> None:
    source = os.fdopen(_open_file(dir_fd, name), "rb")
    with source, os.fdopen(os.open(to_name, CREATE, 0o600, dir_fd=to_fd), "wb") as target:
        shutil.copyfileobj(source, target, COPY_CHUNK)
        target.flush()
        os.fsync(target.fileno())
