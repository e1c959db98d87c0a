"""A nats-server that stalls: paused (SIGSTOP) for a block, its connections up, what was sent to it
processed once it resumes, after the senders gave up waiting; and a bus that gives up quickly.

How a write lands after its caller gave up, now that `registry.wire.bus.Bus.store` sends nothing
while the connection is away (nats-py's reconnect buffer): a server that is slow to answer."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio

from mesh_dev.local_nats import LocalNats
from registry.wire import Bus, BusOptions, connect

GIVES_UP_AFTER = timedelta(seconds=0.5)


def _stopped(pid: int) -> bool:
    """Whether every thread of process `pid` is stopped (Linux: the state in /proc/<pid>/task/*/stat)."""
    states = [stat.read_text().rpartition(") ")[2][:1] for stat in Path(f"/proc/{pid}/task").glob("*/stat")]
    return bool(states) and all(state in "Tt" for state in states)


@asynccontextmanager
async def paused(server: LocalNats, bus: Bus) -> AsyncIterator[None]:
    """`server` paused for the block (every thread of it stopped when the block begins); once it
    resumes, `bus` has heard back from it."""
    server.process.send_signal(signal.SIGSTOP)
    try:
        with anyio.fail_after(5):
            while not _stopped(server.process.pid):
                await anyio.sleep(0.001)  # SIGSTOP reaches a thread running on another core a moment later
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)
    await bus.flush()


@asynccontextmanager
async def impatient_bus(server: LocalNats, name: str = "test") -> AsyncIterator[Bus]:
    """A connection to `server` whose requests give up after `GIVES_UP_AFTER`."""
    options = BusOptions(servers=(server.url,), name=name, request_timeout=GIVES_UP_AFTER)
    async with connect(options) as bus:
        yield bus
