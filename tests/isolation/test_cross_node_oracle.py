"""The cross-node oracle, pinned on a real nats-server (static and JWT accounts): what it
tells a node about another node's keys, and what it never does.

A node's put of its own key may carry `Nats-Expected-Last-Subject-Sequence: N` with
`Nats-Expected-Last-Subject-Sequence-Subject: <any subject>`. nats-server compares N with the last
sequence its stream holds under that subject (wildcards allowed, whoever wrote it) and refuses the
put with `wrong last sequence: <that sequence>`; a service import passes every header. So n1
learns, for any filter it can name in a bucket it writes, whether a key under it exists (or
existed: a delete marker counts) and the stream sequence of its latest write, which moves with
every write: when, never what. Nothing in nats-server 2.15 closes it without breaking the buckets
(`docs/security.md`). Should nats-server narrow the header one day, these tests fail: then the
documentation's paragraph goes too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from nats.aio.client import Client

from registry.access import Kind
from registry.contract import Bucket, buckets
from registry.wire import Bus, delete, put, snapshot
from tests.helpers import in_own_task, last_sequence
from tests.isolation import Mesh, party

N1, SEAT = party(Kind.NODE, "n1"), party(Kind.SEAT)
NEEDS, LEASES = buckets.NEEDS, buckets.LEASES
EXPECTED_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
NEVER = 2**62  # no stream reaches it: the probe is refused, whatever it asks, and stores nothing
# n2's values, each marked so that any byte of them reaching n1 can be looked for.
N2_NEEDS = {
    "n2.web.config.x": b'{"placeholder":"${config:x}","used_in":["N2-ONLY-MARK-X"]}',
    "n2.db.secret.pw": b'{"placeholder":"${secret:pw}","used_in":["N2-ONLY-MARK-PW"]}',
}
N2_LEASE = b'{"host":"N2-ONLY-MARK-HOST","pid":4242}'
N2_VALUES, N2_MARK = [*N2_NEEDS.values(), N2_LEASE], b"N2-ONLY"


@dataclass(frozen=True)
class Probe:
    """n1's put of its own `key` in `bucket`, conditional on the latest sequence under `subject`."""

    bucket: Bucket
    key: str
    subject: str
    expected: int = NEVER

    async def send(self, attacker: Client) -> dict[str, object]:
        """The answer, a JSON document without headers, after checking that none of n2's values
        is in it, nor any part of them marked `N2-ONLY`."""
        headers = {EXPECTED_SEQUENCE: str(self.expected), EXPECTED_SUBJECT: self.subject}
        reply = await attacker.request(self.bucket.subject(self.key), b'{"probe":"n1"}', headers=headers, timeout=10)
        assert reply.headers is None, reply.headers
        assert N2_MARK not in reply.data and not any(v in reply.data for v in N2_VALUES), reply.data
        document: dict[str, object] = json.loads(reply.data)
        return document


def refused_telling(sequence: int, bucket: Bucket) -> dict[str, object]:
    """The whole answer to a probe that does not match: a sequence number and nothing else."""
    description = f"wrong last sequence: {sequence}"
    return {"error": {"code": 400, "err_code": 10071, "description": description}, "stream": bucket.stream, "seq": 0}


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    async with in_own_task(mesh.connect(SEAT)) as bus:
        await put(bus, NEEDS, "n1.web.config.x", b'{"placeholder":"${config:x}","used_in":["X"]}')
        for key, value in N2_NEEDS.items():
            await put(bus, NEEDS, key, value)
        await put(bus, LEASES, "node.n2", N2_LEASE)
        await put(bus, LEASES, "node.n1", b'{"host":"n1","pid":1}')
        yield bus


async def nodes_keys(seat: Bus) -> list[tuple[str, str, bytes, int, bool]]:
    """Every node's keys in needs and leases (the seat's compile lease moves on its own)."""
    found: list[tuple[str, str, bytes, int, bool]] = []
    for bucket in (NEEDS, LEASES):
        items = await snapshot(seat, bucket, include_deleted=True)
        found += [(bucket.name, i.key, i.value, i.revision, i.deleted) for i in items if not i.key.startswith("seat.")]
    return sorted(found)


async def last_sequences(seat: Bus) -> list[int]:
    return [await last_sequence(seat, bucket) for bucket in (NEEDS, LEASES)]


