"""Running the machine's own tools: every detector and every service step goes through a `Runner`,
so that its logic is tested against a fake one and its behaviour against this machine.

A tool that is not installed is not an error here: `Ran.missing` says so, and the caller says what
that means (a detector: "not installed"; a step: a failed step).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

DEFAULT_TIMEOUT = 10.0  # seconds: a tool that hangs (a daemon not answering) is a verdict, not a hang
MAX_OUTPUT = 64 * 1024  # bytes read of each of stdout and stderr


@dataclass(frozen=True)
class Ran:
    """What running a command gave: its exit code and output (capped), or that it could not run."""

    argv: tuple[str, ...]
    returncode: int | None  # None: it did not run (missing, or timed out)
    stdout: str = ""
    stderr: str = ""
    missing: bool = False  # the program is not on PATH (or not executable)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def said(self) -> str:
        """One line saying how it went, for a verdict: `nft exited 1: Operation not permitted`."""
        name = os.path.basename(self.argv[0]) if self.argv else "?"
        if self.missing:
            return f"{name} not found"
        if self.timed_out:
            return f"{name} did not answer within its time"
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        first = text[0][:200] if text else ""
        return f"{name} exited {self.returncode}" + (f": {first}" if first else "")


def machine_environment(env: Mapping[str, str], *, frozen: bool) -> dict[str, str]:
    """The environment the machine's tools run in: the C locale, so that messages read alike, and,
    from a single-file build, the library path as it was before the build's loader pointed it at the
    libraries it unpacked (a machine's `systemctl` or `nft` must load the machine's own)."""
    environment = dict(env) | {"LC_ALL": "C", "LANG": "C"}
    if frozen:
        original = environment.pop("LD_LIBRARY_PATH_ORIG", None)
        if original is None:
            environment.pop("LD_LIBRARY_PATH", None)
        else:
            environment["LD_LIBRARY_PATH"] = original
    return environment


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> Ran: ...


def run(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, env: Mapping[str, str] | None = None) -> Ran:
    """Runs `argv` (no shell), its output as text in the C locale so that messages read alike."""
    command = tuple(argv)
    environment = machine_environment(os.environ if env is None else env, frozen=getattr(sys, "frozen", False))
    # its output goes to files, of which MAX_OUTPUT is read: a tool that says much is not held whole in memory
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            done = subprocess.run(  # noqa: S603  # argv from our own detectors and steps, never a shell
                command, stdout=out, stderr=err, timeout=timeout, env=environment, check=False
            )
        except FileNotFoundError:
            return Ran(command, None, missing=True)
        except PermissionError as refused:
            return Ran(command, None, stderr=str(refused), missing=True)
        except subprocess.TimeoutExpired:
            return Ran(command, None, timed_out=True)
        return Ran(command, done.returncode, _head(out), _head(err))


def _head(stream: IO[bytes]) -> str:
    stream.seek(0)
    return stream.read(MAX_OUTPUT).decode(errors="replace")
