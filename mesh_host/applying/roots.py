"""`--root`: the folder every path the host touches is prefixed with, for tests and image building.

A declaration names machine paths (`/etc/app/app.toml`); under a root they are found below it
(`ROOT/etc/app/app.toml`). An image's folders hold absolute links (`/etc/mtab -> /proc/...`,
`/lib -> usr/lib`), so a path's folders are resolved inside the root as a chroot would: an
absolute link is taken from the root again, never from the machine's `/`. The last part of a
path is never followed: what stands there, link or not, is the step's to judge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mesh_host.applying import safe_fs
from mesh_host.errors import MeshHostError

MACHINE = Path("/")
MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup

STATE_OF_ROOT = PurePosixPath("/var/lib/mesh-host")  # --state when the host runs as root
STATE_IN_HOME = PurePosixPath(".local/state/mesh-host")  # --state otherwise, in the user's home
MOVED_IN_HOME = PurePosixPath(".local/state/mesh-moved")  # where move-out puts what it moves


class RootError(MeshHostError):
    """A path cannot be found inside the root: too many links on its way."""


@dataclass(frozen=True)
class Root:
    """The machine (`/`) or a folder standing for it."""

    base: Path = MACHINE

    @property
    def is_machine(self) -> bool:
        return self.base == MACHINE

    def real(self, path: PurePosixPath) -> Path:
        """Where the machine path `path` is on this filesystem."""
        if self.is_machine:
            return Path(path)
        return self.base / self.resolved(path).relative_to("/")

    def resolved(self, path: PurePosixPath) -> PurePosixPath:
        """`path` with the links among its folders followed inside the root (its last part as it is)."""
        if self.is_machine or len(path.parts) < 2:
            return path
        done = PurePosixPath("/")
        pending = list(path.parts[1:])
        links = 0
        while len(pending) > 1:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                done = done.parent
                continue
            on_disk = self.base / (done / name).relative_to("/")
            if not on_disk.is_symlink():
                done = done / name
                continue
            links += 1
            if links > MAX_LINKS:
                raise RootError(f"{path}: more than {MAX_LINKS} links on its way under {self.base}")
            target = PurePosixPath(os.readlink(on_disk))
            if target.is_absolute():
                done = PurePosixPath("/")
            pending[:0] = [part for part in target.parts if part != "/"]
        return done / pending[0] if pending else done

    def folder(self, path: PurePosixPath) -> Path:
        """Where the machine path `path` is, a link there followed too (inside the root): a folder to go into."""
        return self.real(path / "_").parent

    def open_folder(self, folder: PurePosixPath, top: PurePosixPath | None = None) -> int:
        """A descriptor of the machine folder `folder`. Given `top` (`folder` or a folder of it: the
        outermost the host declares or owns), the folders above `top` are found by path (the
        machine's links followed, inside the root), `top` and each below opened without following a
        link (safe_fs); without, `folder` is found by path."""
        if top is None:
            return safe_fs.open_trusted(self.folder(folder))
        return safe_fs.open_folder(self.folder(top.parent), folder.relative_to(top.parent).parts)

    def makedirs(self, path: PurePosixPath, mode: int = 0o700) -> Path:
        """Makes the folders of the machine path `path` that are missing (inside the root) and returns it."""
        for folder in [*reversed(path.parents), path]:
            real = self.folder(folder)
            if not real.is_dir():
                real.mkdir(mode=mode)
        return self.folder(path)

    def under(self, path: PurePosixPath) -> str:
        """The machine path as a message says it: `/etc/app`, or `/etc/app (under /tmp/image)`."""
        return str(path) if self.is_machine else f"{path} (under {self.base})"


def default_state(home: PurePosixPath, *, privileged: bool) -> PurePosixPath:
    """Where the footprint is kept when --state is not given (a machine path, under --root too)."""
    return STATE_OF_ROOT if privileged else home / STATE_IN_HOME


def moved_folder(home: PurePosixPath, module: str) -> PurePosixPath:
    """Where move-out puts what it moves for `module` (a machine path, under --root too)."""
    return home / MOVED_IN_HOME / module
