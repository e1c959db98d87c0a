"""The archive resource: a tar on the machine, verified by its digest, unpacked into a folder whose
members are the host's footprint.

Reading, before anything changes (`verified`): the source is copied into an unnamed temporary file
while its sha256 is taken (a source rewritten meanwhile cannot slip past the digest), the copy is
refused unless its digest is the declared one, then decompressed (gzip, xz, zstd, or none) into a
second unnamed file, bounded, and read with the standard library's `tarfile`. Every member passes
its `data` extraction filter (no absolute name, no device or FIFO, no link leading out) and this
module's own rules: no `..` in a name, nothing inside a link member, a link followed through the
archive's own links staying inside, at most MAX_MEMBERS members, MAX_UNPACKED_BYTES bytes and
MAX_NAMES_CHARS characters of names. One member refused refuses the declaration whole. The
temporary files need room in $TMPDIR for the archive and its tar.

Unpacking (`unpack`) works from descriptors: the folder is opened without following a link, each
member folder from its parent the same way, and every write, rename, chmod, chown and unlink names
its entry relative to its folder's descriptor (`dir_fd=`): a link swapped in anywhere under the
folder is never followed. A file is written whole beside its place and renamed over it; a member
that drifted (content, mode, owner, link target, kind) is put back; a member gone from a new
version of the archive is removed while it is still what the archive held.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import lzma
import os
import stat
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, Protocol

from mesh_host.applying import safe_fs
from mesh_host.applying.footprint import Member
from mesh_host.applying.owners import Ids
from mesh_host.errors import MeshHostError

MAX_SOURCE_BYTES = 1 << 30  # the archive file as it lies on the machine
MAX_UNPACKED_BYTES = 1 << 30  # the tar it holds, decompressed, headers included
MAX_MEMBERS = 10_000
MAX_HEADER_BYTES = 1 << 20  # one read tarfile makes of a header (a long name, a pax header)
MAX_NAME_CHARS = 4096
MAX_NAMES_CHARS = 2 << 20  # all its names: the footprint lists each member (and holds 16 MiB)
MAX_LINKS = 40  # followed through the archive's own links, as the kernel's own limit
CHUNK = 1 << 16
_GZIP, _XZ, _ZSTD = b"\x1f\x8b", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"


class ArchiveRefused(MeshHostError):
    """The archive cannot be unpacked as declared, for `why`: the declaration is refused whole."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why

    def __str__(self) -> str:
        return self.why


