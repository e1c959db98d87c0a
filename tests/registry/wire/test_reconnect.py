"""The bus across a NATS outage, on a real nats-server stopped and started again on the same port
and store: nothing made or ended while away lingers on the server, a watch resumes on the
reconnect, and the outage is logged in a few lines, not one a second."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import nats
import nats.errors
import pytest
from nats.aio.client import Client

from registry.contract import APPLIED, Bucket
from registry.errors import BusTimeout
from registry.wire import Bus, KvItem, Message, Outage, ScopedWatch, put, scoped_watch, snapshot
from tests.helpers import RestartableNats, restartable_bus, wait_for

W = Bucket("w", APPLIED)
FAST = timedelta(seconds=0.5)
BOUND = 20.0


@asynccontextmanager
async def outage(server: RestartableNats, bus: Bus) -> AsyncIterator[None]:
    """NATS away for the block; after it, NATS is back and `bus` has reconnected."""
    seen = bus.reconnects
    await server.stop()
    with anyio.fail_after(BOUND):
        while bus.connected:
            await anyio.sleep(0.01)
    yield
    await server.start()
    with anyio.fail_after(BOUND):
        await bus.reconnected(seen)


class Errors:
    """The raw party's connection errors: while NATS is away, one per failed reconnect attempt."""

    def __init__(self) -> None:
        self.count = 0

    async def on_error(self, err: Exception) -> None:
        self.count += 1


@dataclass
class OnNats:
    server: RestartableNats
    bus: Bus
    party: Client  # raw nats-py: counts consumers and interest
    party_errors: Errors


@asynccontextmanager
async def bus_and_party(tmp_path: Path) -> AsyncIterator[OnNats]:
    """Our bus and a raw nats-py party on a restartable server."""
    async with restartable_bus(tmp_path, request_timeout=2, with_buckets=False) as ours:
        errors = Errors()
        party = await nats.connect(
            ours.server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1, error_cb=errors.on_error
        )
        try:
            yield OnNats(ours.server, ours.bus, party, errors)
        finally:
            await party.close()


async def consumers(party: Client, stream: str) -> list[str]:
    return sorted(info.name for info in await party.jetstream().consumers_info(stream))


async def until_consumers(party: Client, stream: str, wanted: Callable[[list[str]], bool], what: str) -> list[str]:
    """The stream's consumers once `wanted` holds of them; fails after a deadline with what was there."""
    found: list[str] = []
    try:
        with anyio.fail_after(BOUND):
            while not wanted(found := await consumers(party, stream)):
                await anyio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"{what}: consumers on {stream} are {found}")
    return found


async def has_interest(party: Client, subject: str) -> bool:
    """Whether the server holds a subscription on `subject` (a request finds a responder)."""
    try:
        await party.request(subject, b"", timeout=1)
    except nats.errors.NoRespondersError:
        return False
    except nats.errors.TimeoutError:
        return True  # someone subscribes, nobody answers: the interest the server still holds
    return True


class Warnings(logging.Handler):
    """Every warning of a logger, and each failed reconnect attempt it tells at debug level."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.warnings: list[str] = []
        self.attempts = 0
        self.recovered: list[str] = []

    def told(self) -> bool:
        return any("still reconnecting" in w for w in self.warnings)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            self.warnings.append(text)
        if "reconnect attempt failed" in text:
            self.attempts += 1
        if "recovered" in text:
            self.recovered.append(text)


@contextmanager
def bus_log() -> Iterator[Warnings]:
    handler = Warnings()
    logger = logging.getLogger("registry.wire.bus")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_a_subscription_ended_while_away_holds_no_interest_after_the_reconnect(tmp_path: Path) -> None:
    async def ignore(msg: Message) -> None:
        pass

    async with bus_and_party(tmp_path) as on:
        async with outage(on.server, on.bus):
            sub = await on.bus.subscribe("made.while.away", ignore)
            await sub.unsubscribe()
            kept = await on.bus.subscribe("kept.while.away", ignore)
        await on.party.flush()
        assert not await has_interest(on.party, "made.while.away"), "nats-py replays the SUB and sends no UNSUB"
        assert await has_interest(on.party, "kept.while.away")
        await kept.unsubscribe()


async def test_a_listing_tried_while_away_waits_for_the_connection_and_leaves_no_consumer(
    tmp_path: Path,
) -> None:
    async with bus_and_party(tmp_path) as on:
        await on.party.jetstream().create_key_value(bucket="w", direct=True)
        await put(on.bus, W, "n1.a", b"1")
        async with outage(on.server, on.bus):
            with pytest.raises(BusTimeout, match="not connected"):
                await snapshot(on.bus, W)
        assert [i.key for i in await snapshot(on.bus, W)] == ["n1.a"]
        await until_consumers(on.party, "KV_w", lambda names: not names, "every listing's consumer expires")


async def next_items(watch: ScopedWatch, count: int) -> list[tuple[str, bytes]]:
    items: list[KvItem] = []
    with anyio.fail_after(BOUND):
        while len(items) < count:
            items.append(await anext(watch))
    return [(i.key, i.value) for i in items]


async def test_a_named_watch_resumes_on_the_reconnect_under_its_own_name_and_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "registry.wire.watch")
    async with bus_and_party(tmp_path) as on:
        kv = await on.party.jetstream().create_key_value(bucket="w", direct=True)
        await kv.put("n1.a", b"1")
        async with scoped_watch(on.bus, W, "n1.>", heartbeat=FAST, retry_max=FAST, name="test-w-watch") as watch:
            assert await next_items(watch, 1) == [("n1.a", b"1")]
            async with outage(on.server, on.bus):  # long enough for many heartbeats to be missed
                before = on.party_errors.count
                await wait_for(lambda: on.party_errors.count >= before + 20, "twenty failed reconnect attempts")
                assert watch.resets == 0, "nothing is tried while the connection is away"
                assert "retrying in" not in caplog.text
            await wait_for(lambda: watch.feed is not None and watch.resets >= 1, "the watch resumed")
            await kv.put("n1.a", b"2")
            assert await next_items(watch, 1) == [("n1.a", b"2")]
            assert await consumers(on.party, "KV_w") == ["test-w-watch"]
        assert await consumers(on.party, "KV_w") == [], "a named watch deletes its consumer when it stops"
    assert "the connection was recovered" in caplog.text


def test_an_outage_is_told_first_then_at_slowing_intervals() -> None:
    outage = Outage(100.0, first_report=5.0, longest_silence=40.0)
    told = [second for second in range(101, 400) if outage.failed_attempt(float(second))]
    assert told == [105, 115, 135, 175, 215, 255, 295, 335, 375]
    assert outage.attempts == 299


async def test_a_long_outage_logs_a_few_warnings_not_one_per_attempt(tmp_path: Path) -> None:
    async with bus_and_party(tmp_path) as on:
        with bus_log() as lines:
            async with outage(on.server, on.bus):
                await wait_for(lambda: bool(lines.told()) or len(lines.warnings) > 3, "a count of the attempts")
                await wait_for(lambda: on.party_errors.count >= 30, "thirty failed reconnect attempts")
            await wait_for(lambda: bool(lines.recovered), "the recovery")
    print(f"\n{lines.attempts} failed attempts, {len(lines.warnings)} warning lines: {lines.warnings}")
    assert len(lines.warnings) <= 3, lines.warnings
    assert lines.warnings[0].startswith("nats connection lost")
    assert "attempts in" in lines.warnings[-1]
    assert " after " in lines.recovered[0] and "failed attempts" in lines.recovered[0]
