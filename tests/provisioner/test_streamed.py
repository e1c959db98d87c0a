"""Whole listings streamed: each page read from the bucket's stream when its cursor
comes, in bounded memory, on a real nats-server with the seat serving (16 KiB pages)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.verb.cursors import Continuation, CursorSeal
from provisioner.verb.listing import KNOWN_VALUES, Encoder
from provisioner.verb.pages import page_budget
from provisioner.verb.paging import PageCache
from provisioner.verb.streamed import READ_AHEAD_PAGES, StreamedListing
from registry.contract import AtMost, NeedsRow, Page, Totals, buckets, page_json, parse_page
from registry.wire import Bus, BusOptions, ask, ask_page, connect, delete, follow, get_latest, page_of, put
from tests.helpers import in_own_task, put_many
from tests.provisioner.scoped_mesh import N1, N2, OPS, keys_of, mesh, one_page

NEED = b'{"placeholder":"${config:x}","used_in":["etc/app.conf"]}'


SEAL = CursorSeal(b"k" * 32)


def begun(listing: str = "L") -> Continuation:
    """A listing of needs begun by the data account, as the seat begins one."""
    return Continuation(listing, 1, {"what": "needs"}, "")


def needs(count: int, nodes: int = 10) -> dict[str, bytes]:
    return {f"n{i % nodes}.module-{i:06d}.config.name": NEED for i in range(count)}


@pytest.fixture
async def bus(small_payload_server: LocalNats) -> AsyncIterator[Bus]:
    async with connect(BusOptions(servers=(small_payload_server.url,), name="test")) as bus:
        yield bus


async def pages_of(bus: Bus, request: dict[str, Any]) -> list[dict[str, Any]]:
    pages = [await ask_page(bus, request)]
    while pages[-1]["next"] is not None:
        pages.append(await ask_page(bus, {**request, "cursor": pages[-1]["next"]}))
    return pages


async def test_pages_before_the_last_say_at_most_how_many_and_the_last_says_how_many(bus: Bus) -> None:
    await put_many(bus, buckets.NEEDS, needs(500))
    await put(bus, buckets.NEEDS, "n1.bad", b"{}")
    pages = await pages_of(bus, {"what": "needs"})
    assert len(pages) > 3
    assert all(p["pages"] is None and p["total"] == {"at_most": 501} for p in pages[:-1])
    assert pages[-1]["pages"] == len(pages) == pages[-1]["page"]
    assert pages[-1]["total"] == {"entries": 500, "malformed": 1}
    assert [p["page"] for p in pages] == list(range(1, len(pages) + 1))
    merged = await ask(bus, {"what": "needs"})
    assert merged["total"] == {"entries": 500, "malformed": 1}
    assert merged["pages"] == len(pages)
    assert [m["key"] for m in merged["malformed"]] == ["n1.bad"]


async def test_a_streamed_listing_is_in_stream_order_without_deleted_keys(bus: Bus) -> None:
    values = needs(400)
    await put_many(bus, buckets.NEEDS, values)
    gone = "n3.module-000003.config.name"
    item = await get_latest(bus, buckets.NEEDS, gone)
    assert item is not None
    await delete(bus, buckets.NEEDS, gone, last=item.revision)
    merged = await ask(bus, {"what": "needs"})
    assert [e["key"] for e in merged["entries"]] == [key for key in values if key != gone]
    assert merged["total"] == {"entries": 399, "malformed": 0}


async def test_a_listing_that_fits_one_page_is_sorted_by_key(bus: Bus) -> None:
    values = dict(reversed(needs(20).items()))
    await put_many(bus, buckets.NEEDS, values)
    answer = await ask_page(bus, {"what": "needs"})
    assert (answer["pages"], answer["next"]) == (1, None)
    assert [e["key"] for e in answer["entries"]] == sorted(values)
    assert answer["total"] == {"entries": 20, "malformed": 0}


async def test_a_page_of_malformed_keys_read_from_many_large_values_encodes_each_value_once(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The values read for page 1 are encoded as they arrive and never again: sorting a listing that
    fits one page sorts the pieces. It held the items and encoded them again, values and all: a
    node's every 64 KiB value that is not JSON, tens of MB, and half a second of the event loop."""
    values = {f"n1.module-{i:03d}.config.name": b"x" * 4000 for i in reversed(range(40))}  # 160 KB read
    await put_many(bus, buckets.NEEDS, values)
    encoded: list[str] = []
    add = Encoder.add

    def counted(self: Encoder, key: str, value: bytes, revision: int) -> int:
        encoded.append(key)
        return add(self, key, value, revision)

    monkeypatch.setattr(Encoder, "add", counted)
    budget = page_budget(bus.max_payload)
    listing = await StreamedListing.start(bus, "needs", [">"], begun=begun(), seal=SEAL.seal, budget=budget, idle=10)
    try:
        page = json.loads(await listing.page(1))
    finally:
        await listing.close()
    assert budget < 40 * 4000 and listing.finished
    assert [m["key"] for m in page["malformed"]] == sorted(values)
    assert sorted(encoded) == sorted(values)  # each once


