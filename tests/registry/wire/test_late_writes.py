"""Writes that could land after their caller gave up, on a real nats-server.

nats-py keeps what is published while it reconnects and sends it once the connection is back,
however long ago its caller gave up: a conditional write stored that way moved a revision under
its own writer (a lease found "lost", a compile's value taken for someone else's). The bus sends
no write while the connection is away; and nobody answering a write, which a stream electing a
leader does too, is not said to be a missing stream (`tests/faults/test_cluster.py` shows the election)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from registry.contract import buckets
from registry.errors import BusError, NoResponders, NotFound
from registry.wire import BucketConfig, Bus, BusOptions, connect, create_bucket, get_direct, purge, put, update
from tests.helpers import RestartableNats, restartable_nats

BOUND = 20.0
KEY = "n1.web.config.level"
TIMEOUT = timedelta(seconds=6)  # far from a refusal's own time, on a loaded machine too


@asynccontextmanager
async def on_a_restartable_server(
    tmp_path: Path, request_timeout: timedelta = timedelta(seconds=0.5)
) -> AsyncIterator[tuple[RestartableNats, Bus]]:
    async with restartable_nats(tmp_path / "nats") as server:
        options = BusOptions(
            servers=(server.url,), name="test", reconnect_wait=timedelta(seconds=0.1), request_timeout=request_timeout
        )
        async with connect(options) as bus:
            await create_bucket(bus, buckets.NEEDS, BucketConfig())
            yield server, bus


async def test_a_write_while_the_connection_is_away_is_not_sent_and_never_stored_later(tmp_path: Path) -> None:
    async with on_a_restartable_server(tmp_path, TIMEOUT) as (server, bus):
        written = await put(bus, buckets.NEEDS, KEY, b'"before"')
        seen = bus.reconnects
        await server.stop()
        with anyio.fail_after(BOUND):
            while bus.connected:
                await anyio.sleep(0.01)  # until nats-py knows it is away
        started = time.monotonic()
        with pytest.raises(BusError) as given_up:
            await update(bus, buckets.NEEDS, KEY, b'"given up on"', last=written)
        refused_in = time.monotonic() - started
        await server.start()
        with anyio.fail_after(BOUND):
            await bus.reconnected(seen)
        await bus.flush()
        stored = await get_direct(bus, buckets.NEEDS, KEY)
        assert stored is not None and (stored.value, stored.revision) == (b'"before"', written)
        assert "not sent: the connection to nats is away" in str(given_up.value)
        # a write sent into the reconnect buffer waits for its whole timeout; one refused, for none of it
        assert refused_in < TIMEOUT.total_seconds() / 2, "the write waited for its timeout: it was buffered"


async def test_nobody_storing_a_write_is_not_said_to_be_a_missing_stream(nats_server: LocalNats, bus: Bus) -> None:
    with pytest.raises(NoResponders, match="or its stream has no leader yet") as raised:
        await put(bus, buckets.NEEDS, KEY, b'"x"')  # no such bucket here: nobody answers
    assert not isinstance(raised.value, NotFound)


async def test_a_bus_closed_while_away_drops_what_waits_in_the_reconnect_buffer(tmp_path: Path) -> None:
    """A seat stopped during an outage closes its connection: what waits for the reconnect is
    never sent, and the close is no error (nats-py flushed it into the lost socket and raised)."""
    async with restartable_nats(tmp_path / "nats") as server:
        options = BusOptions(servers=(server.url,), name="test", reconnect_wait=timedelta(seconds=0.1))
        async with connect(options) as bus:
            await server.stop()
            with anyio.fail_after(BOUND):
                while bus.connected:
                    await anyio.sleep(0.01)  # until nats-py knows it is away
            await bus.publish("anything", b"waits in the reconnect buffer")
        assert bus.closed.is_set()
        await server.start()


async def test_a_purge_while_the_connection_is_away_is_not_sent_and_never_done_later(tmp_path: Path) -> None:
    """The quota guard purges a node over its quota: a purge sent once back would take what the
    node wrote since, with no record that it was cut back."""
    async with on_a_restartable_server(tmp_path) as (server, bus):
        await put(bus, buckets.NEEDS, KEY, b'"kept"')
        seen = bus.reconnects
        await server.stop()
        with anyio.fail_after(BOUND):
            while bus.connected:
                await anyio.sleep(0.01)  # until nats-py knows it is away
        with pytest.raises(BusError) as given_up:
            await purge(bus, buckets.NEEDS, "n1.>")
        await server.start()
        with anyio.fail_after(BOUND):
            await bus.reconnected(seen)
        await bus.flush()
        assert await get_direct(bus, buckets.NEEDS, KEY) is not None
        assert "not sent: the connection to nats is away" in str(given_up.value)
