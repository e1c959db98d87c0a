"""What a detector may ask of the machine, behind one seam so that its logic is tested against a
fake runner and files under a temporary folder, and its behaviour against this machine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mesh_host.runner import Ran, Runner

MAX_READ = 64 * 1024  # bytes read of any one file: /proc and /sys files are small, a runaway one is not read whole


@dataclass(frozen=True)
class Capability:
    """A detector's verdict: whether this machine can be asked to do `name`, and how it knows."""

    name: str
    available: bool
    how: str


@dataclass(frozen=True)
class Probe:
    runner: Runner
    system: Path  # where /proc, /sys, /run and /tmp are read: "/" but under a test
    environ: Mapping[str, str]
    euid: int
    timeout: float  # seconds each command may take

    def run(self, *argv: str) -> Ran:
        return self.runner(argv, timeout=self.timeout)

    def path(self, absolute: str) -> Path:
        return self.system / absolute.lstrip("/")

    def read(self, absolute: str) -> str:
        """The text of a file of the machine (capped), raising `OSError` as reading it did."""
        return read_capped(self.path(absolute))


def read_capped(path: Path, limit: int = MAX_READ) -> str:
    with path.open("rb") as file:
        return file.read(limit).decode(errors="replace")


def why_not_read(err: OSError) -> str:
    """`No such file or directory`, not `[Errno 2] No such file or directory: '/proc/1/comm'`."""
    return err.strerror or type(err).__name__


def message(ran: Ran) -> str:
    """What a tool said when it failed: its first line that is not a warning (docker first warns of
    a config file it cannot read, then says why it failed), or how it went if it said nothing."""
    if ran.missing or ran.timed_out:
        return ran.said()
    for line in (ran.stderr + "\n" + ran.stdout).splitlines():
        if line.strip() and not line.lstrip().upper().startswith("WARNING"):
            return line.strip()[:200]
    return ran.said()


def failed(ran: Ran) -> str:
    """`nft exited 1: Operation not permitted (you must be root)`, `nft not found`."""
    if ran.missing or ran.timed_out:
        return ran.said()
    said = message(ran)
    exited = f"{Path(ran.argv[0]).name} exited {ran.returncode}"
    return exited if said == ran.said() else f"{exited}: {said}"