async def test_a_key_written_during_the_listing_is_answered_again_at_its_new_place(bus: Bus) -> None:
    await put_many(bus, buckets.NEEDS, needs(400))
    first = await ask_page(bus, {"what": "needs"})
    moved = first["entries"][0]["key"]
    await put(bus, buckets.NEEDS, moved, b'{"placeholder":"${config:y}"}')
    later = await pages_of(bus, {"cursor": first["next"], "what": "needs"})
    keys = [e["key"] for e in first["entries"]] + [e["key"] for p in later for e in p["entries"]]
    assert keys.count(moved) == 2
    assert later[-1]["entries"][-1]["key"] == moved
    assert later[-1]["entries"][-1]["value"] == {"placeholder": "${config:y}"}
    assert len(set(keys)) == 400


async def test_the_joined_answer_keeps_a_key_written_during_the_listing_once_with_its_new_value(bus: Bus) -> None:
    await put_many(bus, buckets.NEEDS, needs(400))
    moved: list[str] = []

    async def ask_one(request: Mapping[str, object]) -> Page:
        page = await page_of(bus, request)
        if not moved:  # after the first page: a key it answered is written again
            first = page.entries[0]
            assert isinstance(first, NeedsRow)
            moved.append(first.key)
            await put(bus, buckets.NEEDS, moved[0], b'{"placeholder":"${config:y}"}')
        return page

    merged = (await follow({"what": "needs"}, ask_one)).document()
    keys = [e["key"] for e in merged["entries"]]
    assert len(keys) == len(set(keys)) == 400
    assert keys[-1] == moved[0]
    assert merged["entries"][-1]["value"] == {"placeholder": "${config:y}"}
    assert merged["total"] == {"entries": 400, "malformed": 0}


async def test_a_page_asked_again_is_answered_again_even_after_a_later_one(bus: Bus) -> None:
    await put_many(bus, buckets.NEEDS, needs(400))
    first = await ask_page(bus, {"what": "needs"})
    second = await bus.request(buckets.VERB_SUBJECT, json.dumps({"cursor": first["next"], "what": "needs"}).encode())
    again = await bus.request(buckets.VERB_SUBJECT, json.dumps({"cursor": first["next"]}).encode())
    assert second.data == again.data
    third = await ask_page(bus, {"cursor": json.loads(second.data)["next"]})
    assert third["page"] == 3
    earlier = await bus.request(buckets.VERB_SUBJECT, json.dumps({"cursor": first["next"]}).encode())
    assert json.loads(earlier.data)["entries"] == json.loads(second.data)["entries"]  # resumed where it says


async def listing_consumers(bus: Bus) -> list[str]:
    """The consumers on the needs stream besides the seat's own watches (`seat-...`)."""
    answer = await bus.jetstream(f"CONSUMER.NAMES.{buckets.NEEDS.stream}", operation="consumers")
    return [name for name in answer["consumers"] or [] if not name.startswith("seat-")]


async def test_the_listings_consumer_is_gone_after_its_last_page(bus: Bus) -> None:
    await put_many(bus, buckets.NEEDS, needs(400))
    await ask(bus, {"what": "needs"})
    assert await listing_consumers(bus) == []


async def test_a_listing_holds_a_few_pages_whatever_the_buckets_size(bus: Bus) -> None:
    await put_many(bus, buckets.NEEDS, needs(3000))
    budget = page_budget(bus.max_payload)
    listing = await StreamedListing.start(bus, "needs", [">"], begun=begun(), seal=SEAL.seal, budget=budget, idle=10)
    try:
        number = 1
        while not listing.finished:
            await listing.page(number)
            number += 1
    finally:
        await listing.close()
    assert number > 10
    # the pages read ahead (READ_AHEAD_PAGES), the pull under way when they were reached, and
    # what did not fit the page before: not the bucket (3,000 entries, about 28 pages)
    assert budget <= listing.most_waiting <= (READ_AHEAD_PAGES + 2) * budget


