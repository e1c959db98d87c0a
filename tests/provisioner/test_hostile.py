"""The seat under hostile input: nothing a request or a stored value
holds makes an answer or a log line large, crashes a request, or costs the seat its connection."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats
from provisioner.errors import CursorGone
from provisioner.verb.paging import PageCache
from provisioner.verb.request import MAX_REQUEST_BYTES, MAX_REQUEST_DEPTH
from registry.contract import MAX_VALUE_DEPTH, buckets, nesting
from registry.serving import EndpointSpec, ServiceRequest, serve
from registry.wire import ERROR_CODE_HEADER, ERROR_HEADER, Bus, Message, ask

APPLIED = {"n1.web": b'{"state":"applied"}'}


def deep(levels: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * levels + closer * levels


def deep_object(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


@pytest.fixture
async def seeded(server: LocalNats, bus: Bus, js: JetStreamContext) -> Bus:
    kv = await js.key_value(buckets.APPLIED.name)
    for key, value in APPLIED.items():
        await kv.put(key, value)
    return bus


def error_of(msg: Message) -> tuple[str, str, dict[str, Any]]:
    return msg.headers[ERROR_CODE_HEADER], msg.headers[ERROR_HEADER], json.loads(msg.data)


async def still_serving(bus: Bus) -> None:
    answer = await ask(bus, {"what": "applied"})
    assert [entry["key"] for entry in answer["entries"]] == sorted(APPLIED)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (deep(1000), f"more than the {MAX_REQUEST_DEPTH} allowed"),
        (deep_object(1000), f"more than the {MAX_REQUEST_DEPTH} allowed"),
        (b'{"what":"needs","node":' + deep(MAX_REQUEST_DEPTH) + b"}", f"more than the {MAX_REQUEST_DEPTH} allowed"),
        (b'{"what":"needs","node":null}', "field 'node' is null"),
        (b'{"what":"needs","module":null}', "field 'module' is null"),
        (b'{"what":"collect","collection":null}', "field 'collection' is null"),
        (b'{"cursor":null}', "field 'cursor' is null"),
        (b'{"what":null}', "field 'what' is null"),
        (json.dumps({"what": "needs", "node": "n" * 100_000}).encode(), f"at most {MAX_REQUEST_BYTES}"),
        (json.dumps({"what": "needs", "node": "é" * 513}).encode(), "at most 1024 bytes"),
        (json.dumps({"what": "needs", "cursor": "c" * 32769}).encode(), "field 'cursor'"),
        (b" " * (MAX_REQUEST_BYTES + 1), f"at most {MAX_REQUEST_BYTES}"),
    ],
    ids=[
        "an array nested 1,000 deep",
        "an object nested 1,000 deep",
        "a name one level too deep",
        "a null node",
        "a null module",
        "a null collection",
        "a null cursor",
        "a null what",
        "a 100 KB name",
        "a name of 1,026 bytes",
        "a cursor of 32,769 characters",
        "a body of blanks over the bound",
    ],
)
async def test_a_hostile_request_is_refused_400_and_the_seat_keeps_serving(seeded: Bus, body: bytes, says: str) -> None:
    code, description, document = error_of(await seeded.request(buckets.VERB_SUBJECT, body))
    assert (code, says in description) == ("400", True), description
    assert document == {"error": description}
    await still_serving(seeded)


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"what": "needs", "node": "n" * 1024}).encode(),
        json.dumps({"what": "needs", "node": "[" * 1000 + "{"}).encode(),
        b'{"what":"needs","node":"x"}',
    ],
    ids=["a name of 1,024 bytes", "brackets inside a name are no nesting", "a plain request"],
)
async def test_a_request_within_the_bounds_is_answered(seeded: Bus, body: bytes) -> None:
    reply = await seeded.request(buckets.VERB_SUBJECT, body)
    assert ERROR_CODE_HEADER not in reply.headers
    assert json.loads(reply.data)["entries"] == []


@pytest.mark.parametrize("cursor", ["L.²", "L.٣", "L.2x", "L.02", "L.0", "L." + "9" * 40, "é.x", "..", "a.b.c"])
async def test_a_cursor_is_read_by_one_rule(seeded: Bus, cursor: str) -> None:
    """`isdigit()` holds for `²`, which `int()` refuses: that was a 500."""
    with pytest.raises(CursorGone):
        PageCache().seal.open(cursor, {}, None)
    code, _, _ = error_of(await seeded.request(buckets.VERB_SUBJECT, json.dumps({"cursor": cursor}).encode()))
    assert code == "410"


def test_nesting_is_measured_outside_strings() -> None:
    assert nesting(b'["[[[[", "{{{{", "\\"[[[["]') == 1
    assert nesting(b"[[[") == 3
    assert nesting(b"[[]]" * 100) == 2
    assert nesting(b'{"a":{"b":[1]}}') == 3


async def test_a_huge_request_writes_no_huge_log_line(seeded: Bus, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bodies = [
        json.dumps({"whatever" + "x" * 60_000: 1}).encode(),  # under the request bound: parsed, then refused
        json.dumps({"what": "w" * 900_000}).encode(),
    ]
    for body in bodies:
        code, description, _ = error_of(await seeded.request(buckets.VERB_SUBJECT, body))
        assert code == "400"
        assert len(description) < 2048
    await still_serving(seeded)
    assert max(len(record.getMessage()) for record in caplog.records) < 4096


NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'


async def test_a_deep_value_under_a_node_is_malformed_and_every_listing_answers(
    seeded: Bus, js: JetStreamContext
) -> None:
    kv = await js.key_value(buckets.NEEDS.name)
    await kv.put("n1.web.config.deep", deep(1000))
    await kv.put("n1.web.config.deepest-allowed", deep(MAX_VALUE_DEPTH))
    await kv.put("n1.web.config.one-too-deep", deep_object(MAX_VALUE_DEPTH + 1))
    await kv.put("n1.web.config.fine", NEED)
    await kv.put("n2.web.config.fine", NEED)
    for request in ({"what": "needs", "node": "n1"}, {"what": "needs"}):
        answer = await ask(seeded, request)
        reasons = {m["key"]: m["reason"] for m in answer["malformed"]}
        assert sorted(reasons) == ["n1.web.config.deep", "n1.web.config.one-too-deep"]
        assert all(f"more than the {MAX_VALUE_DEPTH} allowed" in reason for reason in reasons.values())
        assert "n1.web.config.deepest-allowed" in [e["key"] for e in answer["entries"]]
    assert [e["key"] for e in (await ask(seeded, {"what": "needs", "node": "n2"}))["entries"]] == ["n2.web.config.fine"]


async def test_a_value_holding_a_lone_surrogate_is_malformed_and_every_listing_answers(
    seeded: Bus, js: JetStreamContext
) -> None:
    """The attack: a node's value escapes half a surrogate pair; the seat spliced it into every
    listing of the bucket, which no client could then read. A whole pair is a character and kept."""
    kv = await js.key_value(buckets.NEEDS.name)
    await kv.put("n1.web.config.lone", b'{"placeholder":"\\ud800","used_in":["X"]}')
    await kv.put("n1.web.config.name", b'{"\\udfff":1}')
    await kv.put("n1.web.config.pair", b'{"placeholder":"\\ud83d\\ude00","used_in":["X"]}')
    await kv.put("n1.web.config.text", b'{"placeholder":"\\\\ud800","used_in":["X"]}')  # a backslash, then text
    for request in ({"what": "needs", "node": "n1"}, {"what": "needs"}):
        answer = await ask(seeded, request)
        reasons = {m["key"]: m["reason"] for m in answer["malformed"]}
        assert sorted(reasons) == ["n1.web.config.lone", "n1.web.config.name"]
        assert all("lone surrogate" in reason for reason in reasons.values())
        values = {e["key"]: e["value"]["placeholder"] for e in answer["entries"] if e["key"].startswith("n1.")}
        assert values == {"n1.web.config.pair": "\U0001f600", "n1.web.config.text": "\\ud800"}


async def test_a_deep_value_in_the_registry_is_malformed_and_the_registry_answers(
    seeded: Bus, js: JetStreamContext
) -> None:
    await (await js.key_value(buckets.REGISTRY.name)).put("deep", deep(1000))
    with anyio.fail_after(5):  # the seat's view follows the bucket by a watch
        while not (answer := await ask(seeded, {}))["malformed"]:
            await anyio.sleep(0.01)
    assert [m["key"] for m in answer["malformed"]] == ["deep"]
    assert "levels deep" in answer["malformed"][0]["reason"]
    assert answer["total"]["entries"] == 13


@pytest.fixture
async def echo(bus: Bus) -> AsyncIterator[str]:
    """A service on the test's bus that answers `{"size": n}` with n bytes, or an error of n characters."""
    subject = "test.echo"

    async def handler(request: ServiceRequest) -> None:
        asked = json.loads(request.data)
        if "error" in asked:
            await request.respond_error("400", "e" * asked["error"])
        else:
            await request.respond(b"x" * asked["size"])

    endpoints = [EndpointSpec("e", subject, handler)]
    async with serve(bus, name="echo", version="1.0.0", description="test", endpoints=endpoints):
        yield subject


