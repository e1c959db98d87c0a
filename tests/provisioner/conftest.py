"""Fixtures for the server: run in-process against the test's own nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from provisioner.server import run_server
from provisioner.settings import ServerSettings
from registry import buckets
from registry.bus import Bus, BusOptions
from registry.local_nats import LocalNats


@asynccontextmanager
async def serving(url: str, **settings: Any) -> AsyncIterator[None]:
    """The server running against `url` for the block (ready when it starts), stopped cleanly after."""
    stop = anyio.Event()
    options = BusOptions(servers=(url,), name=buckets.SEAT)
    run = partial(run_server, bus_options=options, settings=ServerSettings(**settings), stop=stop)
    async with anyio.create_task_group() as tasks:
        await tasks.start(run)
        try:
            yield
        finally:
            stop.set()


@pytest.fixture
async def server(nats_server: LocalNats) -> AsyncIterator[LocalNats]:
    async with serving(nats_server.url):
        yield nats_server


async def bucket(bus: Bus, bucket: buckets.Bucket) -> KeyValue:
    return await bus.js.key_value(bucket.name)


async def put_all(kv: KeyValue, values: Mapping[str, bytes], *, validate_keys: bool = True) -> None:
    for key, value in values.items():
        await kv.put(key, value, validate_keys=validate_keys)


async def put_many(bus: Bus, bucket: buckets.Bucket, values: Mapping[str, bytes]) -> None:
    """Writes `values` pipelined (plain publishes into the bucket's stream), then waits for the last
    one's acknowledgement: the stream stores one connection's messages in order."""
    *rest, last = values.items()
    for key, value in rest:
        await bus.nc.publish(f"$KV.{bucket.name}.{key}", value)
    await bus.js.publish(f"$KV.{bucket.name}.{last[0]}", last[1])


class Fired:
    """Requests published at once, each with its own reply subject; `replies()` waits for them all."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.received: dict[int, Msg] = {}
        self._all = anyio.Event()

    async def on_reply(self, msg: Msg) -> None:
        self.received[int(msg.subject.rsplit(".", 1)[1])] = msg
        if len(self.received) == self.count:
            self._all.set()

    async def replies(self, within: float = 10.0) -> list[Msg]:
        with anyio.fail_after(within):
            await self._all.wait()
        return [self.received[i] for i in range(self.count)]


async def fire(bus: Bus, bodies: Sequence[bytes]) -> Fired:
    """Publishes every request, then flushes: once this returns the server has them all."""
    fired = Fired(len(bodies))
    prefix = bus.nc.new_inbox()
    await bus.nc.subscribe(f"{prefix}.*", cb=fired.on_reply)
    for number, body in enumerate(bodies):
        await bus.nc.publish(buckets.VERB_SUBJECT, body, reply=f"{prefix}.{number}")
    await bus.nc.flush()
    return fired
