"""The operator's files read bounded: the settings file, the domains file, the grants, the mesh
file, `sites.json`, a `nats` context, a seed.

Each was read whole (`Path.read_text`), so a file far larger than any such file can be was read
into memory entire, and a FIFO put in its place blocked the program before it said a word. Here a
file is opened without blocking, judged on the descriptor opened (a regular file, or a refusal that
says what is there), and read no further than its bound plus one byte, so that a longer file is
refused by its size.

A refusal is an `OSError` with `strerror` saying why, as `open` raises one for a missing file: every
caller already turns that into its own error naming the file and the setting.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # non-blocking: a FIFO in the file's place never blocks


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file at `path` (a link to one is followed), if it holds at most
    `max_bytes`; an `OSError` otherwise, its `strerror` saying why."""
    fd = os.open(path, _OPEN)
    try:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, "it is a folder, not a regular file", str(path))
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, f"it is {kind_of(status.st_mode)}, not a regular file", str(path))
        # its size first, so that a file far too large is not read at all; the read's own bound
        # holds for one that grows meanwhile
        data = b"" if status.st_size > max_bytes else read_at_most(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if status.st_size > max_bytes or len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"it is larger than the {max_bytes:,} bytes such a file may be", str(path))
    return data


def read_bounded_text(path: Path, max_bytes: int) -> str:
    """`read_bounded`, decoded as UTF-8; a text that is not UTF-8 is an `OSError` too."""
    try:
        return read_bounded(path, max_bytes).decode("utf-8")
    except UnicodeDecodeError as err:
        raise OSError(errno.EILSEQ, f"it is not UTF-8 text (byte {err.start:,})", str(path)) from None


def read_at_most(fd: int, limit: int) -> bytes:
    """At most `limit` bytes of the open file `fd`, from where it stands."""
    chunks: list[bytes] = []
    while limit > 0 and (chunk := os.read(fd, min(limit, 1 << 20))):
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def kind_of(mode: int) -> str:
    """What a file of `mode` is, in words."""
    kinds = {
        stat.S_ISREG: "a regular file",
        stat.S_ISDIR: "a folder",
        stat.S_ISLNK: "a symbolic link",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "an unknown kind of file")
