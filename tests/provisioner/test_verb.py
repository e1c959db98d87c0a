"""The provisioning verb: each `what` and filter, malformed keys, bad requests."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import anyio
import pytest
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from mesh_dev.local_nats import LocalNats
from provisioner.verb.answering import Answering, AtOnce, Reading, Way
from provisioner.verb.cursors import Continuation
from provisioner.verb.nodes import FleetView
from provisioner.verb.paging import PageCache
from provisioner.verb.registry_view import RegistryView
from provisioner.verb.request import Asked, parse_request
from provisioner.verb.streamed import StreamedListing
from registry.contract import KINDS, NeedsPage, What, buckets, page_json, parse_page
from registry.errors import ServiceError
from registry.wire import ERROR_CODE_HEADER, ERROR_HEADER, MULTI_LAST_LIMIT, Bus, Holder, Message, ask, node_key
from tests.helpers import put_many

NEED = b'{"placeholder":"${config:x}","used_in":["a.conf"]}'
NEEDS = {
    "n1.web.config.db=3Aurl": NEED,
    "n1.web.secret.token": NEED,
    "n1.cron.dir.state": NEED,
    "n2.web.config.db=3Aurl": NEED,
}
APPLIED = {"n1.web": b'{"state":"applied"}', "n1.cron": b'{"state":"pending"}', "n2.web": b'{"state":"applied"}'}
COLLECT = {
    "n1.shell=3Azsh=3Anormal.web": b'{"items":["alias ll=ls"]}',
    "n1.shell=3Azsh=3Anormal.cron": b'{"items":[]}',
    "n1.environment=3Apath.web": b'{"items":["/opt/web/bin"]}',
    "n2.shell=3Azsh=3Anormal.web": b'{"items":["x"]}',
}


async def put_all(kv: KeyValue, values: Mapping[str, bytes], *, validate_keys: bool = True) -> None:
    for key, value in values.items():
        await kv.put(key, value, validate_keys=validate_keys)


@pytest.fixture
async def seeded(server: LocalNats, bus: Bus, js: JetStreamContext) -> Bus:
    await put_all(await js.key_value(buckets.NEEDS.name), NEEDS)
    await put_all(await js.key_value(buckets.APPLIED.name), APPLIED)
    await put_all(await js.key_value(buckets.COLLECT.name), COLLECT)
    return bus


def keys_of(answer: dict[str, Any]) -> list[str]:
    return [entry["key"] for entry in answer["entries"]]


async def revision_in(js: JetStreamContext, bucket: str, key: str) -> int:
    return (await (await js.key_value(bucket)).get(key)).revision or 0


async def test_an_empty_body_asks_for_the_registry(seeded: Bus) -> None:
    msg = await seeded.request(buckets.VERB_SUBJECT, b"")
    answer = json.loads(msg.data)
    assert answer["what"] == "registry"
    assert [e["kind"] for e in answer["entries"]] == sorted(KINDS)
    assert answer["entries"][0]["value"]["kind"] == answer["entries"][0]["kind"]
    assert (answer["page"], answer["pages"], answer["next"]) == (1, 1, None)
    assert answer["total"] == {"entries": 13, "malformed": 0}


async def test_needs_entries_carry_their_decoded_parts_revision_and_value(seeded: Bus, js: JetStreamContext) -> None:
    answer = await ask(seeded, {"what": "needs", "node": "n1", "module": "web"})
    db, token = [
        await revision_in(js, buckets.NEEDS.name, k) for k in ("n1.web.config.db=3Aurl", "n1.web.secret.token")
    ]
    assert answer["entries"] == [
        {
            "key": "n1.web.config.db=3Aurl",
            "node": "n1",
            "module": "web",
            "kind": "config",
            "name": "db:url",
            "revision": db,
            "value": json.loads(NEED),
        },
        {
            "key": "n1.web.secret.token",
            "node": "n1",
            "module": "web",
            "kind": "secret",
            "name": "token",
            "revision": token,
            "value": json.loads(NEED),
        },
    ]
    assert answer["malformed"] == []


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({"what": "needs"}, sorted(NEEDS)),
        ({"what": "needs", "node": "n1"}, ["n1.cron.dir.state", "n1.web.config.db=3Aurl", "n1.web.secret.token"]),
        (
            {"what": "needs", "module": "web"},
            ["n1.web.config.db=3Aurl", "n1.web.secret.token", "n2.web.config.db=3Aurl"],
        ),
        ({"what": "needs", "node": "n2", "module": "web"}, ["n2.web.config.db=3Aurl"]),
        ({"what": "needs", "node": "n3"}, []),
        ({"what": "applied"}, sorted(APPLIED)),
        ({"what": "applied", "node": "n1"}, ["n1.cron", "n1.web"]),
        ({"what": "applied", "module": "web"}, ["n1.web", "n2.web"]),
        ({"what": "collect"}, sorted(COLLECT)),
        ({"what": "collect", "node": "n1"}, sorted(k for k in COLLECT if k.startswith("n1."))),
        (
            {"what": "collect", "collection": "shell:zsh:normal"},
            ["n1.shell=3Azsh=3Anormal.cron", "n1.shell=3Azsh=3Anormal.web", "n2.shell=3Azsh=3Anormal.web"],
        ),
        (
            {"what": "collect", "node": "n1", "module": "web"},
            ["n1.environment=3Apath.web", "n1.shell=3Azsh=3Anormal.web"],
        ),
        (
            {"what": "collect", "node": "n1", "collection": "shell:zsh:normal", "module": "cron"},
            ["n1.shell=3Azsh=3Anormal.cron"],
        ),
    ],
    ids=[
        "all needs",
        "needs of one node",
        "needs of one module on every node",
        "needs of one module on one node",
        "needs of an unknown node are none",
        "all applied",
        "applied on one node",
        "applied of one module",
        "all collect",
        "collect of one node",
        "one collection on every node",
        "one contributor's items on one node",
        "one contributor to one collection on one node",
    ],
)
async def test_each_filter_narrows_to_its_keys(seeded: Bus, request_: dict[str, str], expected: list[str]) -> None:
    answer = await ask(seeded, request_)
    assert keys_of(answer) == expected
    assert answer["what"] == request_["what"]


async def test_collect_entries_name_collection_and_contributor(seeded: Bus, js: JetStreamContext) -> None:
    answer = await ask(seeded, {"what": "collect", "node": "n2"})
    revision = await revision_in(js, buckets.COLLECT.name, "n2.shell=3Azsh=3Anormal.web")
    assert answer["entries"] == [
        {
            "key": "n2.shell=3Azsh=3Anormal.web",
            "node": "n2",
            "collection": "shell:zsh:normal",
            "contributor": "web",
            "revision": revision,
            "value": {"items": ["x"]},
        },
    ]


async def test_an_entry_written_again_is_answered_at_its_new_revision(seeded: Bus, js: JetStreamContext) -> None:
    kv = await js.key_value(buckets.APPLIED.name)
    before = (await ask(seeded, {"what": "applied", "node": "n1", "module": "web"}))["entries"][0]["revision"]
    written = await kv.put("n1.web", b'{"state":"pending"}')
    after = (await ask(seeded, {"what": "applied", "node": "n1", "module": "web"}))["entries"][0]
    assert (after["revision"], after["value"]) == (written, {"state": "pending"})
    assert written > before


OUT_OF_SHAPE = {
    "n1.bad": (b"{}", "it has 2 tokens, the shape has 4"),
    "n1.a.b.c=2e": (b"{}", "upper-case hex"),
    "n1.a.b.caf\u00e9": (b"{}", "must be escaped"),
    "n1.web.config.*": (b"{}", "character '*' at offset 0 must be escaped"),
    "n1.web.config.>": (b"{}", "character '>' at offset 0 must be escaped"),
    "n1.web.config.broken": (b"{not json", "not valid JSON"),
    "n1.web.config.nan": (b"NaN", "not JSON"),
    "n1.web.config.latin1": (b'"caf\xe9"', "not UTF-8"),
    "n1.web.config.empty": (b"", "not valid JSON"),
}


async def test_keys_out_of_shape_and_bad_values_are_reported_with_reasons(seeded: Bus, js: JetStreamContext) -> None:
    kv = await js.key_value(buckets.NEEDS.name)
    await put_all(kv, {key: value for key, (value, _) in OUT_OF_SHAPE.items()}, validate_keys=False)
    await kv.put("n2.bad", b"{}")
    answer = await ask(seeded, {"what": "needs", "node": "n1"})
    reported = {m["key"]: m["reason"] for m in answer["malformed"]}
    assert sorted(reported) == sorted(OUT_OF_SHAPE)
    for key, (_, reason) in OUT_OF_SHAPE.items():
        assert reason in reported[key], key
    assert [m["key"] for m in answer["malformed"]] == sorted(reported)
    assert keys_of(answer) == ["n1.cron.dir.state", "n1.web.config.db=3Aurl", "n1.web.secret.token"]
    assert answer["total"] == {"entries": 3, "malformed": len(OUT_OF_SHAPE)}
    everything = await ask(seeded, {"what": "needs"})
    assert "n2.bad" in [m["key"] for m in everything["malformed"]]
    other_node = await ask(seeded, {"what": "needs", "node": "n2"})
    assert [m["key"] for m in other_node["malformed"]] == ["n2.bad"]


async def registry_once(bus: Bus, holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The registry answer, asked until it `holds`: the server's view follows the bucket by a watch."""
    with anyio.fail_after(5):
        while not holds(answer := await ask(bus, {})):
            await anyio.sleep(0.01)
    return answer


