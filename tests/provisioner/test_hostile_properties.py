"""Property-based: whatever a party sends the verb or writes into a bucket, the seat answers well
and stays up and connected. Runs on a real nats-server and seat;
the number of examples is bounded so that the module takes seconds. Each test prints its figures
(`pytest -s` shows them): requests tried, crashes (a 500 or no answer), disconnects of the seat."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import anyio
import nats.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from mesh_dev.local_nats import LocalNats
from registry.contract import buckets
from registry.wire import ERROR_CODE_HEADER, ERROR_HEADER, Bus, ask

REPLY_WAIT = timedelta(seconds=5)
ANSWER_FIELDS = {"what", "entries", "malformed", "page", "pages", "total", "next"}
REFUSALS = {"400", "403", "410", "503"}
FIELDS = ["what", "node", "module", "collection", "cursor"]


class Figures(logging.Handler):
    """Counts what the seat's connection logs about losing itself, beside the requests tried."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.tried = self.listed = self.crashes = self.disconnects = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "registry.wire.bus" and ("lost" in record.getMessage() or "closed" in record.getMessage()):
            self.disconnects += 1


@contextmanager
def figures(title: str) -> Iterator[Figures]:
    counted = Figures()
    logging.getLogger().addHandler(counted)
    try:
        yield counted
    finally:
        logging.getLogger().removeHandler(counted)
        listed = f" listed={counted.listed}" if counted.listed else ""
        print(f"\n{title}: tried={counted.tried}{listed} crashes={counted.crashes} disconnects={counted.disconnects}")
    assert (counted.crashes, counted.disconnects) == (0, 0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
names = st.none() | st.text(max_size=30) | st.integers() | st.booleans() | st.lists(st.text(max_size=3), max_size=2)
queries = st.fixed_dictionaries(
    {},
    optional={
        "what": st.sampled_from(["registry", "needs", "applied", "collect", "", "Needs"]) | names,
        "node": names,
        "module": names,
        "collection": names,
        "cursor": names | st.from_regex(r"[A-Za-z0-9_-]{1,30}\.[0-9²³]{1,3}", fullmatch=True),
        "extra": json_values,
    },
)
deep = st.integers(1, 3000).flatmap(
    lambda levels: st.sampled_from([b"[" * levels + b"]" * levels, b'{"a":' * levels + b"1" + b"}" * levels])
)
bodies = (
    st.binary(max_size=200)
    | json_values.map(lambda doc: json.dumps(doc).encode())
    | queries.map(lambda doc: json.dumps(doc).encode())
    | deep
)


def well_formed(reply_headers: dict[str, str], data: bytes) -> str:
    """'answer' or 'refusal' for a well-formed reply; fails the test otherwise."""
    if ERROR_CODE_HEADER in reply_headers:
        assert json.loads(data) == {"error": reply_headers[ERROR_HEADER]}
        return reply_headers[ERROR_CODE_HEADER]
    answer = json.loads(data)
    assert isinstance(answer, dict)
    assert set(answer) >= ANSWER_FIELDS
    return "answer"


@pytest.fixture
def requests_figures() -> Iterator[Figures]:
    with figures("random requests") as counted:
        yield counted


@pytest.fixture
def writes_figures() -> Iterator[Figures]:
    with figures("random keys and values") as counted:
        yield counted


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(batch=st.lists(bodies, min_size=1, max_size=8))
async def test_any_request_gets_an_answer_or_a_refusal_and_the_seat_stays(
    server: LocalNats, bus: Bus, requests_figures: Figures, batch: list[bytes]
) -> None:
    for body in batch:
        requests_figures.tried += 1
        try:
            reply = await bus.request(buckets.VERB_SUBJECT, body, reply_wait=REPLY_WAIT)
        except Exception:
            requests_figures.crashes += 1
            raise
        outcome = well_formed(dict(reply.headers), reply.data)
        if outcome not in REFUSALS | {"answer"}:
            requests_figures.crashes += 1
        assert outcome in REFUSALS | {"answer"}, (body[:200], outcome, reply.headers)
    registry = await ask(bus, {}, reply_wait=REPLY_WAIT)  # the seat still answers a normal request
    assert registry["total"]["entries"] >= 13


token = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters=".\x7f"),
    min_size=1,
    max_size=10,
)
odd_keys = st.lists(token | st.sampled_from(["*", ">", "=", "=3a", "n1", "a=2Eb", "$KV"]), min_size=1, max_size=5)
# Keys of plain tokens often fit a bucket's shape (1 to 4 tokens), so that their values are read too.
shaped_keys = st.lists(
    st.sampled_from(["n1", "web", "config", "shell=3Azsh", "a=2Eb", "x_y-z/w"]), min_size=1, max_size=4
)
hostile_keys = (odd_keys | shaped_keys).map(".".join)
stored_values = (
    json_values.map(lambda doc: json.dumps(doc).encode())
    | st.binary(max_size=100)
    | (st.sampled_from([257, 1000, 5000]) | st.integers(200, 3000)).map(lambda levels: b"[" * levels + b"]" * levels)
    | st.sampled_from([b"", b"NaN", b'{"a":Infinity}', b'"caf\xe9"'])
)
LISTED = {buckets.NEEDS: "needs", buckets.APPLIED: "applied", buckets.COLLECT: "collect", buckets.REGISTRY: "registry"}


