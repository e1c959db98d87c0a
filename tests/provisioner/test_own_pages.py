"""A node's own listing, its page kept between the node's writes: every write read back at once,
a quota purge never answered once recorded, a rolled-back sequence never taken for the same
message, and the pages' memory bounded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.seat.site_purges import purge_upto, record_purge
from provisioner.verb.answering import Answering, Reading, Way
from provisioner.verb.own_pages import OwnListing, OwnPages
from provisioner.verb.paging import PageCache
from provisioner.verb.request import Asked, parse_request
from registry.contract import buckets, encode_token
from registry.wire import Bus, LastStamp, delete, put
from tests.helpers import in_own_task, until

NEED = b'{"placeholder":"${config:x}","used_in":["a.conf"]}'


@asynccontextmanager
async def following(bus: Bus) -> AsyncIterator[OwnPages]:
    own = OwnPages()
    async with anyio.create_task_group() as tasks:
        await tasks.start(own.follow, bus)
        yield own
        tasks.cancel_scope.cancel()


@pytest.fixture
async def answering(server: LocalNats, bus: Bus) -> AsyncIterator[Answering]:
    async with in_own_task(following(bus)) as own:
        yield Answering(bus, PageCache(), own=own)


async def own_listing(answering: Answering, node: str, what: str = "needs") -> bytes:
    answer = answering.answer(Asked(parse_request(json.dumps({"what": what, "node": node}).encode()), None))
    assert isinstance(answer, Reading)
    assert answer.way is Way.OWN_PAGE
    return await answer.read()


def keys_in(page: bytes) -> set[str]:
    return {entry["key"] for entry in json.loads(page)["entries"]}


async def test_a_nodes_page_is_kept_until_it_writes_and_each_write_is_read_back_at_once(
    answering: Answering, bus: Bus
) -> None:
    await put(bus, buckets.NEEDS, "n1.web.config.a", NEED)
    first = await own_listing(answering, "n1")
    assert await own_listing(answering, "n1") is first  # the kept page itself: nothing read again
    for round_ in range(30):
        key = f"n1.web.config.k{round_}"
        await put(bus, buckets.NEEDS, key, NEED)
        assert key in keys_in(await own_listing(answering, "n1"))
        await delete(bus, buckets.NEEDS, key, last=None)
        assert key not in keys_in(await own_listing(answering, "n1"))
    await put(bus, buckets.NEEDS, "n2.web.config.a", NEED)  # another node's write
    assert keys_in(await own_listing(answering, "n1")) == {"n1.web.config.a"}


async def test_a_purge_that_left_a_later_write_is_not_answered_once_the_hub_recorded_it(
    answering: Answering, bus: Bus
) -> None:
    purged = await put(bus, buckets.NEEDS, "n1.web.config.old", NEED)
    await put(bus, buckets.NEEDS, "n1.web.config.new", NEED)
    assert keys_in(await own_listing(answering, "n1")) == {"n1.web.config.old", "n1.web.config.new"}
    await purge_upto(bus, buckets.NEEDS, "n1.>", purged)  # the node's stamp, its later write, stays
    await record_purge(bus, buckets.NEEDS, encode_token("n1"), purged)
    assert await until(lambda: _without_old(answering)), "the purged key is still answered"
    for _ in range(5):
        assert keys_in(await own_listing(answering, "n1")) == {"n1.web.config.new"}


async def _without_old(answering: Answering) -> bool:
    return "n1.web.config.old" not in keys_in(await own_listing(answering, "n1"))


def test_a_sequence_written_again_after_a_rollback_is_not_the_kept_message() -> None:
    own = OwnPages()
    own._followed = True  # as `follow` says once the purge records stored are read
    kept = OwnListing("needs", "n1", LastStamp(7, "2026-12-06T03:00:00.000000001Z"), 1000)
    own.keep(kept, 5, b"page")
    assert own.page(kept) == b"page"
    again = OwnListing("needs", "n1", LastStamp(7, "2026-12-06T03:00:09.000000001Z"), 1000)
    assert own.page(again) is None
    assert own.page(OwnListing("applied", "n1", kept.stamp, 1000)) is None
    assert own.page(OwnListing("needs", "n1", kept.stamp, 999)) is None


def test_a_purge_record_keeps_no_page_holding_a_purged_entry() -> None:
    own = OwnPages()
    own._followed = True  # as `follow` says once the purge records stored are read
    listing = OwnListing("needs", "n1", LastStamp(9, "t"), 1000)
    own.keep(listing, 4, b"page")
    own.forget_purged(buckets.NEEDS.name, encode_token("n1"), 4)
    assert own.page(listing) is None
    own.keep(listing, 4, b"page")
    assert own.page(listing) is None
    own.keep(listing, 5, b"later")
    assert own.page(listing) == b"later"


def test_the_pages_memory_is_bounded_the_least_recently_asked_going_first() -> None:
    own = OwnPages(max_bytes=250)
    own._followed = True  # as `follow` says once the purge records stored are read
    listings = [OwnListing("needs", f"n{i}", LastStamp(i + 1, "t"), 1000) for i in range(3)]
    for listing in listings[:2]:
        own.keep(listing, 1, b"x" * 100)
    assert own.page(listings[0]) is not None  # n0 asked last: n1 is the least recently asked
    own.keep(listings[2], 1, b"x" * 100)
    assert own.held_bytes == 200
    assert [own.page(listing) is not None for listing in listings] == [True, False, True]
    own.keep(listings[1], 1, b"x" * 300)  # larger than the whole bound: never kept
    assert own.held_bytes <= 250