async def test_a_registry_value_that_is_json_but_not_an_entry_is_reported_as_stored(
    seeded: Bus, js: JetStreamContext
) -> None:
    revision = await (await js.key_value(buckets.REGISTRY.name)).put("odd", b'{"whatever":1}')
    odd = {"key": "odd", "kind": "odd", "revision": revision, "value": {"whatever": 1}}
    await registry_once(seeded, lambda answer: odd in answer["entries"])


async def test_the_registry_answer_follows_drift_put_straight_into_the_bucket(
    seeded: Bus, js: JetStreamContext
) -> None:
    kv = await js.key_value(buckets.REGISTRY.name)
    await kv.put("bogus", b'{"kind":"bogus"}')
    await kv.put("n=", b"{}", validate_keys=False)
    drifted = await registry_once(seeded, lambda answer: "bogus" in keys_of(answer) and answer["malformed"])
    assert [m["key"] for m in drifted["malformed"]] == ["n="]
    await kv.delete("bogus")
    await kv.put("dir", b"not json")
    mended = await registry_once(seeded, lambda answer: "dir" not in keys_of(answer))
    assert "bogus" not in keys_of(mended)
    assert "dir" in [m["key"] for m in mended["malformed"]]
    assert len(mended["entries"]) == len(KINDS) - 1


