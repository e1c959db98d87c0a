"""The footprint: what this host applied and still owns, kept in `--state` as footprint.json.

It is written after each step that changed it, atomically (a temporary file beside it, flushed to
disk, renamed over it, the folder flushed), so that a host stopped at any point finds what it did.
Each entry says whether the host created the thing (`created`) or found it there and adopted it:
only what it created is removed once no longer declared. The order is the order of application;
what is no longer declared is removed in the reverse order. An entry keeps the resource's `id`:
the same id declared at another path is the same resource, moved.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mesh_host.declaration import AbsolutePath, Id, Module, Owner, Policy, Sha256, Unit
from mesh_host.errors import StateError, StateHeld

VERSION = 1
FILE = "footprint.json"
LOCK = "lock"
MAX_FOOTPRINT_BYTES = 16 * 1024 * 1024


class _Owned(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    declared: bool = True  # False: no longer declared, kept for now (a folder holding what is not the host's)
    id: Id | None = None


class OwnedDirectory(_Owned):
    type: Literal["directory"] = "directory"
    path: AbsolutePath  # checked as a declaration's: a footprint edited by hand names nothing the host would not
    created: bool
    mode: int
    owner: Owner | None = None
    unknown: Policy | None = None
    module: Module | None = None
    knows: tuple[AbsolutePath, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return ("directory", self.path)


class OwnedFile(_Owned):
    type: Literal["file"] = "file"
    path: AbsolutePath
    created: bool
    mode: int
    owner: Owner | None = None
    sha256: str  # of the content written

    @property
    def key(self) -> tuple[str, str]:
        return ("file", self.path)


class Member(BaseModel):
    """One member an archive unpacked: its path inside the archive's folder, and what it is there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # relative, plain: "bin/tool"
    kind: Literal["file", "directory", "link"]
    mode: int | None = None  # a link has none
    sha256: Sha256 | None = None  # a file's content
    target: str | None = None  # a link's
    created: bool = True  # False: something stood there before the host unpacked it, not removed with it


class OwnedArchive(_Owned):
    type: Literal["archive"] = "archive"
    path: AbsolutePath
    created: bool  # the folder
    mode: int
    owner: Owner | None = None
    unknown: Policy | None = None
    module: Module | None = None
    knows: tuple[AbsolutePath, ...] = ()
    source: AbsolutePath
    sha256: Sha256
    members: tuple[Member, ...] = ()  # in the order unpacked: folders before what they hold

    @property
    def key(self) -> tuple[str, str]:
        return ("archive", self.path)


class Before(BaseModel):
    """How a unit was before the host first applied it, to be returned to once no longer declared."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    running: bool
    enabled: bool


class OwnedService(_Owned):
    type: Literal["service"] = "service"
    unit: Unit
    state: Literal["running", "stopped"]
    enabled: bool | None  # None: never declared, so never changed, never returned
    before: Before

    @property
    def key(self) -> tuple[str, str]:
        return ("service", self.unit)


Owned = Annotated[OwnedDirectory | OwnedFile | OwnedArchive | OwnedService, Field(discriminator="type")]
AnyOwned = OwnedDirectory | OwnedFile | OwnedArchive | OwnedService


class Footprint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    footprint: Literal[1] = 1
    owned: tuple[Owned, ...] = ()

    def entry(self, key: tuple[str, str]) -> AnyOwned | None:
        return next((owned for owned in self.owned if owned.key == key), None)

    def named(self, kind: str, id_: str) -> AnyOwned | None:
        """The entry of the `kind` whose resource had the id `id_`."""
        return next((owned for owned in self.owned if owned.key[0] == kind and owned.id == id_), None)

    def replacing(self, key: tuple[str, str], owned: AnyOwned) -> Footprint:
        """This footprint with the entry at `key` replaced by `owned`, in its place (a resource moved)."""
        return Footprint(owned=tuple(owned if entry.key == key else entry for entry in self.owned))

    def keeping(self, owned: AnyOwned) -> Footprint:
        """This footprint with `owned` recorded: in its place when it was there, else last (itself,
        not a copy, when it holds `owned` already: the common case, each step of an apply that changed nothing)."""
        found = self.entry(owned.key)
        if found == owned:
            return self
        if found is None:
            return Footprint(owned=(*self.owned, owned))
        return Footprint(owned=tuple(owned if entry.key == owned.key else entry for entry in self.owned))

    def forgetting(self, key: tuple[str, str]) -> Footprint:
        return Footprint(owned=tuple(entry for entry in self.owned if entry.key != key))


def load(state: Path) -> Footprint:
    """The footprint kept in `state`; an empty one where none was ever written."""
    path = state / FILE
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_FOOTPRINT_BYTES + 1)
    except FileNotFoundError:
        return Footprint()
    except OSError as err:
        raise StateError(str(path), f"cannot be read: {err.strerror or err}") from None
    if len(data) > MAX_FOOTPRINT_BYTES:
        raise StateError(str(path), f"larger than {MAX_FOOTPRINT_BYTES} bytes: not a footprint this host wrote")
    try:
        return Footprint.model_validate_json(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise StateError(
            str(path),
            f"not a footprint this host reads ({where}: {first['msg']}); nothing was changed. Move it away to start "
            "afresh: the host then owns nothing it applied before",
        ) from None


def save(state: Path, footprint: Footprint) -> None:
    """Replaces the footprint in `state` at once: readers see the old one or the new one, whole."""
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state / FILE
    temporary = state / f".{FILE}.{os.getpid()}"
    try:
        data = footprint.model_dump_json(indent=2).encode() + b"\n"
        if len(data) > MAX_FOOTPRINT_BYTES:  # written, it could not be read back
            raise StateError(
                str(path), f"would be larger than the {MAX_FOOTPRINT_BYTES} bytes it may hold: not written"
            )
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
        _flush_folder(state)
    except OSError as err:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise StateError(str(path), f"cannot be written: {err.strerror or err}") from None


def _flush_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def holding(state: Path) -> Iterator[None]:
    """Holds `state` for one apply: a second host applying with the same state is refused, not interleaved."""
    try:
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(state / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as err:
        raise StateError(str(state), f"cannot be used: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateHeld(str(state), "another mesh-host is applying with this state (its lock is held)") from None
        yield
    finally:
        os.close(descriptor)