async def subjects_stored_since(seat: Bus, sequences: list[int]) -> list[str]:
    """The subjects of every message stored in needs and leases after `sequences`, but the seat's
    own renewals of its compile lease (every few seconds, whoever probes)."""
    stored = []
    for bucket, before, now in zip((NEEDS, LEASES), sequences, await last_sequences(seat), strict=True):
        for seq in range(before + 1, now + 1):
            got = await seat.jetstream(f"STREAM.MSG.GET.{bucket.stream}", {"seq": seq}, operation="get")
            stored.append(got["message"]["subject"])
    return [s for s in stored if not s.startswith(LEASES.subject("seat."))]


async def latest_revision(seat: Bus, bucket: Bucket, *keys: str) -> int:
    items = await snapshot(seat, bucket, include_deleted=True)
    return max(i.revision for i in items if i.key in keys)


async def test_a_nodes_own_put_tells_it_the_latest_sequence_under_any_filter_of_another_nodes_keys(
    seat: Bus, attacker: Client
) -> None:
    every_n2_need = await latest_revision(seat, NEEDS, *N2_NEEDS)
    n2_web = await latest_revision(seat, NEEDS, "n2.web.config.x")
    n2_lease = await latest_revision(seat, LEASES, "node.n2")
    before, stream_before = await nodes_keys(seat), await last_sequences(seat)

    told = {
        "n2.>": await Probe(NEEDS, "n1.web.config.x", NEEDS.subject("n2.>")).send(attacker),
        "n2.web.>": await Probe(NEEDS, "n1.web.config.x", NEEDS.subject("n2.web.>")).send(attacker),
        "n2.*.secret.*": await Probe(NEEDS, "n1.web.config.x", NEEDS.subject("n2.*.secret.*")).send(attacker),
        "n2.nope.>": await Probe(NEEDS, "n1.web.config.x", NEEDS.subject("n2.nope.>")).send(attacker),
        "node.n2": await Probe(LEASES, "node.n1", LEASES.subject("node.n2")).send(attacker),
    }

    assert told == {
        "n2.>": refused_telling(every_n2_need, NEEDS),
        "n2.web.>": refused_telling(n2_web, NEEDS),
        "n2.*.secret.*": refused_telling(every_n2_need, NEEDS),  # the secret need is n2's latest
        "n2.nope.>": refused_telling(0, NEEDS),  # nothing there: absence is told as well
        "node.n2": refused_telling(n2_lease, LEASES),  # n2's client renewing its lease: alive, and when
    }
    assert await nodes_keys(seat) == before  # nobody's key moved, n1's own included
    assert await subjects_stored_since(seat, stream_before) == []  # and no refused probe left a trace


async def test_the_sequence_told_moves_with_each_write_and_delete_of_the_other_node(
    seat: Bus, attacker: Client
) -> None:
    probe = Probe(NEEDS, "n1.web.config.x", NEEDS.subject("n2.web.config.x"))
    rewritten = await put(seat, NEEDS, "n2.web.config.x", N2_NEEDS["n2.web.config.x"])
    assert await probe.send(attacker) == refused_telling(rewritten, NEEDS)
    deleted = await delete(seat, NEEDS, "n2.web.config.x", last=rewritten)
    assert await probe.send(attacker) == refused_telling(deleted, NEEDS)  # a deleted key existed


async def test_with_n_zero_the_nodes_put_lands_exactly_when_nothing_matches_the_filter(
    seat: Bus, attacker: Client
) -> None:
    before = await nodes_keys(seat)
    where_n2_wrote = Probe(NEEDS, "n1.web.config.x", NEEDS.subject("n2.web.>"), expected=0)
    where_nobody_did = Probe(NEEDS, "n1.web.config.x", NEEDS.subject("n2.nope.>"), expected=0)

    refused = await where_n2_wrote.send(attacker)
    stored = await where_nobody_did.send(attacker)

    assert refused == refused_telling(await latest_revision(seat, NEEDS, "n2.web.config.x"), NEEDS)
    assert set(stored) == {"stream", "seq"}  # a put acknowledgement: n1's own key, written
    assert stored["seq"] == await latest_revision(seat, NEEDS, "n1.web.config.x")
    after = await nodes_keys(seat)
    assert [k for k in after if k[1] != "n1.web.config.x"] == [k for k in before if k[1] != "n1.web.config.x"]


async def test_the_oracle_reaches_no_further_than_the_stream_the_put_goes_to(seat: Bus, attacker: Client) -> None:
    """From the applied bucket, n2's needs and the registry hold nothing: told 0 whatever they hold."""
    await put(seat, buckets.APPLIED, "n1.web", b'{"state":"applied"}')
    from_applied = [
        await Probe(buckets.APPLIED, "n1.web", subject).send(attacker)
        for subject in (NEEDS.subject("n2.>"), buckets.REGISTRY.subject(">"))
    ]
    assert from_applied == [refused_telling(0, buckets.APPLIED)] * 2
