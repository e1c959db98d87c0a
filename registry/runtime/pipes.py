"""A reader that goes away ends a command quietly, as it ends a Unix tool.

`mesh-provisioner query needs | head -1`: once `head` has its line it closes the pipe, and the
next write to stdout fails. A Unix tool is killed by SIGPIPE there and says nothing; Python
ignores SIGPIPE (a closed socket must not kill a daemon), so the write raises `BrokenPipeError`,
a traceback follows, and at exit Python flushes stdout once more and prints "Exception ignored
... BrokenPipeError". `quiet_on_closed_pipe` wraps every console script's `main`: stdout is
flushed while the command can still tell, and a closed pipe ends it with nothing printed and the
exit status a shell reports for a tool killed by SIGPIPE (141), stdout pointed at /dev/null so
that nothing is left to flush.
"""

from __future__ import annotations

import functools
import os
import select
import signal
import sys
from collections.abc import Callable
from typing import ParamSpec

from registry.errors import sole_exception

P = ParamSpec("P")

EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE


def quiet_on_closed_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """`main`, ending with `EXIT_CLOSED_PIPE` and nothing printed when its stdout's reader has gone
    (or its stderr's, shared: `2>&1 | head`). A `BrokenPipeError` from anything else is raised."""

    @functools.wraps(main)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:  # on SystemExit too: argparse's --help exits with the help still buffered
                sys.stdout.flush()
        except (BrokenPipeError, BaseExceptionGroup) as err:
            if not _is_closed_pipe(err) or not _silence_closed_outputs():
                raise
            return EXIT_CLOSED_PIPE

    return guarded


def _is_closed_pipe(err: BaseException) -> bool:
    found = sole_exception(err) if isinstance(err, BaseExceptionGroup) else err
    return isinstance(found, BrokenPipeError)


def _silence_closed_outputs() -> bool:
    """Points each of stdout and stderr whose reader has gone at /dev/null; whether one had."""
    closed = [stream for stream in (sys.stdout, sys.stderr) if _reader_gone(stream)]
    if not closed:
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in closed:
            os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)
    return True


def _reader_gone(stream: object) -> bool:
    """Whether `stream` is a pipe or socket whose reading end is closed (poll says POLLERR)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):  # replaced by a test's buffer, or closed
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
