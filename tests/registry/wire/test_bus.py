"""The bus boundary: nats-py's failures arrive as our typed errors, each keeping its cause."""

from __future__ import annotations

from datetime import timedelta

import nats.errors
import nats.micro.service
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from mesh_dev.local_nats import LocalNats
from registry.errors import BusError, BusTimeout, ConnectionClosed, NoResponders, NotFound
from registry.wire import Bus, BusOptions, check_nats_internals, connect, nats_internals


async def test_a_subject_nobody_serves_is_no_responders_with_the_cause_kept(bus: Bus) -> None:
    with pytest.raises(NoResponders) as raised:
        await bus.request("nobody.here", b"{}")
    assert raised.value.operation == "request nobody.here"
    assert isinstance(raised.value.__cause__, nats.errors.NoRespondersError)


async def test_a_responder_that_never_answers_is_a_timeout(bus: Bus, nc: Client) -> None:
    async def silent(msg: Msg) -> None:
        pass

    await nc.subscribe("slow.one", cb=silent)
    await nc.flush()
    with pytest.raises(BusTimeout) as raised:
        await bus.request("slow.one", reply_wait=timedelta(milliseconds=200))
    assert raised.value.__cause__ is not None


async def test_a_missing_stream_is_not_found(bus: Bus) -> None:
    with pytest.raises(NotFound, match="stream not found"):
        await bus.jetstream("STREAM.INFO.KV_nowhere", operation="look up nowhere")


async def test_a_closed_connection_says_so_and_is_told(nats_server: LocalNats) -> None:
    async with connect(BusOptions(servers=(nats_server.url,))) as closed:
        pass
    assert closed.closed.is_set()
    with pytest.raises(ConnectionClosed) as raised:
        await closed.request("anything")
    assert isinstance(raised.value.__cause__, nats.errors.ConnectionClosedError)


def test_the_service_adapter_accepts_the_installed_nats_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nats_internals, "_passed", set())  # checked afresh, not remembered
    check_nats_internals(serving=True)


def test_the_service_adapter_refuses_a_nats_py_without_the_internals_it_drains_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class EndpointWithoutSubscription:
        def __init__(self) -> None:
            self.config = None

    monkeypatch.setattr(nats.micro.service, "Endpoint", EndpointWithoutSubscription)
    monkeypatch.setattr(nats_internals, "_passed", set())
    with pytest.raises(BusError, match="_subscription"):
        check_nats_internals(serving=True)


def test_the_bus_surface_is_pinned_and_shows_no_nats_py() -> None:
    """What callers may use of a connection; nats-py's client and JetStream context stay inside."""
    public = {name for name in dir(Bus) if not name.startswith("_")}
    assert public == {
        "connected",
        "flush",
        "jetstream",
        "max_payload",
        "new_inbox",
        "note_denial",
        "publish",
        "recent_denial",
        "reconnected",
        "reconnects",
        "request",
        "server_version",
        "store",
        "subscribe",
        "subscribe_raw",
        "timeout",
        "translated",
        "until_connected",
    }