class UnpackFailed(MeshHostError):
    """A member cannot be put in its place, for `why`: the step fails."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why

    def __str__(self) -> str:
        return self.why


@dataclass(frozen=True)
class Verified:
    """An archive that passed every check: its members in order (folders first), and their data."""

    tar: tarfile.TarFile
    members: tuple[Member, ...]
    infos: dict[str, tarfile.TarInfo]  # the file members' (a hard link's read as its target)
    size: int  # bytes of its files

    def data(self, name: str) -> IO[bytes]:
        stream = self.tar.extractfile(self.infos[name])
        assert stream is not None  # a file member
        return stream


@contextlib.contextmanager
def verified(source: Path, sha256: str, folder_mode: int) -> Iterator[Verified]:
    """The archive at `source`, checked whole (ArchiveRefused saying why not); its temporary copies
    are gone once the context ends."""
    with tempfile.TemporaryFile() as raw, tempfile.TemporaryFile() as plain:
        _copy_verified(source, sha256, raw)
        _decompress(raw, plain)
        plain.seek(0)
        with _tar(plain) as tar:
            members, infos, size = _members(tar, folder_mode)
            yield Verified(tar, members, infos, size)


def _tar(plain: BinaryIO) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=_Capped(plain), mode="r:")  # type: ignore[call-overload,no-any-return]
    except tarfile.TarError as err:
        raise ArchiveRefused(f"not a tar archive (nor gzip, xz or zstd): {err}") from None


def _copy_verified(source: Path, sha256: str, raw: BinaryIO) -> None:
    try:
        descriptor = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise ArchiveRefused(f"{source} cannot be read: {err.strerror or err}") from None
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ArchiveRefused(f"{source} is not a regular file")
        digest = hashlib.sha256()
        copied = 0
        while chunk := stream.read(CHUNK):
            copied += len(chunk)
            if copied > MAX_SOURCE_BYTES:
                raise ArchiveRefused(f"{source} is larger than the {MAX_SOURCE_BYTES} bytes an archive may be")
            digest.update(chunk)
            raw.write(chunk)
    if digest.hexdigest() != sha256:
        raise ArchiveRefused(
            f"{source} has sha256 {digest.hexdigest()}, the declaration says {sha256}: nothing unpacked"
        )


def _decompress(raw: BinaryIO, plain: BinaryIO) -> None:
    raw.seek(0)
    magic = raw.read(6)
    raw.seek(0)
    kind, stream = _decompressing(magic, raw)
    written = 0
    try:
        while chunk := stream.read(CHUNK):
            written += len(chunk)
            if written > MAX_UNPACKED_BYTES:
                raise ArchiveRefused(f"it unpacks to more than the {MAX_UNPACKED_BYTES} bytes an archive may hold")
            plain.write(chunk)
    except (OSError, EOFError, lzma.LZMAError, ValueError) as err:
        raise ArchiveRefused(f"not a valid {kind} stream: {err}") from None


class _Reading(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _decompressing(magic: bytes, raw: BinaryIO) -> tuple[str, _Reading]:
    if magic.startswith(_GZIP):
        return "gzip", gzip.GzipFile(fileobj=raw, mode="rb")
    if magic.startswith(_XZ):
        return "xz", lzma.LZMAFile(raw)
    if magic.startswith(_ZSTD):
        return "zstd", _zstd(raw)
    return "tar", raw


def _zstd(raw: BinaryIO) -> _Reading:
    """zstd: the standard library's from Python 3.14, its backport (the same module) before."""
    # imported here, when a zstd archive comes: every start of the host does not pay for it
    if sys.version_info >= (3, 14):
        from compression import zstd  # noqa: PLC0415
    else:
        from backports import zstd  # noqa: PLC0415
    return zstd.ZstdFile(raw)


class _Capped:
    """The decompressed tar as tarfile reads it, each single read bounded: a header claiming
    gigabytes (a long name, a pax header) is refused, not read into memory."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_HEADER_BYTES:
            raise ArchiveRefused(f"a member's header of more than the {MAX_HEADER_BYTES} bytes one may hold")
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()


@dataclass
class _Listing:
    folder_mode: int
    members: dict[str, Member] = field(default_factory=dict)  # in order: folders first
    infos: dict[str, tarfile.TarInfo] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # a link member's name -> its target
    size: int = 0
    names: int = 0  # characters of its names and link targets


def _members(tar: tarfile.TarFile, folder_mode: int) -> tuple[tuple[Member, ...], dict[str, tarfile.TarInfo], int]:
    listing = _Listing(folder_mode)
    with tempfile.TemporaryDirectory(prefix="mesh-host-filter-") as scratch:
        for count, info in enumerate(tar, start=1):
            if count > MAX_MEMBERS:
                raise ArchiveRefused(f"more than the {MAX_MEMBERS} members an archive may hold")
            try:
                _member(tar, info, listing, scratch)
            except tarfile.FilterError as err:
                raise ArchiveRefused(f"member {info.name!r}: {err}") from None
    for name, target in listing.links.items():
        if not _resolves_inside(name, target, listing.links):
            raise ArchiveRefused(f"member {name!r}: a link to {target!r}, which leads out of the archive's folder")
    return tuple(listing.members.values()), listing.infos, listing.size


def _member(tar: tarfile.TarFile, info: tarfile.TarInfo, listing: _Listing, scratch: str) -> None:
    name = _plain_name(info.name)
    if not name:
        return  # "." or "./": the folder itself, whose mode is declared
    listing.names += len(name) + len(info.linkname)
    if listing.names > MAX_NAMES_CHARS:
        raise ArchiveRefused(f"its names take more than the {MAX_NAMES_CHARS} characters an archive's may")
    # the extraction filter judges names lexically here: nothing exists in the empty scratch folder
    filtered = tarfile.data_filter(info, scratch)
    _outside_links(name, listing)
    if name in listing.members and not (info.isdir() and listing.members[name].kind == "directory"):
        raise ArchiveRefused(f"member {name!r}: given twice in the archive")
    _folders_of(name, listing)
    if info.isdir():
        listing.members[name] = Member(name=name, kind="directory", mode=listing.folder_mode)
    elif info.issym():
        listing.members[name] = Member(name=name, kind="link", target=info.linkname)
        listing.links[name] = info.linkname
    elif info.isreg() or info.islnk():
        listing.size += info.size if info.isreg() else _hardlinked(info, listing).size
        if listing.size > MAX_UNPACKED_BYTES:
            raise ArchiveRefused(f"its files hold more than the {MAX_UNPACKED_BYTES} bytes an archive may hold")
        listing.infos[name] = info
        assert filtered.mode is not None  # the data filter gives every file a mode
        listing.members[name] = Member(name=name, kind="file", mode=filtered.mode, sha256=_digest(tar, info))
    else:  # the data filter refuses the other kinds; one it would let through is refused here
        raise ArchiveRefused(f"member {name!r}: neither a file, a folder nor a link")


def _plain_name(given: str) -> str:
    if given.startswith("/"):
        raise ArchiveRefused(f"member {given!r}: an absolute path")
    if len(given) > MAX_NAME_CHARS or "\0" in given:
        raise ArchiveRefused(f"member {given[:80]!r}: a name longer than {MAX_NAME_CHARS} characters")
    parts = [part for part in given.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveRefused(f"member {given!r}: '..' in its path")
    return "/".join(parts)


def _outside_links(name: str, listing: _Listing) -> None:
    for folder in PurePosixPath(name).parents:
        if str(folder) in listing.links:
            raise ArchiveRefused(f"member {name!r}: inside the link member {str(folder)!r}")


def _folders_of(name: str, listing: _Listing) -> None:
    """The member's folders, each a folder member before it (added when the archive lists none)."""
    for folder in reversed(PurePosixPath(name).parents[:-1]):
        held = listing.members.get(str(folder))
        if held is None:
            listing.members[str(folder)] = Member(name=str(folder), kind="directory", mode=listing.folder_mode)
        elif held.kind != "directory":
            raise ArchiveRefused(f"member {name!r}: its folder {str(folder)!r} is a {held.kind} in the archive")


