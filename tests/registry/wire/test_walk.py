"""`registry.wire.walk.StreamWalk`: a bucket's stream read in stream order, a pull at a time, on a real nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats, local_nats
from registry.contract import APPLIED, Bucket
from registry.errors import BusError
from registry.wire import Bus, BusOptions, KvItem, Sink, StreamWalk, connect, delete, get_latest, put
from tests.helpers import in_own_task, put_many

BUCKET = Bucket("walked", APPLIED)


def collect(items: list[KvItem]) -> Sink:
    return lambda key, value, revision, deleted: items.append(KvItem(key, value, revision, deleted))


async def walked(bus: Bus, filters: tuple[str, ...] = (">",), *, floor: int = 0) -> tuple[list[KvItem], StreamWalk]:
    items: list[KvItem] = []
    walk = StreamWalk(bus, BUCKET, filters, sink=collect(items), wanted=lambda: True, pull_bytes=0, idle=5)
    await walk.open(floor=floor)
    try:
        await walk.read(lambda: False)
    finally:
        await walk.close()
    return items, walk


@pytest.fixture
async def bucket(bus: Bus, js: JetStreamContext) -> Bucket:
    await js.create_key_value(bucket=BUCKET.name, direct=True)
    return BUCKET


async def test_a_walk_meets_each_key_once_in_stream_order_deletions_included(bus: Bus, bucket: Bucket) -> None:
    await put_many(bus, bucket, {f"n{i}.m": b"%d" % i for i in range(300)})
    await put(bus, bucket, "n5.m", b"again")
    latest = await get_latest(bus, bucket, "n7.m")
    assert latest is not None
    await delete(bus, bucket, "n7.m", last=latest.revision)
    items, walk = await walked(bus)
    keys = [item.key for item in items]
    assert len(keys) == len(set(keys)) == 300
    assert keys[-2:] == ["n5.m", "n7.m"]  # moved to the end of the stream by their last writes
    assert [i.revision for i in items] == sorted(i.revision for i in items)
    assert (items[-2].value, items[-1].deleted) == (b"again", True)
    assert walk.finished


async def test_a_walk_reads_in_pulls_of_its_bytes(small: LocalNats) -> None:
    async with connect(BusOptions(servers=(small.url,), name="test")) as bus:
        await bus.jetstream(f"STREAM.CREATE.{BUCKET.stream}", stream_config(), operation="create")
        await put_many(bus, BUCKET, {f"n{i}.m": b"x" * 100 for i in range(1000)})
        items, walk = await walked(bus)
    assert len(items) == 1000
    assert walk._pulls > 5  # each pull stops at max_payload's bytes (16 KiB), about 80 messages


async def test_a_walk_under_a_filter_meets_only_its_keys(bus: Bus, bucket: Bucket) -> None:
    await put_many(bus, bucket, {"n1.a": b"1", "n2.a": b"2", "n1.b": b"3", "n10.a": b"4"})
    items, _ = await walked(bus, ("n1.>",))
    assert [item.key for item in items] == ["n1.a", "n1.b"]
    items, _ = await walked(bus, ("n1.>", "n2.>"))
    assert [item.key for item in items] == ["n1.a", "n2.a", "n1.b"]


async def test_an_empty_bucket_is_walked_at_once(bus: Bus, bucket: Bucket) -> None:
    items, walk = await walked(bus)
    assert (items, walk.finished) == ([], True)


async def test_a_walk_stops_reading_when_its_sink_wants_no_more(bus: Bus, bucket: Bucket) -> None:
    await put_many(bus, bucket, {f"n{i}.m": b"x" * 1000 for i in range(3000)})
    items: list[KvItem] = []
    walk = StreamWalk(bus, bucket, (">",), sink=collect(items), wanted=lambda: len(items) < 500, pull_bytes=0, idle=5)
    await walk.open()
    try:
        await walk.read(lambda: len(items) >= 100)
        assert 100 <= len(items) < 3000
        assert not walk.finished
        await walk.read(lambda: len(items) >= 3000)
        assert (len(items), walk.finished) == (3000, True)
    finally:
        await walk.close()
    assert [item.key for item in items] == [f"n{i}.m" for i in range(3000)]


async def test_the_consumer_of_a_walk_is_deleted_when_it_closes(bus: Bus, bucket: Bucket, js: JetStreamContext) -> None:
    await put_many(bus, bucket, {f"n{i}.m": b"x" for i in range(10)})
    await walked(bus)
    assert (await js.stream_info(bucket.stream)).state.consumer_count == 0


async def test_a_walk_that_ends_before_the_leaders_last_sequence_fails_after_the_timeout(
    nats_server: LocalNats, js: JetStreamContext
) -> None:
    """A replica that has just rejoined a cluster ends its stream early: the walk waits for it
    to catch up, and says so when it does not (here the floor is beyond the stream's end)."""
    await js.create_key_value(bucket=BUCKET.name, direct=True)
    options = BusOptions(servers=(nats_server.url,), name="test", request_timeout=timedelta(seconds=0.5))
    async with connect(options) as bus:
        await put_many(bus, BUCKET, {"n1.a": b"1", "n2.a": b"2"})
        with pytest.raises(BusError, match="behind its leader"):
            await walked(bus, floor=10)
        items, walk = await walked(bus, floor=2)
    assert (len(items), walk.finished) == (2, True)


def stream_config() -> dict[str, object]:
    return {
        "name": BUCKET.stream,
        "subjects": [BUCKET.subject(">")],
        "max_msgs_per_subject": 1,
        "allow_direct": True,
        "storage": "memory",
        "discard": "new",
        "deny_delete": True,
    }


@pytest.fixture
async def small(tmp_path: Path) -> AsyncIterator[LocalNats]:
    """A nats-server whose max_payload is 16 KiB."""
    async with in_own_task(local_nats(tmp_path / "nats", "max_payload: 16384")) as server:
        yield server


async def test_a_pull_its_messages_fill_exactly_ends_without_a_status_and_the_walk_goes_on(
    small: LocalNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server sends no status when a pull's messages fill its max_bytes exactly (a million
    keys of one size did: the listing waited for an end that never came and was answered 503)."""
    sizes: list[int] = []
    on_message = StreamWalk._on_message

    async def recorded(walk: StreamWalk, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        if headers is None or headers[8:9] != b" ":  # a message, not a pull's status
            sizes.append(len(subject) + len(reply) + len(data) + len(headers or b""))
        await on_message(walk, subject, reply, data, headers)

    async with connect(BusOptions(servers=(small.url,), name="test")) as bus:
        await bus.jetstream(f"STREAM.CREATE.{BUCKET.stream}", stream_config(), operation="create")
        await put_many(bus, BUCKET, {f"n{i}.m": b"x" * (90 + i % 7) for i in range(600)})
        latest = await get_latest(bus, BUCKET, "n3.m")
        assert latest is not None
        await delete(bus, BUCKET, "n3.m", last=latest.revision)  # a message with headers
        with monkeypatch.context() as patched:
            patched.setattr(StreamWalk, "_on_message", recorded)
            items, _ = await walked(bus)
        assert len(items) == len(sizes) == 600
        filled = next(i for i in range(1, 601) if sum(sizes[:i]) >= bus.max_payload)
        exactly = sum(sizes[:filled])
        ended: list[KvItem] = []
        walk = StreamWalk(bus, BUCKET, (">",), sink=collect(ended), wanted=lambda: True, pull_bytes=exactly, idle=5)
        await walk.open()
        try:
            with anyio.fail_after(3 * bus.timeout):
                await walk.read(lambda: False)
        finally:
            await walk.close()
    assert [i.key for i in ended] == [i.key for i in items]
    assert walk.silent_ends >= 1
    assert ended[-1].deleted
