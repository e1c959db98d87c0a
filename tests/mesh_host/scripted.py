"""A fake runner answering from a script, for the detectors' logic: the longest command prefix
it was given answers; anything else is a program that is not installed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mesh_host.runner import DEFAULT_TIMEOUT, Ran


class Answer:
    def __init__(self, returncode: int | None = 0, stdout: str = "", stderr: str = "", *, timed_out: bool = False):
        self.returncode, self.stdout, self.stderr, self.timed_out = returncode, stdout, stderr, timed_out


def said(stdout: str = "", *, exit: int = 0, stderr: str = "") -> Answer:
    return Answer(exit, stdout, stderr)


def hangs() -> Answer:
    return Answer(None, timed_out=True)


class Scripted:
    def __init__(self, script: Mapping[str, Answer]) -> None:
        self.script = dict(script)
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> Ran:
        command = tuple(argv)
        self.calls.append((command, timeout))
        line = " ".join(command)
        prefixes = [prefix for prefix in self.script if line == prefix or line.startswith(prefix + " ")]
        if not prefixes:
            return Ran(command, None, missing=True)
        answer = self.script[max(prefixes, key=len)]
        return Ran(command, answer.returncode, answer.stdout, answer.stderr, timed_out=answer.timed_out)
