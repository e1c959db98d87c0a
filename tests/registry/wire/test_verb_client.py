"""The one page follower (`registry.wire.verb_client.follow`): a key answered twice is kept where it
was answered last, an answer is followed for at most its bound of pages, and a page it cannot use
is a `BusError`; against a real seat on 16 KiB messages, and a stand-in seat answering on the
verb's subject."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from functools import partial
from pathlib import Path

import pytest

from registry.contract import NeedsRow, Page, Totals, buckets, parse_page
from registry.errors import BusError
from registry.serving import EndpointSpec, ServiceRequest, serve
from registry.wire import Bus, answer_of, follow, page_of, put
from tests.helpers import paging_seat, put_many

NEED = b'{"placeholder":"${config:x}"}'


@pytest.fixture
async def seat(tmp_path: Path) -> AsyncIterator[Bus]:
    """A seat on a nats-server of 16 KiB messages (answers take many pages); our connection to it."""
    async with paging_seat(tmp_path) as (_, bus):
        yield bus


async def test_a_key_written_again_as_malformed_during_a_listing_is_kept_once_where_it_came_last(seat: Bus) -> None:
    await put_many(seat, buckets.NEEDS, {f"n{i % 4}.m{i:04d}.config.x": NEED for i in range(400)})
    moved: list[str] = []

    async def ask_one(request: Mapping[str, object]) -> Page:
        page = await page_of(seat, request)
        if not moved:  # after the first page: a key it answered is written again, now out of JSON
            first = page.entries[0]
            assert isinstance(first, NeedsRow)
            moved.append(first.key)
            await put(seat, buckets.NEEDS, moved[0], b"{not json")
        return page

    answer = await follow({"what": "needs"}, ask_one)
    keys = [row.key for row in answer.entries if isinstance(row, NeedsRow)]
    assert moved[0] not in keys
    assert [bad.key for bad in answer.malformed] == moved
    assert len(keys) == len(set(keys)) == 399
    assert answer.total == Totals(entries=399, malformed=1)


async def test_a_listing_answered_once_keeps_the_seats_total(seat: Bus) -> None:
    await put_many(seat, buckets.NEEDS, {f"n{i % 4}.m{i:04d}.config.x": NEED for i in range(400)})
    pages: list[tuple[int, int | None]] = []
    answer = await answer_of(seat, {"what": "needs"}, on_page=lambda read, of: pages.append((read, of)))
    assert answer.total == Totals(entries=400, malformed=0)
    assert len(pages) > 2
    assert [read for read, _ in pages] == list(range(1, len(pages) + 1))
    assert pages[-1][1] == len(pages) == answer.pages


@pytest.fixture
async def stand_in(bus: Bus) -> AsyncIterator[list[bytes]]:
    """A stand-in seat on the verb's subject: it answers each request with the next body of the
    list it yields, the last one for ever after."""
    bodies: list[bytes] = []

    async def handler(request: ServiceRequest) -> None:
        await request.respond(bodies.pop(0) if len(bodies) > 1 else bodies[0])

    endpoints = [EndpointSpec("provisioning", buckets.VERB_SUBJECT, handler)]
    async with serve(bus, name="stand-in", version="1.0.0", description="test", endpoints=endpoints):
        yield bodies


def page(number: int, following: str | None) -> bytes:
    body = {
        "what": "needs",
        "entries": [],
        "malformed": [],
        "page": number,
        "pages": None,
        "total": {"at_most": 1},
        "next": following,
    }
    return json.dumps(body).encode()


async def test_an_answer_whose_cursors_never_end_is_followed_to_its_bound(bus: Bus, stand_in: list[bytes]) -> None:
    stand_in.append(page(1, "again.2"))
    with pytest.raises(BusError, match="past 5 pages"):
        await follow({"what": "needs"}, partial(page_of, bus), max_pages=5)


@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"what":"needs"}', b"{not json", page(1, None).replace(b'"needs"', b'"applied"')],
    ids=["not an object", "no entries", "not JSON", "another what than asked"],
)
async def test_an_answer_that_is_no_page_is_a_bus_error(bus: Bus, stand_in: list[bytes], body: bytes) -> None:
    stand_in.append(body)
    with pytest.raises(BusError, match="the answer cannot be used"):
        await answer_of(bus, {"what": "needs"})


def _needs_page(rows: list[str], malformed: list[str], number: int, last: bool) -> Page:
    entries = [{"key": k, "node": "n1", "module": "m", "kind": "config", "name": k, "value": {}} for k in rows]
    page = {
        "what": "needs",
        "entries": entries,
        "malformed": [{"key": k, "reason": "bad"} for k in malformed],
        "page": number,
        "pages": number if last else None,
        "total": {"entries": len(rows), "malformed": len(malformed)} if last else {"at_most": 99},
        "next": None if last else f"L.{number + 1}",
    }
    return parse_page(json.dumps(page).encode(), "needs")


@pytest.mark.parametrize(
    ("pages", "entries", "malformed"),
    [
        pytest.param([(["a", "b"], [])], ["a", "b"], [], id="one page, every key new"),
        pytest.param([(["a", "b", "a"], [])], ["b", "a"], [], id="a key twice in one page"),
        pytest.param([(["a"], ["b"]), ([], ["b"])], ["a"], ["b"], id="a malformed key answered again"),
        pytest.param([(["a"], ["b"]), (["b"], [])], ["a", "b"], [], id="a malformed key answered again as an entry"),
        pytest.param([(["a", "b"], []), (["c", "a"], [])], ["b", "c", "a"], [], id="an entry answered again later"),
    ],
)
async def test_a_key_answered_twice_is_kept_once_where_it_came_last(
    pages: list[tuple[list[str], list[str]]], entries: list[str], malformed: list[str]
) -> None:
    given = iter(_needs_page(rows, bad, n, n == len(pages)) for n, (rows, bad) in enumerate(pages, start=1))

    async def ask_one(request: Mapping[str, object]) -> Page:
        return next(given)

    answer = await follow({"what": "needs"}, ask_one)
    rows = [entry for entry in answer.entries if isinstance(entry, NeedsRow)]
    assert len(rows) == len(answer.entries)
    assert ([e.key for e in rows], [m.key for m in answer.malformed]) == (entries, malformed)
    assert answer.total == Totals(entries=len(entries), malformed=len(malformed))
