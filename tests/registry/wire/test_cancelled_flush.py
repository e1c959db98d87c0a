"""A flush answers what was sent before it, and a flush given up on must not stop the connection
reading. nats-py keeps each PING's future in
a list and sets the result of the next one when a PONG comes; a flush cancelled before its PONG
came (a timeout under load, a task cancelled) leaves a cancelled future there, and setting its
result raised `InvalidStateError` inside nats-py's read loop, which logged it and stopped reading
for good: the connection stayed up, answering nothing (seen in the soak's honest nodes)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from registry.wire import Bus, nats_client
from tests.conftest import NATS_PY_SEND_PING


async def test_a_flush_cancelled_before_its_pong_leaves_the_connection_reading(bus: Bus) -> None:
    nc = nats_client(bus)
    pings_before = len(nc._pongs)
    async with anyio.create_task_group() as tg:
        tg.start_soon(bus.flush)
        while len(nc._pongs) == pings_before:  # its PING is out; its PONG cannot have been read yet
            await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()

    async def still_reading(msg: Msg) -> None:
        await msg.respond(b"still reading")

    await nc.subscribe("probe", cb=still_reading)
    with anyio.fail_after(5):
        reply = await nc.request("probe", b"", timeout=5)
    assert reply.data == b"still reading"
    assert nc._reading_task is not None and not nc._reading_task.done()


async def test_a_subscription_is_at_the_server_once_the_bus_flushed(
    bus: Bus, nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py writes a flush's PING ahead of a SUB still pending: with its own `_send_ping` (every
    other client of the tests has the bus's), a request right after `subscribe` and `flush` was
    answered "no responders" about 1 time in 20. The bus queues its PING behind the SUB."""
    monkeypatch.setattr(Client, "_send_ping", NATS_PY_SEND_PING)

    async def answer(subject: bytes, reply: bytes, data: bytes, block: bytes | None) -> None:
        await bus.publish(reply.decode(), b"here")

    for round_ in range(200):
        subscription = await bus.subscribe_raw(f"fresh.{round_}", answer)
        await bus.flush()
        assert (await nc.request(f"fresh.{round_}", b"", timeout=5)).data == b"here"
        await subscription.unsubscribe()
