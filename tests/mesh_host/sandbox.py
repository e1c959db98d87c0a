"""A machine under a temporary --root, worked on as root or as an unprivileged user (`nobody`).

The unprivileged case runs in a forked child that drops to nobody's ids (setgroups, setgid,
setuid) and sends back its result, or the exception it raised, pickled: this interpreter lives
under /root, which nobody cannot enter, so `runuser -u nobody -- python` cannot start it, while a
child of this process already has it loaded. Run unprivileged, the suite does both cases as
itself and skips the root one.
"""

from __future__ import annotations

import json
import os
import pickle
import pwd
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeVar

import pytest

from mesh_host.applying.apply import Host, Report, apply
from mesh_host.applying.footprint import Footprint, load
from mesh_host.applying.roots import Root
from mesh_host.declaration import parse_declaration
from mesh_host.runner import Runner, run

T = TypeVar("T")
USERS = ("root", "nobody")
HOME = PurePosixPath("/home/operator")  # the home whose mesh-moved receives strays, under the root
UNPRIVILEGED = "nobody"


def as_user(user: str, task: Callable[[], T]) -> T:
    """`task()` run as `user`: here when this process is already that user (or unprivileged), else in a child."""
    if user == "root" or os.geteuid() != 0:
        return task()
    entry = pwd.getpwnam(user)
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe and never returns
        os.close(reading)
        _report_as(entry.pw_uid, entry.pw_gid, task, writing)
    os.close(writing)
    with os.fdopen(reading, "rb") as stream:
        data = stream.read()
    os.waitpid(child, 0)
    kind, value, trace = pickle.loads(data)  # noqa: S301  # our own child's answer
    if kind == "raised":
        value.add_note(f"raised as {user}, in the child:\n{trace}")
        raise value
    return value  # type: ignore[no-any-return]


def _report_as(uid: int, gid: int, task: Callable[[], object], writing: int) -> None:  # pragma: no cover
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        answer: tuple[str, object, str] = ("returned", task(), "")
    except BaseException as err:  # everything goes back to the parent
        answer = ("raised", err, traceback.format_exc())
    try:
        data = pickle.dumps(answer)
    except Exception as err:
        data = pickle.dumps(("raised", RuntimeError(f"unpicklable answer: {err!r}"), traceback.format_exc()))
    with os.fdopen(writing, "wb") as stream:
        stream.write(data)
    os._exit(0)


@dataclass
class Machine:
    """A --root and a --state in a temporary folder, owned by `user`, who applies there."""

    user: str
    base: Path
    runner: Runner = run

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.user).pw_uid if os.geteuid() == 0 else os.geteuid()

    @property
    def gid(self) -> int:
        return pwd.getpwnam(self.user).pw_gid if os.geteuid() == 0 else os.getegid()

    @property
    def privileged(self) -> bool:
        return self.user == "root" and os.geteuid() == 0

    def host(self) -> Host:
        return Host(Root(self.root), self.state, HOME, self.runner)

    def apply(self, declaration: dict[str, object], *, dry_run: bool = False) -> Report:
        text = json.dumps(declaration)
        host = self.host()
        return as_user(self.user, lambda: apply(parse_declaration(text, "test.json"), host, dry_run=dry_run))

    def footprint(self) -> Footprint:
        return load(self.state)

    def real(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def stranger(self, path: str, content: str = "not the host's\n", mode: int = 0o644) -> Path:
        """A file someone else put there (owned by the user applying, so that it can move it)."""
        real = self.real(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        real.write_text(content)
        real.chmod(mode)
        self.give(real)
        return real

    def folder(self, path: str, mode: int = 0o755) -> Path:
        """A folder someone else made (owned by the user applying)."""
        real = self.real(path)
        real.mkdir(parents=True, exist_ok=True)
        real.chmod(mode)
        self.give(real)
        return real

    def give(self, real: Path) -> None:
        if os.geteuid() == 0:
            for path in [real, *real.parents]:
                if path == self.base:
                    break
                os.chown(path, self.uid, self.gid, follow_symlinks=False)


def machine_for(user: str) -> Iterator[Machine]:
    """The body of a `machine` fixture parametrized over USERS."""
    if user == "root" and os.geteuid() != 0:
        pytest.skip("the privileged case needs this suite run as root")
    base = Path(tempfile.mkdtemp(prefix="mesh-host-"))  # not pytest's tmp_path: its folders are root's alone
    machine = Machine(user, base)
    (base / "root").mkdir()
    base.chmod(0o755)
    machine.give(base / "root")
    if os.geteuid() == 0:
        os.chown(base, machine.uid, machine.gid)
    try:
        yield machine
    finally:
        shutil.rmtree(base, ignore_errors=True)


def snapshot(top: Path) -> dict[str, tuple[int, ...]]:
    """Every entry under `top` as (inode, mode, uid, gid, size, mtime, ctime): equal snapshots, nothing
    touched, not even a chmod or chown to what already was (which moves ctime)."""
    seen: dict[str, tuple[int, ...]] = {}
    for folder, names, files in os.walk(top):
        for name in [*names, *files]:
            path = Path(folder) / name
            st = path.lstat()
            seen[str(path.relative_to(top))] = (
                st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns
            )  # fmt: skip
    return seen