@pytest.mark.parametrize(
    "cache",
    [PageCache(max_listings=1), PageCache(max_bytes=StreamedListing.most_bytes_for(2000))],
    ids=["one listing kept", "one listing's most bytes kept"],
)
async def test_a_dropped_listing_has_its_consumer_deleted(bus: Bus, cache: PageCache) -> None:
    await put_many(bus, buckets.NEEDS, needs(400))
    for listing_id in ("A", "B"):
        listing = await StreamedListing.start(
            bus, "needs", [">"], begun=begun(listing_id), seal=SEAL.seal, budget=2000, idle=10
        )
        await listing.page(1)
        cache.keep_streamed(listing_id, listing)
    await cache.close_dropped()
    assert len(await listing_consumers(bus)) == 1
    assert len(cache) == 1


# Scoped: a cursor of a streamed listing is a bearer token bound to whoever started the listing.


@pytest.fixture
async def crowded(tmp_path: Path) -> AsyncIterator[LocalNats]:
    """The multi-account mesh with 16 KiB pages and more n1 keys than one batch read answers:
    n1's own listing is streamed too."""
    async with in_own_task(mesh(tmp_path / "nats", "max_payload: 16384\n", bucket_max_value_size=8192)) as server:
        async with connect(BusOptions(servers=(server.url,), name="seat")) as seat:
            await put_many(seat, buckets.NEEDS, {f"n1.m{i:04d}.config.x": NEED for i in range(1100)})
        yield server


@pytest.mark.parametrize("other", [N1.account, N2.account], ids=["a node", "another node"])
async def test_an_operators_streamed_cursor_serves_no_node(crowded: LocalNats, other: str) -> None:
    _, first = await one_page(crowded, OPS.account, {"what": "needs"})
    assert first["next"] is not None and first["pages"] is None
    code, refused = await one_page(crowded, other, {"cursor": first["next"]})
    assert (code, "entries" in refused) == ("410", False)
    code, following = await one_page(crowded, OPS.account, {"cursor": first["next"]})
    assert (code, following["page"]) == (None, 2)


async def test_a_nodes_streamed_listing_holds_its_keys_only_and_serves_no_one_else(crowded: LocalNats) -> None:
    _, first = await one_page(crowded, N1.account, {"what": "needs"})
    assert first["next"] is not None and first["pages"] is None  # more than one batch read: streamed
    for other in (N2.account, OPS.account):
        code, _ = await one_page(crowded, other, {"cursor": first["next"]})
        assert code == "410"
    code, following = await one_page(crowded, N1.account, {"cursor": first["next"]})
    assert code is None
    assert all(key.startswith("n1.") for key in keys_of(following))


def test_an_encoder_parses_a_value_once_and_still_reports_every_malformed_one() -> None:
    encoder = Encoder("needs", max_item_bytes=1024)
    for i in range(KNOWN_VALUES + 10):  # past what it remembers: it forgets and goes on
        encoder.add(f"n{i}.app.config.x", NEED if i % 2 else b'{"placeholder":"%d"}' % i, i + 1)
    encoder.add("n1.app.config.nan", b'{"a": NaN}', 1)
    encoder.add("n1.app.config.y", NEED, 2)
    encoder.add("n1.app.config.open", NEED[:-1], 3)
    assert len(encoder.encoded.entries) == KNOWN_VALUES + 11
    assert [json.loads(m)["key"] for m in encoder.encoded.malformed] == ["n1.app.config.nan", "n1.app.config.open"]


async def test_every_page_of_a_streamed_listing_is_the_contracts_page_byte_for_byte(bus: Bus) -> None:
    """The hot path writes its pages by hand: each, the totals `at_most` before the last and the
    last's exact ones, parses into the contract's page and is written back as the same bytes."""
    await put_many(bus, buckets.NEEDS, needs(500) | {"n1.web.config.db=3Aurl": '{"placeholder":"é"}'.encode()})
    await put_many(bus, buckets.NEEDS, {"n1.bad": b"{}", "n2.web.config.broken": b"{not json"})
    request = {"what": "needs"}
    pages = [(await bus.request(buckets.VERB_SUBJECT, json.dumps(request).encode())).data]
    while (following := json.loads(pages[-1])["next"]) is not None:
        pages.append((await bus.request(buckets.VERB_SUBJECT, json.dumps({"cursor": following}).encode())).data)
    parsed = [parse_page(data, "needs") for data in pages]
    assert len(parsed) > 3
    assert {type(page.total) for page in parsed[:-1]} == {AtMost}
    assert parsed[-1].total == Totals(entries=501, malformed=2)
    assert [page_json(page) for page in parsed] == pages
