"""SIGTERM and SIGINT, the same for both programs: the first asks, a second forces.

The first signal sets a `stop` event: the program stops taking work and finishes what it holds
(the server answers the requests in flight, the client finishes the reconcile in progress and its
change action). Stopping that way may take a while, and an operator who sends the signal again
wants it over now: the second signal cancels everything at once. A `grace` bounds the first
kind of stop for a program whose work has no deadline of its own.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import anyio
from anyio import CancelScope
from anyio.abc import TaskStatus

from registry.errors import sole_exception
from registry.runtime.logs import event

log = logging.getLogger(__name__)

T = TypeVar("T")

# After a forced stop, what still runs is shielded clean-up (a drain of a connection whose server
# does not answer, say). It gets this long, then the process exits without it.
LAST_RESORT_SECONDS = 2.0
EXIT_FORCED = 1


class _LastResort:
    """Exits the process if a forced stop has not ended `LAST_RESORT_SECONDS` after it; disarmed
    once `until_signalled` returns."""

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(LAST_RESORT_SECONDS, _exit_now)
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _exit_now() -> None:
    log.error("clean-up still running %g s after a forced stop: exiting without it", LAST_RESORT_SECONDS)
    logging.shutdown()
    os._exit(EXIT_FORCED)


async def stop_on_signals(
    stop: anyio.Event,
    force: CancelScope,
    last_resort: _LastResort,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The first SIGTERM or SIGINT sets `stop`; a second one cancels `force` at once."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for received in signals:
            name = signal.Signals(received).name
            if not stop.is_set():
                log.info("%s received: stopping (send it again to stop at once)", name, extra=event(signal=name))
                stop.set()
            else:
                log.warning("%s received again: stopping at once", name, extra=event(signal=name))
                force.cancel()
                last_resort.arm()


async def force_after(stop: anyio.Event, grace: timedelta, force: CancelScope, last_resort: _LastResort) -> None:
    """Cancels `force` once `grace` has passed since `stop` was set."""
    await stop.wait()
    await anyio.sleep(grace.total_seconds())
    log.warning("still stopping %g s after being asked to: stopping at once", grace.total_seconds())
    force.cancel()
    last_resort.arm()


async def until_signalled(body: Callable[[anyio.Event], Awaitable[T]], *, grace: timedelta | None = None) -> T | None:
    """Runs `body(stop)` with `stop` set by the first SIGTERM/SIGINT, and returns what it returns;
    `None` when a second signal (or `grace` after the first) cut it short.

    An error of `body` is raised as itself, not inside the exception group of the task group that
    listens for the signals, so a CLI catches it by its class."""
    stop = anyio.Event()
    outcome: list[T] = []
    last_resort = _LastResort()
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(stop_on_signals, stop, tasks.cancel_scope, last_resort)
            if grace is not None:
                tasks.start_soon(force_after, stop, grace, tasks.cancel_scope, last_resort)
            result = await body(stop)
            # A body that finished inside a shield (a drain, say) after the force still was cut short.
            if not tasks.cancel_scope.cancel_called:
                outcome.append(result)
            tasks.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise sole_exception(group) from None
    finally:
        last_resort.disarm()
    return outcome[0] if outcome else None
