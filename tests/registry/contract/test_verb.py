"""The verb's models against the wire: a real seat's pages parse into them and are written back
as the same bytes; the documented answer (docs/verb.md) is the same JSON document; what is not the
contract is refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from mesh_dev.local_nats import LocalNats
from registry.contract import (
    MAX_PAGE_BYTES,
    MAX_PAGE_DEPTH,
    MAX_VALUE_DEPTH,
    AppliedPage,
    AtMost,
    CollectPage,
    JsonRefused,
    MalformedKey,
    NeedsPage,
    NodesPage,
    RegistryPage,
    Totals,
    VerbRequest,
    buckets,
    page_json,
    parse_page,
    to_json,
)
from registry.contract.models import AppliedValue, CollectValue, NeedValue
from registry.wire import Bus, Holder, Lease, ask_service, node_key
from tests.helpers import paging_seat, put_many

HOLDER = Holder(id="h1", host="hôte-1", pid=101, since=datetime(2026, 1, 1, tzinfo=UTC), ttl_seconds=30)
NEEDS = {
    "n1.web.config.db=3Aurl": to_json(NeedValue(placeholder="${config:db:url}", used_in=("DB_URL",))),
    "n1.web.secret.caf=C3=A9": to_json(NeedValue(placeholder="${secret:café}", used_in=("CAFÉ",))),
    "n1.bad": b'{"placeholder":"x"}',
    "n1.web.config.not-json": b"{not json",
}
APPLIED = {
    "n1.web": to_json(AppliedValue(state="applied", digest="hmac-sha256:00", changed_at="2026-01-02T03:04:05Z")),
    "n2.db": to_json(AppliedValue(state="pending", reasons=("no value for ${config:db:url}",))),
    "n2.bad.key": b'{"state":"applied"}',
}
COLLECT = {"n1.shell=3Azsh.web": to_json(CollectValue(items=("export A=1", "alias é=ls")))}


@pytest.fixture
async def seat(tmp_path: Path) -> AsyncIterator[Bus]:
    """A seat on a nats-server of 16 KiB messages, the buckets filled; our connection to it."""
    async with paging_seat(tmp_path) as (server, bus):
        await _fill(bus, server)
        yield bus


async def _fill(bus: Bus, server: LocalNats) -> None:
    await put_many(bus, buckets.NEEDS, NEEDS)
    await put_many(bus, buckets.APPLIED, APPLIED)
    await put_many(bus, buckets.COLLECT, COLLECT)
    await Lease(bus, node_key("n1"), ttl=timedelta(seconds=30), holder=HOLDER).try_take()
    await put_many(bus, buckets.LEASES, {"node.n3": b"{not a holder", "node": b"{}"})
    del server


async def _page(bus: Bus, request: dict[str, object]) -> bytes:
    reply = await ask_service(bus, buckets.VERB_SUBJECT, json.dumps(request).encode())
    return reply.data


@pytest.mark.parametrize(
    ("request_", "page_type"),
    [
        ({"what": "registry"}, RegistryPage),
        ({"what": "needs", "node": "n1"}, NeedsPage),
        ({"what": "applied"}, AppliedPage),
        ({"what": "collect", "node": "n1"}, CollectPage),
        ({"what": "nodes"}, NodesPage),
        ({"what": "nodes", "node": "n1", "stale_after": 600}, NodesPage),
    ],
    ids=[
        "the registry",
        "one node's needs",
        "every applied record",
        "one node's collections",
        "the fleet",
        "one node's lease",
    ],
)
async def test_a_seat_page_parses_and_is_written_back_as_the_same_bytes(
    seat: Bus, request_: dict[str, object], page_type: type
) -> None:
    raw = await _page(seat, request_)
    page = parse_page(raw, request_["what"])  # type: ignore[arg-type]
    assert isinstance(page, page_type)
    assert page_json(page) == raw


async def test_every_page_of_a_paged_listing_round_trips(seat: Bus) -> None:
    await put_many(seat, buckets.NEEDS, {f"n9.m.config.k{i:04d}": b'{"placeholder":"%d"}' % i for i in range(400)})
    request: dict[str, object] = {"what": "needs"}
    raws = [await _page(seat, request)]
    while (following := json.loads(raws[-1])["next"]) is not None:
        raws.append(await _page(seat, {**request, "cursor": following}))
    pages = [parse_page(raw) for raw in raws]
    assert len(pages) > 2
    assert [page_json(page) for page in pages] == raws
    assert isinstance(pages[0].total, AtMost)
    assert isinstance(pages[-1].total, Totals)
    assert pages[-1].pages == len(pages)


async def test_the_nodes_answer_names_its_parts(seat: Bus) -> None:
    # The seat answers from its view of the fleet, which follows the writes above by a watch: a
    # loaded run asked before the view had n3's lease.
    with anyio.fail_after(10):
        while True:
            page = parse_page(await _page(seat, {"what": "nodes"}))
            assert isinstance(page, NodesPage)
            rows = {row.node: row for row in page.entries}
            if {"n1", "n2", "n3"} <= rows.keys() and len(page.malformed) == 2:
                break
            await anyio.sleep(0.05)
    assert rows["n1"].lease.state == "held"
    assert rows["n3"].lease.state == "held"
    assert rows["n1"].applied == 1
    assert rows["n2"].lease.state == "none"
    assert rows["n2"].verdict == "gone"
    assert {(bad.bucket, bad.key) for bad in page.malformed} == {
        (buckets.LEASES.name, "node"),
        (buckets.APPLIED.name, "n2.bad.key"),
    }


def test_the_documented_answer_is_the_same_json_document() -> None:
    documented = {
        "what": "needs",
        "entries": [
            {
                "key": "n1.web.config.db=3Aurl",
                "node": "n1",
                "module": "web",
                "kind": "config",
                "name": "db:url",
                "revision": 42,
                "value": {"placeholder": "${config:db:url}", "used_in": ["DB_URL"]},
            }
        ],
        "malformed": [{"key": "n1.bad", "reason": "it has 2 tokens, the shape has 4"}],
        "page": 1,
        "pages": 1,
        "total": {"entries": 1, "malformed": 1},
        "next": None,
    }
    page = parse_page(json.dumps(documented).encode(), "needs")
    assert json.loads(page_json(page)) == documented
    assert page.malformed == [MalformedKey(key="n1.bad", reason="it has 2 tokens, the shape has 4")]


@pytest.mark.parametrize(
    "changed",
    [
        {"surprise": 1},
        {"what": "secrets"},
        {"total": {"entries": 1}},
        {"entries": [{"key": "k", "node": "n1"}]},
        {"malformed": [{"key": "k"}]},
        {"page": 0},
    ],
    ids=[
        "a field the contract does not have",
        "an unknown what",
        "a total without its malformed count",
        "an entry without its parts",
        "a malformed key without its reason",
        "a page numbered 0",
    ],
)
def test_what_is_not_the_contract_is_refused(changed: dict[str, object]) -> None:
    page = {
        "what": "needs",
        "entries": [],
        "malformed": [],
        "page": 1,
        "pages": 1,
        "total": {"entries": 0, "malformed": 0},
        "next": None,
    }
    with pytest.raises(JsonRefused, match="not a page of the verb's answer"):
        parse_page(json.dumps(page | changed).encode())


async def test_a_value_as_deep_as_the_seat_answers_round_trips(seat: Bus) -> None:
    deepest = b"[" * MAX_VALUE_DEPTH + b"]" * MAX_VALUE_DEPTH
    await put_many(seat, buckets.NEEDS, {"n1.web.config.deep": deepest})
    raw = await _page(seat, {"what": "needs", "node": "n1", "module": "web"})
    page = parse_page(raw, "needs")
    assert isinstance(page, NeedsPage)
    assert "n1.web.config.deep" in [row.key for row in page.entries]
    assert page_json(page) == raw


def test_a_page_too_deep_or_too_long_is_refused_unparsed() -> None:
    too_deep = b'{"what":"needs","entries":' + b"[" * MAX_PAGE_DEPTH + b"]" * MAX_PAGE_DEPTH + b"}"
    with pytest.raises(JsonRefused, match="levels deep"):
        parse_page(too_deep, "needs")
    with pytest.raises(JsonRefused, match="bytes long"):
        parse_page(b" " * (MAX_PAGE_BYTES + 1), "needs")


def test_a_request_is_sent_with_the_fields_given_only() -> None:
    request = VerbRequest(what="needs", node="n1")
    assert request.fields() == {"what": "needs", "node": "n1"}
    assert VerbRequest().fields() == {}
    assert VerbRequest(what="nodes", stale_after=600.0).fields() == {"what": "nodes", "stale_after": 600.0}


@pytest.mark.parametrize(
    "fields",
    [{"what": "secrets"}, {"node": ""}, {"node": "x" * 1025}, {"stale_after": 0.0}, {"cursor": ""}, {"nod": "n1"}],
    ids=[
        "an unknown what",
        "an empty name",
        "a name over 1,024 bytes",
        "a stale_after of 0",
        "an empty cursor",
        "a misspelled field",
    ],
)
def test_a_request_the_seat_would_refuse_is_refused_here_too(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        VerbRequest.model_validate(fields)
