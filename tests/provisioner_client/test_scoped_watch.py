"""registry.wire.watch.scoped_watch against a real nats-server: scoped, resumable, retrying; a named
watch keeps one consumer under its name and deletes it on stop."""

from __future__ import annotations

from datetime import timedelta

import anyio
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats
from registry.contract import APPLIED, Bucket
from registry.wire import Bus, BusOptions, KvItem, ScopedWatch, connect, scoped_watch

W = Bucket("w", APPLIED)

FAST = timedelta(seconds=0.5)  # heartbeat and longest retry delay


async def next_events(watch: ScopedWatch, count: int) -> list[tuple[str, bytes, bool]]:
    events: list[KvItem] = []
    with anyio.fail_after(10):
        while len(events) < count:
            events.append(await anext(watch))
    return [(e.key, e.value, e.deleted) for e in events]


async def test_it_sends_current_values_then_changes_of_its_own_keys_only(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="w", direct=True)
    await kv.put("n1.a", b"1")
    await kv.put("n1.b", b"2")
    await kv.delete("n1.b")
    await kv.put("n2.a", b"other")
    async with scoped_watch(bus, W, "n1.>", heartbeat=FAST, retry_max=FAST) as watch:
        assert await next_events(watch, 2) == [("n1.a", b"1", False), ("n1.b", b"", True)]
        await kv.put("n2.a", b"not mine")
        await kv.put("n1.c", b"3")
        assert await next_events(watch, 1) == [("n1.c", b"3", False)]


async def test_a_lost_consumer_is_recreated_under_a_new_name_without_losing_a_change(
    bus: Bus, js: JetStreamContext
) -> None:
    kv = await js.create_key_value(bucket="w", direct=True)
    await kv.put("n1.a", b"1")
    async with scoped_watch(bus, W, "n1.>", heartbeat=FAST, retry_max=FAST) as watch:
        assert await next_events(watch, 1) == [("n1.a", b"1", False)]
        first = watch.consumer_name
        assert first is not None
        await js.delete_consumer("KV_w", first)
        await kv.put("n1.a", b"2")
        await kv.put("n1.b", b"3")
        assert await next_events(watch, 2) == [("n1.a", b"2", False), ("n1.b", b"3", False)]
        assert watch.consumer_name not in (None, first)
        assert watch.resets >= 1
        await kv.put("n1.a", b"4")
        assert await next_events(watch, 1) == [("n1.a", b"4", False)]


async def test_a_bucket_created_later_is_watched_once_it_exists(bus: Bus, js: JetStreamContext) -> None:
    async with scoped_watch(bus, Bucket("late", APPLIED), "k", heartbeat=FAST, retry_max=FAST) as watch:
        kv = await js.create_key_value(bucket="late", direct=True)
        await kv.put("k", b"v")
        assert await next_events(watch, 1) == [("k", b"v", False)]


async def test_its_consumer_is_left_to_expire_on_stop(bus: Bus, js: JetStreamContext) -> None:
    await js.create_key_value(bucket="w", direct=True)
    async with scoped_watch(bus, W, "n1.>", heartbeat=FAST, retry_max=FAST) as kept:
        kept_name = kept.consumer_name
    names = {info.name for info in await js.consumers_info("KV_w")}
    assert kept_name in names, "no CONSUMER.DELETE is granted: it expires after its inactive threshold"


async def test_a_named_watch_replaces_its_lost_consumer_under_the_same_name(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="w", direct=True)
    await kv.put("n1.a", b"1")
    async with scoped_watch(bus, W, "n1.>", heartbeat=FAST, retry_max=FAST, name="seat-w") as watch:
        assert await next_events(watch, 1) == [("n1.a", b"1", False)]
        await js.delete_consumer("KV_w", "seat-w")
        await kv.put("n1.a", b"2")
        assert await next_events(watch, 1) == [("n1.a", b"2", False)]
        assert watch.resets >= 1
        assert [info.name for info in await js.consumers_info("KV_w")] == ["seat-w"]


async def test_a_named_watch_deletes_its_consumer_on_stop(bus: Bus, js: JetStreamContext) -> None:
    await js.create_key_value(bucket="w", direct=True)
    async with scoped_watch(bus, W, "n1.>", heartbeat=FAST, retry_max=FAST, name="seat-w") as watch:
        assert watch.consumer_name == "seat-w"
        assert [info.name for info in await js.consumers_info("KV_w")] == ["seat-w"]
    assert await js.consumers_info("KV_w") == []


async def test_a_watch_whose_first_attempt_finds_the_connection_closed_ends_and_says_it_started(
    nats_server: LocalNats,
) -> None:
    """A seat whose connection nats closed for good while its quota guard's watches were still
    opening ended on anyio's "Child exited without calling task_status.started()", not on the
    closed connection (a full run's `serve` test): the watch now reports started, and ends."""
    async with connect(BusOptions(servers=(nats_server.url,))) as closed:
        pass
    with anyio.fail_after(5):
        async with scoped_watch(closed, W, ">") as watch:
            assert [item async for item in watch] == []