def error_of(msg: Message) -> tuple[str, str, dict[str, Any]]:
    return msg.headers[ERROR_CODE_HEADER], msg.headers[ERROR_HEADER], json.loads(msg.data)


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (b"{nope", "400", "not valid JSON"),
        (b"\xff\xfe", "400", "not UTF-8 text"),
        (b'["needs"]', "400", "must be a JSON object, not an array"),
        (b'"needs"', "400", "must be a JSON object, not a string"),
        (b'{"what":"needs","nodes":"n1"}', "400", "unknown field 'nodes'"),
        (b'{"what":"everything"}', "400", "unknown what 'everything'"),
        (b'{"node":"n1"}', "400", "'node' does not apply to what='registry'"),
        (b'{"what":"applied","collection":"c"}', "400", "'collection' does not apply to what='applied'"),
        (b'{"what":"needs","collection":"c"}', "400", "'collection' does not apply to what='needs'"),
        (b'{"what":"needs","node":7}', "400", "field 'node'"),
        (b'{"what":"needs","node":""}', "400", "field 'node'"),
        (b'{"cursor":"no-such-listing.2"}', "410", "restart the listing"),
        (b'{"cursor":"garbage"}', "410", "restart the listing"),
    ],
    ids=[
        "a body that is not JSON",
        "a body that is not UTF-8",
        "an array",
        "a string",
        "an unknown field",
        "an unknown what",
        "a filter on the registry",
        "collection on applied",
        "collection on needs",
        "a node that is not a string",
        "an empty node",
        "an unknown cursor",
        "a cursor that is not one",
    ],
)
async def test_a_bad_request_gets_a_service_error_and_the_server_keeps_serving(
    seeded: Bus, body: bytes, code: str, says: str
) -> None:
    got_code, description, document = error_of(await seeded.request(buckets.VERB_SUBJECT, body))
    assert (got_code, says in description) == (code, True), description
    assert document == {"error": description}
    answer = await ask(seeded, {"what": "applied"})
    assert keys_of(answer) == sorted(APPLIED)