def _hardlinked(info: tarfile.TarInfo, listing: _Listing) -> tarfile.TarInfo:
    target = listing.infos.get(_plain_name(info.linkname))
    if target is None:
        raise ArchiveRefused(f"member {info.name!r}: a hard link to {info.linkname!r}, not a file before it")
    return target


def _digest(tar: tarfile.TarFile, info: tarfile.TarInfo) -> str:
    stream = tar.extractfile(info)
    assert stream is not None
    digest = hashlib.sha256()
    with stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _resolves_inside(name: str, target: str, links: dict[str, str]) -> bool:
    """Whether the link `name` -> `target`, followed through the archive's own links as the kernel
    would once unpacked, stays inside the folder (the filter judges it lexically, and misses `d/..`
    where `d` is itself a link to `.`)."""
    pending = [*name.split("/")[:-1], *target.split("/")]
    done: list[str] = []
    followed = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return False
            done.pop()
            continue
        done.append(part)
        linked = links.get("/".join(done))
        if linked is not None:
            followed += 1
            if followed > MAX_LINKS or linked.startswith("/"):
                return False
            done.pop()
            pending[:0] = linked.split("/")
    return True


# unpacking

Say = Callable[[str, str], None]  # (a member's name, '' for the folder itself; what was done to it)


@dataclass
class Tree:
    """The archive's folder (`base` in the folder `parent` holds; None where that folder is not there)
    and its member folders, each opened from its parent without following a link, worked on through
    their descriptors."""

    parent: int | None
    base: str
    dry_run: bool
    change: Say
    note: Say
    folders: dict[str, int] = field(default_factory=dict)
    vanishing: set[str] = field(default_factory=set)  # members removed (a dry run: that would be)

    def close(self, name: str | None = None) -> None:
        for opened in [name] if name is not None else list(self.folders):
            if opened in self.folders:
                os.close(self.folders.pop(opened))

    def folder(self, name: str) -> int | None:
        """The member folder `name` ('' the archive's folder); None where it is not there (yet)."""
        try:
            return self.opened(name)
        except FileNotFoundError:
            return None

    def opened(self, name: str) -> int:
        if name not in self.folders:
            parent, base = _split(name) if name else ("", self.base)
            at = self.opened(parent) if name else self.parent
            if at is None:
                raise FileNotFoundError(errno.ENOENT, "its folder is not there", self.base)
            self.folders[name] = _open_folder(at, base, name)
        return self.folders[name]

    def look(self, name: str) -> tuple[int | None, str, os.stat_result | None]:
        parent, base = _split(name)
        folder = self.folder(parent)
        return folder, base, None if folder is None else safe_fs.stat_at(folder, base)


