"""Answers too large for one message are paged, never cut."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh_dev.local_nats import LocalNats, local_nats
from provisioner.errors import CursorGone
from provisioner.seat.buckets import ensure_buckets
from provisioner.verb.cursors import Continuation, CursorSeal
from provisioner.verb.handler import Verb
from provisioner.verb.pages import Encoded, build_pages, page_budget
from provisioner.verb.paging import PageCache
from provisioner.verb.service import verb_service
from provisioner.verb.streamed import StreamedListing
from registry.access import Kind, Party
from registry.contract import buckets
from registry.errors import ServiceError
from registry.wire import BucketConfig, Bus, BusOptions, ask, ask_page, ask_patiently, connect, put
from tests.helpers import put_many, serving

NEED = b'{"placeholder":"${config:x}","used_in":["etc/app.conf"]}'


def needs(count: int, nodes: int = 10) -> dict[str, bytes]:
    return {f"n{i % nodes}.module-{i:06d}.config.name": NEED for i in range(count)}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pieces(count: int, size: int, tag: str = "e") -> list[bytes]:
    return [json.dumps({"key": f"{tag}{i:05d}", "pad": "x" * size}).encode() for i in range(count)]


def test_pages_hold_every_piece_in_order_each_under_the_budget() -> None:
    encoded = Encoded(pieces(300, 100), pieces(20, 50, "m"))
    expected_entries, expected_malformed = list(encoded.entries), list(encoded.malformed)
    pages = [json.loads(p) for p in build_pages("needs", encoded, budget=5000, cursor_of=lambda n: f"L.{n}")]
    assert len(pages) > 5
    assert [e for p in pages for e in p["entries"]] == [json.loads(e) for e in expected_entries]
    assert [m for p in pages for m in p["malformed"]] == [json.loads(m) for m in expected_malformed]
    assert [p["page"] for p in pages] == list(range(1, len(pages) + 1))
    assert {p["pages"] for p in pages} == {len(pages)}
    assert [p["next"] for p in pages] == [f"L.{n}" for n in range(2, len(pages) + 1)] + [None]
    assert {json.dumps(p["total"]) for p in pages} == {'{"entries": 300, "malformed": 20}'}


def test_an_empty_listing_is_one_page() -> None:
    pages = build_pages("applied", Encoded([], []), budget=1000, cursor_of=str)
    assert json.loads(pages[0]) == {
        "what": "applied",
        "entries": [],
        "malformed": [],
        "page": 1,
        "pages": 1,
        "total": {"entries": 0, "malformed": 0},
        "next": None,
    }


def test_the_budget_leaves_a_margin_below_max_payload() -> None:
    assert 0 < page_budget(1024 * 1024) < 1024 * 1024 - 4096
    assert 0 < page_budget(16 * 1024) < 16 * 1024


def test_a_cursor_expires_after_its_ttl_and_each_use_renews_it() -> None:
    clock = FakeClock()
    cache = PageCache(ttl=timedelta(seconds=120), clock=clock)
    cache.keep("L", [b"p2", b"p3", b"p4"])
    clock.now += 100
    assert cache.page("L", 2) == b"p2"
    clock.now += 100
    assert cache.page("L", 3) == b"p3"
    clock.now += 121
    with pytest.raises(CursorGone):
        cache.page("L", 4)


def test_a_listing_is_forgotten_after_its_last_page() -> None:
    cache = PageCache()
    cache.keep("L", [b"p2", b"p3"])
    assert cache.page("L", 3) == b"p3"
    assert len(cache) == 0
    with pytest.raises(CursorGone):
        cache.page("L", 2)


def test_a_page_may_be_asked_again_until_the_last_is_sent() -> None:
    cache = PageCache()
    cache.keep("L", [b"p2", b"p3"])
    assert [cache.page("L", 2), cache.page("L", 2)] == [b"p2", b"p2"]


@pytest.mark.parametrize(
    ("listing", "page"), [("L", 1), ("L", 3), ("M", 2)], ids=["page 1", "past the last", "another listing"]
)
def test_a_cursor_naming_no_kept_page_is_gone(listing: str, page: int) -> None:
    cache = PageCache()
    cache.keep("L", [b"p2"])
    with pytest.raises(CursorGone) as raised:
        cache.page(listing, page)
    assert raised.value.code == "410"


def test_a_cursor_serves_only_the_party_that_started_its_listing() -> None:
    n1, n2 = Party(kind=Kind.NODE, name="n1"), Party(kind=Kind.NODE, name="n2")
    cache = PageCache()
    cache.keep("L", [b"p2"], owner=n1)
    for other in (n2, Party(kind=Kind.OPERATOR, name="ops"), None):
        with pytest.raises(CursorGone):
            cache.page("L", 2, other)
    assert cache.page("L", 2, n1) == b"p2"


def test_the_oldest_listing_is_dropped_to_keep_within_bounds() -> None:
    cache = PageCache(max_listings=2, max_bytes=10)
    cache.keep("A", [b"1234"])
    cache.keep("B", [b"1234"])
    cache.keep("C", [b"1234"])
    assert len(cache) == 2
    with pytest.raises(CursorGone):
        cache.page("A", 2)
    cache.keep("D", [b"12345678"])
    assert cache.size <= 10
    assert cache.page("D", 2) == b"12345678"


def test_a_party_over_its_share_drops_its_own_oldest_listing_never_anothers() -> None:
    n1, ops = Party(kind=Kind.NODE, name="n1"), Party(kind=Kind.OPERATOR, name="ops")
    cache = PageCache(max_listings=8, max_bytes=100, party_listings=2, party_bytes=10)
    cache.keep("O", [b"12", b"34"], owner=ops)
    for listing in "ABCDEFGH":
        cache.keep(listing, [b"12", b"34"], owner=n1)
    assert len(cache) == 3
    with pytest.raises(CursorGone):
        cache.page("F", 2, n1)
    assert cache.page("G", 2, n1) == b"12"  # its newest two are kept
    assert cache.page("H", 2, n1) == b"12"
    cache.keep("I", [b"1234", b"5678"], owner=n1)  # over its bytes: its own older ones go
    assert len(cache) == 2
    assert cache.page("O", 2, ops) == b"12"


def test_a_full_cache_drops_a_listing_of_the_party_holding_the_most() -> None:
    n1, n2, ops = (
        Party(kind=Kind.NODE, name="n1"),
        Party(kind=Kind.NODE, name="n2"),
        Party(kind=Kind.OPERATOR, name="ops"),
    )
    cache = PageCache(max_listings=4, max_bytes=100, party_listings=3, party_bytes=100)
    cache.keep("O", [b"1"], owner=ops)
    cache.keep("A", [b"1"], owner=n1)
    cache.keep("B", [b"1"], owner=n1)
    cache.keep("C", [b"1"], owner=n2)
    cache.keep("D", [b"1"], owner=n2)  # full: n1 holds the most, its oldest goes
    assert len(cache) == 4
    assert cache.page("O", 2, ops) == b"1"
    assert cache.page("B", 2, n1) == b"1"
    with pytest.raises(CursorGone):
        cache.page("A", 2, n1)


async def test_pages_fit_a_small_max_payload_and_join_to_the_whole_listing(small_payload_server: LocalNats) -> None:
    async with connect(BusOptions(servers=(small_payload_server.url,), name="test")) as bus:
        assert bus.max_payload == 16384
        values = needs(400)
        await put_many(bus, buckets.NEEDS, values)
        await put(bus, buckets.NEEDS, "n1.bad", b"{}")
        request = {"what": "needs"}
        sizes: list[int] = []
        answer: dict[str, Any] = {}
        cursor: str | None = None
        while True:
            body = json.dumps({**request, "cursor": cursor} if cursor else request).encode()
            msg = await bus.request(buckets.VERB_SUBJECT, body)
            sizes.append(len(msg.data))
            answer = json.loads(msg.data)
            cursor = answer["next"]
            if cursor is None:
                break
        assert len(sizes) == answer["pages"] > 3
        assert max(sizes) <= 16384
        merged = await ask(bus, request)
        assert [e["key"] for e in merged["entries"]] == list(values)  # streamed: in the order written
        assert [m["key"] for m in merged["malformed"]] == ["n1.bad"]
        assert merged["total"] == {"entries": 400, "malformed": 1}


async def test_a_cursor_must_continue_the_same_query(small_payload_server: LocalNats) -> None:
    async with connect(BusOptions(servers=(small_payload_server.url,), name="test")) as bus:
        await put_many(bus, buckets.NEEDS, needs(400, nodes=2))
        first = await ask_page(bus, {"what": "needs", "node": "n1"})
        assert first["next"] is not None
        with pytest.raises(ServiceError) as raised:
            await ask_page(bus, {"what": "needs", "node": "n2", "cursor": first["next"]})
        assert raised.value.code == "400"
        second = await ask_page(bus, {"what": "needs", "node": "n1", "cursor": first["next"]})
        assert second["page"] == 2
        again = await ask_page(bus, {"node": "n1", "cursor": first["next"]})
        assert again == second


@pytest.mark.slow
async def test_30000_needs_keys_come_back_whole_across_pages(server: LocalNats, bus: Bus) -> None:
    values = needs(30_000, nodes=300)
    await put_many(bus, buckets.NEEDS, values)
    first = await ask_page(bus, {"what": "needs"})
    merged = await ask(bus, {"what": "needs"})
    assert first["next"] is not None
    assert merged["pages"] > 1
    assert [e["key"] for e in merged["entries"]] == list(values)
    assert merged["total"] == {"entries": 30_000, "malformed": 0}
    assert merged["malformed"] == []


class RefusesOnce(CursorSeal):
    """A seal that refuses the first cursor brought back (410): one expired, say."""

    def __init__(self) -> None:
        super().__init__(b"k" * 32)
        self.refused = False

    def open(self, cursor: str, given: Mapping[str, object], asker: Party | None) -> Continuation:
        if not self.refused:
            self.refused = True
            raise CursorGone()
        return super().open(cursor, given, asker)


class CountsListings(PageCache):
    def __init__(self) -> None:
        super().__init__(seal=RefusesOnce())
        self.listings = 0

    def keep_streamed(self, listing_id: str, streamed: StreamedListing, owner: Party | None = None) -> None:
        self.listings += 1
        super().keep_streamed(listing_id, streamed, owner)


async def test_a_patient_query_starts_a_listing_the_seat_forgot_again(tmp_path: Path) -> None:
    """`mesh-provisioner query` restarts a listing on 410."""
    async with (
        local_nats(tmp_path / "nats", "max_payload: 16384") as server,
        connect(BusOptions(servers=(server.url,), name="test")) as bus,
    ):
        await ensure_buckets(bus, BucketConfig(max_value_size=8192))
        await put_many(bus, buckets.NEEDS, needs(300))
        cache = CountsListings()
        async with verb_service(bus, verb=Verb(bus, cache)):
            answer = await ask_patiently(bus, {"what": "needs"}, within=timedelta(seconds=30))
    assert answer["total"]["entries"] == len(answer["entries"]) == 300
    assert answer["pages"] > 1
    assert cache.listings == 2


# nats-server's max_pending and the listings, both a fifth of what showed the slow consumer (64 MiB
# and 200,000 keys): one listing's bytes fit within it, three at once do not.
MAX_PENDING = 64 * 2**20 // 5
LISTED = 200_000 // 5


@pytest.mark.slow
async def test_three_whole_listings_at_once_past_the_connections_pending_bound_are_each_answered_whole(
    tmp_path: Path,
) -> None:
    """Pushed at once over the seat's one connection, three such listings outran it
    (nats-server cut it as a slow consumer; each answered 503). They took turns; streamed, each
    reads one pull at a time, and they run at once."""
    async with (
        local_nats(tmp_path / "nats", f"max_pending: {MAX_PENDING}") as nats_server,
        connect(BusOptions(servers=(nats_server.url,), name="test")) as bus,
        serving(nats_server.url),
    ):
        await put_many(bus, buckets.NEEDS, needs(LISTED))
        stored = await bus.jetstream(buckets.NEEDS.info_api, operation="needs")
        assert stored["state"]["bytes"] < MAX_PENDING < 3 * stored["state"]["bytes"]
        answers: list[int] = []

        async def whole_listing() -> None:
            answer = await ask(bus, {"what": "needs"}, reply_wait=timedelta(seconds=60))
            answers.append(len(answer["entries"]))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(whole_listing)
    assert answers == [LISTED] * 3
