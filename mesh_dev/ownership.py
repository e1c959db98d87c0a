"""One dev loop per state folder: the folder's lock, taken before anything in it is touched.

A second loop on the same folder would start a second nats-server on the first one's JetStream
store, rewrite the demo's files and, on its way out, remove the first one's nats context. `owned`
takes an exclusive `flock` on `<state>/mesh-provisioner-dev.lock` without waiting, or refuses,
naming who holds it. The kernel releases a `flock` when the last descriptor of it closes, however
its process ended, so the file a killed loop leaves behind never blocks the next one. The local
nats-server is given the descriptor too (`LocalNats`'s `keep_fds`): a server that outlived a killed
loop still holds the store, and the next loop is refused, naming that server, rather than starting
a second one on the same data.

Opening the file creates it when missing and changes nothing when it exists; only the loop that
took the lock writes into it, the pid and command line of its holder, which the refusal quotes.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from registry.errors import RegistryError
from registry.runtime import terminal_safe

LOCK_FILE = "mesh-provisioner-dev.lock"
_HOLDER_BYTES = 4096  # what is read of the file: the holder's line, a pid and a command


class StateInUse(RegistryError):
    """The state folder is locked by another process; nothing was changed."""

    def __init__(self, state_dir: Path, holders: list[tuple[int, str]], recorded: int | None = None) -> None:
        self.state_dir = state_dir
        self.holders = holders
        who = " and ".join(f"{name} (pid {pid})" for pid, name in holders) or "another process"
        super().__init__(
            f"{terminal_safe(str(state_dir))} is in use by {who}: a second dev loop there would start a second "
            f"nats-server on the same data, so nothing was changed; {_what_to_do(holders, recorded)}, or give "
            f"another --state-dir"
        )


def _what_to_do(holders: list[tuple[int, str]], recorded: int | None) -> str:
    if recorded in {pid for pid, _ in holders}:  # the loop itself: it stops its nats-server
        return f"stop it first (Ctrl-C in its terminal, or kill {recorded})"
    if holders:
        return f"a killed dev loop left it running: kill {' '.join(str(pid) for pid, _ in holders)} first"
    return "stop it first"


@contextmanager
def owned(state_dir: Path) -> Iterator[int]:
    """Holds `state_dir`'s lock for the block, yielding its descriptor (for a child to inherit);
    raises `StateInUse` at once when another process holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            recorded = _recorded(fd)
            raise StateInUse(state_dir, holders(path, recorded), recorded and recorded[0]) from None
        _record_self(fd)
        yield fd
    finally:
        os.close(fd)


def _record_self(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}\n".encode(), 0)


def _recorded(fd: int) -> tuple[int, str] | None:
    """The pid and command line the holder wrote, when it did."""
    text = os.pread(fd, _HOLDER_BYTES, 0).decode("utf-8", errors="replace")
    pid, _, command = text.partition("\n")[0].partition(" ")
    return (int(pid), command) if pid.isdigit() else None


def holders(path: Path, recorded: tuple[int, str] | None) -> list[tuple[int, str]]:
    """Who holds `path` open, each a pid and a name: the processes `/proc` shows with it open (the
    loop, and a nats-server it started), else the one the file records."""
    found = [(pid, _name(pid)) for pid in _openers(path.resolve())]
    if found or recorded is None:
        return found
    pid, command = recorded
    return [(pid, terminal_safe(command[:200]) or "a process")]


def _openers(path: Path) -> list[int]:
    """The processes with `path` open, as far as this user may see (Linux's `/proc`)."""
    pids = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(link) == str(path) for link in fd_dir.iterdir()):
                pids.append(int(fd_dir.parent.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return sorted(p for p in pids if p != os.getpid())


def _name(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()[:_HOLDER_BYTES].split(b"\0")
    except OSError:
        return "a process"
    words = [Path(command[0].decode(errors="replace")).name, *(w.decode(errors="replace") for w in command[1:])]
    # `python -m mesh_dev.cli ...` and a console script both read as what they run
    if len(words) > 2 and words[1] == "-m":
        words = words[2:]
    elif len(words) > 1 and words[0].startswith("python"):
        words = [Path(words[1]).name, *words[2:]]
    return terminal_safe(" ".join(filter(None, words))[:200])