async def test_an_answer_over_max_payload_is_a_500_saying_so_and_the_connection_stays(bus: Bus, echo: str) -> None:
    """nats-server closes a connection that publishes over max_payload, and nats-py never reconnects."""
    wait = timedelta(seconds=5)
    too_large = json.dumps({"size": bus.max_payload + 1}).encode()
    code, description, document = error_of(await bus.request(echo, too_large, reply_wait=wait))
    assert code == "500"
    assert f"over max_payload ({bus.max_payload})" in description
    assert document == {"error": description}
    fits = await bus.request(echo, json.dumps({"size": bus.max_payload // 2}).encode(), reply_wait=wait)
    assert len(fits.data) == bus.max_payload // 2
    refused = await bus.request(echo, json.dumps({"error": 3 * bus.max_payload}).encode(), reply_wait=wait)
    assert refused.headers[ERROR_CODE_HEADER] == "400"
    assert len(refused.data) < 4096
    assert not bus.closed.is_set()


def _depth(document: object) -> int:
    if isinstance(document, dict):
        return 1 + max(map(_depth, document.values()), default=0)
    if isinstance(document, list):
        return 1 + max(map(_depth, document), default=0)
    return 0


_TRICKY = st.text(alphabet='[]{}"\\\\ab\n', max_size=12)
_DOCUMENTS = st.recursive(
    st.none() | st.integers() | _TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY, inner, max_size=4),
    max_leaves=30,
)


@given(_DOCUMENTS)
def test_nesting_agrees_with_the_parsed_documents_depth(document: object) -> None:
    """Strings full of brackets, quotes and backslashes never count: the C path's escapes are right."""
    for text in (json.dumps(document), json.dumps(document, indent=1, ensure_ascii=False)):
        assert nesting(text.encode()) == _depth(document)