async def test_query_raises_the_verb_error(seeded: Bus) -> None:
    with pytest.raises(ServiceError) as raised:
        await ask(seeded, {"what": "nothing"})
    assert raised.value.code == "400"


@pytest.mark.parametrize(
    "body",
    [json.dumps({"what": "w" * 600_000}).encode(), json.dumps({"whatever" + "x" * 600_000: 1}).encode()],
    ids=["a 600 KB unknown what", "a 600 KB unknown field name"],
)
async def test_a_refusal_never_echoes_a_huge_input_and_the_seat_keeps_serving(seeded: Bus, body: bytes) -> None:
    """An echoed reason over max_payload would get the seat's connection closed for good."""
    reply = await seeded.request(buckets.VERB_SUBJECT, body)
    code, description, document = error_of(reply)
    assert code == "400"
    assert len(reply.data) < 4096
    assert len(description) < 2048
    assert document == {"error": description}
    for _ in range(3):  # the seat is still there, answering
        assert keys_of(await ask(seeded, {"what": "applied"})) == sorted(APPLIED)


async def test_a_node_with_more_keys_than_one_batch_read_answers_is_listed_whole(seeded: Bus) -> None:
    """Past `MULTI_LAST_LIMIT` keys the server refuses the batch read; the listing falls back to a consumer."""
    many = {f"n3.web.config.k{i:05d}": NEED for i in range(MULTI_LAST_LIMIT + 1)}
    await put_many(seeded, buckets.NEEDS, many)
    answer = await ask(seeded, {"what": "needs", "node": "n3"})
    assert keys_of(answer) == sorted(many)
    assert answer["total"] == {"entries": len(many), "malformed": 0}


def asked_for(request: dict[str, str]) -> Asked:
    return Asked(parse_request(json.dumps(request).encode()), None)


WAYS = [
    pytest.param({}, True, Way.REGISTRY_VIEW, id="the registry from its view"),
    pytest.param({}, False, Way.STREAMED, id="the registry without a view streamed"),
    pytest.param({"what": "nodes"}, True, Way.NODES_VIEW, id="the fleet from its filled view"),
    pytest.param({"what": "nodes"}, False, Way.FLEET_LISTED, id="the fleet without a view listed"),
    pytest.param({"what": "nodes", "node": "n1"}, False, Way.FLEET_LISTED, id="one node without a view listed"),
    pytest.param({"what": "needs", "node": "n1"}, True, Way.NARROWED_READ, id="one node's needs by one batch read"),
    pytest.param({"what": "collect", "collection": "shell:zsh:normal"}, True, Way.NARROWED_READ, id="a collection"),
    pytest.param({"what": "applied"}, True, Way.STREAMED, id="every applied record streamed"),
]


@pytest.mark.parametrize(("request_", "views", "way"), WAYS)
async def test_one_place_decides_how_each_request_is_answered(
    seeded: Bus, request_: dict[str, str], views: bool, way: Way
) -> None:
    registry, nodes = RegistryView(), FleetView()
    registry.ready = True
    nodes.filled.set()
    answering = Answering(seeded, PageCache(), registry, nodes) if views else Answering(seeded, PageCache())
    answer = answering.answer(asked_for(request_))
    assert answer.way is way
    assert isinstance(answer, AtOnce) == (way is Way.REGISTRY_VIEW)
    page = answer.page if isinstance(answer, AtOnce) else await answer.read()
    assert parse_page(page).what == request_.get("what", "registry")


