"""A feed's idle heartbeats (`registry.wire.feed.Feed`), read as nats-server sends them: one that
finds every message read tells the reader nothing more is coming, so a listing whose counted keys
were purged before they were sent ends instead of waiting out its bus timeout. Pure logic: the
status blocks are built here; tests/limits/test_quotas.py reads a node's keys while the seat purges
them, on a real server."""

from __future__ import annotations

from typing import cast

from registry.contract import buckets
from registry.wire import Bus
from registry.wire.feed import Feed


class _Publishes:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def publish(self, subject: str) -> None:
        self.sent.append(subject)


def _heartbeat(**headers: str) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"NATS/1.0 100 Idle Heartbeat\r\n{lines}\r\n".encode()


def _feed(told: list[str]) -> tuple[Feed, _Publishes]:
    bus = _Publishes()
    feed = Feed(
        cast(Bus, bus),
        buckets.NEEDS,
        ["n1.>"],
        lambda item, pending: None,
        heartbeat=1.0,
        inactive_threshold=1.0,
        on_idle=lambda: told.append("idle"),
    )
    return feed, bus


async def test_an_idle_heartbeat_with_every_message_read_tells_the_reader() -> None:
    told: list[str] = []
    feed, _ = _feed(told)
    await feed._on_status("", _heartbeat(**{"Nats-Last-Consumer": "0", "Nats-Last-Stream": "9"}))
    assert told == ["idle"] and feed.broken is None


async def test_a_stalled_heartbeat_is_answered_and_tells_nothing() -> None:
    told: list[str] = []
    feed, bus = _feed(told)
    stalled = {"Nats-Last-Consumer": "0", "Nats-Last-Stream": "9", "Nats-Consumer-Stalled": "$JS.FC.x"}
    await feed._on_status("", _heartbeat(**stalled))
    assert told == [] and bus.sent == ["$JS.FC.x"]


async def test_a_heartbeat_naming_a_message_not_read_breaks_the_feed_and_tells_nothing() -> None:
    told: list[str] = []
    feed, _ = _feed(told)
    await feed._on_status("", _heartbeat(**{"Nats-Last-Consumer": "2", "Nats-Last-Stream": "9"}))
    assert told == [] and feed.broken is not None and "consumer sequence 2" in feed.broken


async def test_a_flow_control_request_is_answered_and_tells_nothing() -> None:
    told: list[str] = []
    feed, bus = _feed(told)
    await feed._on_status("$JS.FC.y", b"NATS/1.0 100 FlowControl Request\r\n\r\n")
    assert told == [] and bus.sent == ["$JS.FC.y"]