async def write(nc: Client, bucket_name: str, key: str, value: bytes, *, raw: bool) -> bool:
    """Whether the bucket stored `value` under `key` (the server refuses some subjects)."""
    try:
        if raw:
            ack = json.loads((await nc.request(f"$KV.{bucket_name}.{key}", value, timeout=5)).data)
            return "error" not in ack
        await (await nc.jetstream().key_value(bucket_name)).put(key, value, validate_keys=False)
    except (nats.errors.Error, ValueError):
        return False
    return True


CAUGHT_UP = "zz-caught-up"  # a registry key written after the others: the view holds them once it holds it


async def listing_of(bus: Bus, nc: Client, what: str) -> dict[str, Any]:
    """The whole listing. The registry's is answered from the seat's view, which follows the bucket
    through a watch: it is asked until the view holds a key written after the test's writes (the
    watch delivers in the stream's order), not merely their keys, which the seat's compile may
    have put there before, with other values."""
    if what != "registry":
        return await ask(bus, {"what": what}, reply_wait=REPLY_WAIT)
    after = await (await nc.jetstream().key_value(buckets.REGISTRY.name)).put(CAUGHT_UP, b"{}")
    with anyio.fail_after(10):
        while True:
            answer = await ask(bus, {"what": what}, reply_wait=REPLY_WAIT)
            if any(e["key"] == CAUGHT_UP and e["revision"] >= after for e in answer["entries"]):
                return answer
            await anyio.sleep(0.01)


@pytest.mark.usefixtures("server")
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    bucket=st.sampled_from(list(LISTED)),
    writes=st.lists(st.tuples(hostile_keys, stored_values, st.booleans()), min_size=1, max_size=6),
)
async def test_any_key_and_value_in_a_bucket_is_listed_as_an_entry_or_malformed(
    bus: Bus,
    nc: Client,
    writes_figures: Figures,
    bucket: buckets.Bucket,
    writes: list[tuple[str, bytes, bool]],
) -> None:
    written: dict[str, bytes] = {}
    for key, value, raw in writes:
        writes_figures.tried += 1
        if await write(nc, bucket.name, key, value, raw=raw):
            written[key] = value
    try:
        answer = await listing_of(bus, nc, LISTED[bucket])
    except Exception:
        writes_figures.crashes += 1
        raise
    entries = {e["key"]: e for e in answer["entries"]}
    malformed = {m["key"]: m["reason"] for m in answer["malformed"]}
    assert not set(entries) & set(malformed)
    for key, value in written.items():
        assert key in entries or key in malformed, (key, value[:100], answer["total"])
        if key in entries:
            assert entries[key]["value"] == json.loads(value)
    assert answer["total"] == {"entries": len(entries), "malformed": len(malformed)}
    writes_figures.listed += len(written)