def unpack(
    tree: Tree,
    archive: Verified,
    previous: tuple[Member, ...],
    ids: Ids | None,
    record: Callable[[tuple[Member, ...]], None],
) -> None:
    """Brings every member to what `archive` holds and removes those gone from it; `record` is given
    what the host holds of it once done, or once failed (what it had reached by then)."""
    unpacking = _Unpacking(tree, archive, ids)
    before = {member.name: member for member in previous}
    gone: set[str] = set()
    fresh = 0
    try:
        for member in archive.members:
            fresh += unpacking.put(member, before.get(member.name))
        for member in reversed(previous):
            if member.name not in unpacking.done:
                if _remove(tree, member, "removed (no longer in the archive)"):
                    gone.add(member.name)
                else:
                    unpacking.done[member.name] = member
    finally:
        done = unpacking.done
        record((*done.values(), *(m for m in previous if m.name not in done and m.name not in gone)))
    if fresh:
        tree.change("", f"unpacked {fresh} member{'s' * (fresh > 1)} ({archive.size} bytes of files)")


@dataclass
class _Unpacking:
    tree: Tree
    archive: Verified
    ids: Ids | None
    done: dict[str, Member] = field(default_factory=dict)  # what the host holds now, as recorded

    def put(self, member: Member, before: Member | None) -> bool:
        """Puts `member` in place; True when it was newly unpacked (said in one line for all of them)."""
        folder, base, now = self.tree.look(member.name)
        self.done[member.name] = member.model_copy(update={"created": before.created if before else now is None})
        said = [] if before is None and now is None else self.differences(folder, base, member, now)
        for difference in said:
            self.tree.change(member.name, difference)
        if not self.tree.dry_run and (said or now is None):
            if folder is None:  # each folder on the way was put in place before: one removed since
                raise UnpackFailed(f"{member.name}: its folder went away while the host unpacked")
            self.write(member, folder, base, now)
        return before is None and now is None

    def differences(self, folder: int | None, base: str, member: Member, now: os.stat_result | None) -> list[str]:
        if now is None or folder is None:
            return ["put back (it was gone)"]
        kind = _kind(now)
        if kind != member.kind:
            if kind == "directory":
                raise UnpackFailed(f"{member.name}: a folder stands where the archive's {member.kind} goes")
            return [f"put back (a {kind} stood there)"]
        if member.kind == "file" and not _same_content(folder, base, now, member, self.archive):
            return ["put back (its content differed)"]
        said = []
        if member.kind == "link":
            target = os.readlink(base, dir_fd=folder)
            if target != member.target:
                return [f"put back (it led to {target})"]
        elif member.mode is not None and stat.S_IMODE(now.st_mode) != member.mode:
            said.append(f"mode {stat.S_IMODE(now.st_mode):04o} -> {member.mode:04o}")
        if self.ids is not None and (now.st_uid, now.st_gid) != (self.ids.uid, self.ids.gid):
            said.append(f"owner {Ids(now.st_uid, now.st_gid)} -> {self.ids}")
        return said

    def write(self, member: Member, folder: int, base: str, now: os.stat_result | None) -> None:
        if member.kind == "directory":
            if now is not None and _kind(now) != "directory":
                os.unlink(base, dir_fd=folder)
                now = None
            if now is None:
                os.mkdir(base, 0o700, dir_fd=folder)
            assert member.mode is not None
            _attributes(self.tree.opened(member.name), member.mode, self.ids)
        elif member.kind == "file":
            if now is not None and _kind(now) == "file" and _same_content(folder, base, now, member, self.archive):
                _attributes_at(folder, base, member, self.ids)
            else:
                with self.archive.data(member.name) as data:
                    _write_file(folder, base, data, member, self.ids)
        else:
            assert member.target is not None
            _write_link(folder, base, member.target, self.ids)


