"""A closed pipe ends a command quietly (`registry.command_line.quiet_on_closed_pipe`), in a process of
its own whose stdout's reading end is closed before it writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from registry.command_line import EXIT_CLOSED_PIPE

_PROGRAM = """
import sys
from registry.command_line import quiet_on_closed_pipe

@quiet_on_closed_pipe
def main(argv):
    {body}
    return 0

sys.exit(main(sys.argv[1:]))
"""

BODIES = {
    "a long output": "print('x' * 100_000)",
    "a short output, buffered until the exit": "print('one line')",
    "a line at a time, flushed": "[print(n, flush=True) for n in range(1000)]",
    "a task group's failure": "import anyio\n    anyio.run(_tasks)",
    "a SystemExit with the output still buffered": "print('help'); sys.exit(0)",
}
_TASKS = """
async def _tasks():
    import anyio
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep, 10)
        print('y' * 100_000)
"""


def run_with_closed_stdout(body: str, *, stderr_too: bool = False) -> subprocess.CompletedProcess[bytes]:
    program = _TASKS + _PROGRAM.format(body=body)
    reading, writing = os.pipe()
    os.close(reading)
    try:
        return subprocess.run(
            [sys.executable, "-c", program],
            stdout=writing,
            stderr=writing if stderr_too else subprocess.PIPE,
            check=False,
            timeout=60,
        )
    finally:
        os.close(writing)


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_a_closed_stdout_ends_the_command_quietly_with_141(body: str) -> None:
    done = run_with_closed_stdout(body)
    assert done.stderr == b"", "no traceback, no 'Exception ignored'"
    assert done.returncode == EXIT_CLOSED_PIPE == 141


def test_a_closed_pipe_behind_stdout_and_stderr_alike_is_quiet_too() -> None:
    assert run_with_closed_stdout("print('x' * 100_000)", stderr_too=True).returncode == EXIT_CLOSED_PIPE


def test_a_broken_pipe_elsewhere_is_raised_as_the_failure_it_is() -> None:
    """Another pipe closed (a child's stdin), stdout still read: a traceback, not a quiet exit."""
    body = "import os; r, w = os.pipe(); os.close(r); os.write(w, b'x')"
    done = subprocess.run(
        [sys.executable, "-c", _TASKS + _PROGRAM.format(body=body)], capture_output=True, check=False, timeout=60
    )
    assert done.returncode == 1
    assert b"BrokenPipeError" in done.stderr