async def test_a_cursor_is_answered_from_its_kept_page_or_read_from_its_listings_stream(seeded: Bus) -> None:
    cache = PageCache()
    answering = Answering(seeded, cache)
    cache.keep("kept", [b"page two"])
    kept = cache.seal.seal(Continuation("kept", 2, {"what": "nodes"}, ""))
    assert answering.answer(asked_for({"cursor": kept})) == AtOnce(Way.KEPT_PAGE, "nodes", b"page two")
    begun = Continuation("streamed", 1, {"what": "needs"}, "")
    listing = await StreamedListing.start(
        seeded, "needs", [">"], begun=begun, seal=cache.seal.seal, budget=200, idle=10
    )
    first = parse_page(await listing.page(1), "needs")
    assert isinstance(first, NeedsPage) and first.next is not None
    cache.keep_streamed("streamed", listing)
    answer = answering.answer(asked_for({"what": "needs", "cursor": first.next}))
    assert isinstance(answer, Reading)
    assert answer.way is Way.STREAMED_PAGE
    second = parse_page(await answer.read(), "needs")
    assert isinstance(second, NeedsPage)
    assert second.page == 2
    assert {entry.key for entry in first.entries}.isdisjoint(entry.key for entry in second.entries)
    await listing.close()


SEEN_AT = "2026-12-01T12:00:00+00:00"
# Each node's row as the byte-for-byte test writes the fleet: lease state, holder's host, applied, pending.
FLEET_ROWS = {"n1": ("held", "hôte", 1, 1), "n2": ("held", None, 1, 0), "n3": ("released", None, 0, 0)}


def node_rows(data: bytes) -> dict[str, tuple[str, str | None, int, int]]:
    entries = json.loads(data)["entries"]
    return {e["node"]: (e["lease"]["state"], e["lease"].get("host"), e["applied"], e["pending"]) for e in entries}


@pytest.mark.parametrize("what", ["registry", "needs", "applied", "collect", "nodes"])
@pytest.mark.parametrize("narrowed", [False, True], ids=["whole", "one node"])
async def test_every_page_the_seat_writes_is_the_contracts_page_byte_for_byte(
    seeded: Bus, js: JetStreamContext, what: What, narrowed: bool
) -> None:
    """Pages, entries and node rows are formatted by hand on the hot path (`provisioner.verb.pages`,
    `provisioner.verb.listing`): each parses into `registry.contract`'s page of its `what` and is
    written back by the contract as the same bytes (every stored value here is compact JSON)."""
    holder = Holder(id="h", host="hôte", pid=7, since=datetime.fromisoformat(SEEN_AT), ttl_seconds=1e-05)
    leases = await js.key_value(buckets.LEASES.name)
    await leases.put(node_key("n1"), holder.model_dump_json().encode())
    await leases.put(node_key("n2"), b"not a holder")
    await leases.put(node_key("n3"), b"{}")
    await leases.delete(node_key("n3"))
    await put_all(await js.key_value(buckets.NEEDS.name), {"n1.web.config.bad": b"{not json", "n1.bad": b"{}"})
    request = {"what": what} | ({"node": "n1"} if narrowed and what != "registry" else {})
    body = json.dumps(request).encode()
    data = (await seeded.request(buckets.VERB_SUBJECT, body)).data
    if what == "nodes":  # answered from the seat's fleet view, which its watches of each bucket fill after the writes
        rows = {"n1": FLEET_ROWS["n1"]} if narrowed else FLEET_ROWS
        with anyio.fail_after(10):
            while node_rows(data) != rows:
                await anyio.sleep(0.05)
                data = (await seeded.request(buckets.VERB_SUBJECT, body)).data
    page = parse_page(data, what)
    assert page.entries
    assert page_json(page) == data