def remove(tree: Tree, members: tuple[Member, ...]) -> tuple[Member, ...]:
    """Removes an archive's members, last unpacked first, each while it is still what the archive
    held; returns those kept (a folder holding what the archive did not unpack)."""
    return tuple(member for member in reversed(members) if not _remove(tree, member, "removed"))[::-1]


def _remove(tree: Tree, member: Member, said: str) -> bool:
    """Removes a member while it is what the archive held; False when the host keeps it, for now."""
    folder, base, now = tree.look(member.name)
    if now is None or folder is None:
        return True  # already gone: forgotten
    if not member.created:
        tree.note(member.name, "released: left as it is, it was there before the host unpacked it")
        return True
    if _kind(now) != member.kind or not _still_held(folder, base, now, member):
        tree.note(member.name, "released: left in place, it is no longer what the archive held")
        return True
    if member.kind == "directory":
        with os.scandir(tree.opened(member.name)) as entries:
            if any(f"{member.name}/{entry.name}" not in tree.vanishing for entry in entries):
                tree.note(member.name, "kept: it holds what the archive did not unpack; removed once empty")
                return False
        tree.close(member.name)
    tree.change(member.name, said)
    tree.vanishing.add(member.name)
    if not tree.dry_run:
        if member.kind == "directory":
            os.rmdir(base, dir_fd=folder)
        else:
            os.unlink(base, dir_fd=folder)
    return True


def _still_held(folder: int, base: str, now: os.stat_result, member: Member) -> bool:
    if member.kind == "file":
        return _digest_at(folder, base, now) == member.sha256
    if member.kind == "link":
        return os.readlink(base, dir_fd=folder) == member.target
    return True


def _open_folder(parent: int, base: str, name: str) -> int:
    try:
        return safe_fs.open_child(parent, base)
    except (safe_fs.LinkRefused, safe_fs.NotAFolder):
        raise UnpackFailed(
            f"{name or 'its folder'}: a link or a file stands where a folder of the archive goes: "
            f"{safe_fs.FOLLOWS_NO_LINK}"
        ) from None


def _split(name: str) -> tuple[str, str]:
    parent, _, base = name.rpartition("/")
    return parent, base


def _kind(now: os.stat_result) -> str:
    if stat.S_ISDIR(now.st_mode):
        return "directory"
    if stat.S_ISREG(now.st_mode):
        return "file"
    if stat.S_ISLNK(now.st_mode):
        return "link"
    return "special file"


def _same_content(folder: int, base: str, now: os.stat_result, member: Member, archive: Verified) -> bool:
    info = archive.infos.get(member.name)
    if info is not None and info.isreg() and now.st_size != info.size:
        return False
    return _digest_at(folder, base, now) == member.sha256


def _digest_at(folder: int, base: str, now: os.stat_result) -> str | None:
    if now.st_size > MAX_UNPACKED_BYTES:
        return None  # larger than any member: not read
    try:
        return safe_fs.digest_at(folder, base)
    except OSError:
        return None  # swapped for a link, or unreadable: not what the host wrote


def _attributes(descriptor: int, mode: int, ids: Ids | None) -> None:
    if ids is not None:
        os.fchown(descriptor, ids.uid, ids.gid)
    os.fchmod(descriptor, mode)  # after chown, which may clear the set-id bits


def _attributes_at(folder: int, base: str, member: Member, ids: Ids | None) -> None:
    descriptor = os.open(base, safe_fs.READ, dir_fd=folder)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise UnpackFailed(f"{base}: swapped for something else while the host looked")
        assert member.mode is not None
        _attributes(descriptor, member.mode, ids)
    finally:
        os.close(descriptor)


def _write_file(folder: int, base: str, data: IO[bytes], member: Member, ids: Ids | None) -> None:
    """Writes the member whole beside its place, then renames it over what stands there."""
    assert member.mode is not None
    safe_fs.write_at(folder, base, data, member.mode, None if ids is None else (ids.uid, ids.gid))


def _write_link(folder: int, base: str, target: str, ids: Ids | None) -> None:
    temporary = f".{base}.mesh-host-{os.getpid()}"
    os.symlink(target, temporary, dir_fd=folder)
    try:
        if ids is not None:
            os.chown(temporary, ids.uid, ids.gid, dir_fd=folder, follow_symlinks=False)
        os.rename(temporary, base, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
