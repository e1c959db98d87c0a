"""The fleet bucket under the generated grants (`registry.access.grants.node_fleet_imports`,
`operator_fleet_imports`), static and JWT, on a real nats-server: node n1, hostile, with its own
credentials, against the fleet's keys (`registry.contract.fleet`).

Every attack is judged by the data, never by an error alone (`judged`, every test here): after it,
every key of every bucket the seat holds but n1's own claims (`claim.<any token>.n1`, what its grant
writes) has the revision and content it had; every key and revision n2 reads of the fleet in one
batch is what the seat stores (a header n1 stored with its own claim names no other key, no other
revision, to a reader); and n2, following the fleet live where the stream republishes it
(`$KVR.mesh-provisioner_fleet.>`), heard nothing but n1's real writes of its own claims, each with
the revision the seat stores.

n1 can write one key of module `m`, `claim.m.n1`: one slot at most, no other node's slot, no hold,
no gone mark; no JetStream API on the fleet's stream; a reply subject, a header (a status line, a
stamp, a schedule, a rollup) or a `$KVR.` publish it chooses lands nowhere but its own account, and
no reader takes a header it stored for the server's. An operator holds and resumes rollouts
(`rollout.<module>`) and writes no claim nor gone mark. `TestAtASite`: the core attacks by n1 living
at a site, judged at both ends.

`TestFillingTheFleet`: n1's claims of ever new modules, written as fast as it can, are cut back by
the seat's quota guard, and every other party's write of the fleet is still taken.

What no grant can refuse, the seat does (`provisioner.seat.rollouts`, running in every mesh here):
n1's grant takes any token for the module, and an operator's `rollout.*` any one token, so a
literal `*`, `>` or a non-canonical escape reaches the stream, and the seat erases it; a claim's
queue position (`Claim.queued`) is the node's word, and the seat deletes a claim naming a place
the bus did not give it, so a later claim never stands ahead of an earlier one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Literal

import anyio
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.protocol import command

from provisioner.seat.rollouts import Placement
from registry.access import Kind
from registry.contract import buckets, fleet
from registry.contract.keys import subject_matches
from registry.errors import BusError, KeyShapeError
from registry.wire import SKEW, Bus, KvItem, delete, get_direct, get_last_many, put
from tests.attacks import (
    BUS_ERRORS,
    Everything,
    RequestAttack,
    barrier_through,
    data_buckets,
    everything,
    fill_own_keys,
    named,
    nothing_comes_back,
)
from tests.helpers import eventually, in_own_task, stream_barrier, until, wait_for
from tests.isolation import Mesh, jwt_mesh_server, mesh_server, party
from tests.sites.site_mesh import SITE, Ends, SiteMesh, site_mesh

FLEET = fleet.FLEET
AnyMesh = Mesh | SiteMesh  # n1 at the hub (every test), or at a site (`TestAtASite`)
N1, N2, OPS, SEAT = party(Kind.NODE, "n1"), party(Kind.NODE, "n2"), party(Kind.OPERATOR, "ops"), party(Kind.SEAT)
ATTACKER = "n1"
MODULE = "m"
JUDGED = (FLEET, *buckets.OWN, buckets.LEASES)
NOW = datetime(2026, 12, 2, tzinfo=UTC)


def a_claim(state: Literal["waiting", "running", "failed"] = "waiting", reason: str = "") -> bytes:
    claim = fleet.Claim(state=state, change="c0ffee", since=NOW, ttl_seconds=60, reason=reason)
    return claim.model_dump_json().encode()


def a_hold(by: str = "seat") -> bytes:
    return fleet.Hold(state="paused", since=NOW, by=by, node="n2").model_dump_json().encode()


def a_gone() -> bytes:
    return fleet.Gone(since=NOW).model_dump_json().encode()


SEEDED = {
    fleet.claim_key(MODULE, "n2"): a_claim("running"),
    fleet.claim_key(MODULE, ATTACKER): a_claim(),
    fleet.claim_key("other", "n2"): a_claim("failed", "health check failed"),
    fleet.hold_key("held"): a_hold(),
    fleet.gone_key("n2"): a_gone(),
    fleet.gone_key(ATTACKER): a_gone(),
}
EVIL = a_claim("running", "n1 was here")
PLACEMENT = Placement.of_catalogue()
PLACED = ["n2.m", *(f"{ATTACKER}.{module}" for module in (MODULE, "new", "later", "sched"))]


@pytest.fixture
async def seat(mesh: AnyMesh) -> AsyncIterator[Bus]:
    """The seat, once it has written the fleet: claims of n1 and n2, a hold, two gone marks."""
    async with in_own_task(mesh.connect(SEAT)) as bus:
        assert PLACEMENT.bucket is not None
        for placed in PLACED:  # the seat deletes a claim of a module its node does not run
            await put(bus, PLACEMENT.bucket, placed, b'{"plan":{}}')
        # n2 runs `other` by its needs alone (placement knows it of no node): its failure pauses nothing
        await put(bus, buckets.NEEDS, "n2.other.config.x", b'{"placeholder":"${config:x}","used_in":["X"]}')
        for key, value in SEEDED.items():
            await put(bus, FLEET, key, value)
        await put(bus, buckets.APPLIED, "n2.m", b'{"state":"applied"}')
        yield bus


@pytest.fixture
async def attacker(mesh: AnyMesh, seat: Bus) -> AsyncIterator[Client]:
    """n1 through nats-py itself, once the seat has written the fleet."""
    client = await mesh.raw(N1)
    try:
        yield client
    finally:
        with contextlib.suppress(*BUS_ERRORS):
            await client.flush()  # what it sent is at its server: `judged` takes it from there
        await client.close()


def own_claim(key: str, node: str = ATTACKER) -> bool:
    return subject_matches(fleet.own_claims(node), key)


def outside_own_claims(found: Everything) -> Everything:
    """`found` without the attacker's own claims: what no attack of its may change."""
    return {name: [i for i in items if not (name == FLEET.name and own_claim(i[0]))] for name, items in found.items()}


class LiveFeed:
    """What a party hears of the fleet live, where the stream republishes it."""

    def __init__(self) -> None:
        self.heard: list[Msg] = []

    async def on_message(self, msg: Msg) -> None:
        self.heard.append(msg)

    def check_real_writes_of_own_claims(self, stored: Everything) -> None:
        """Every message heard is a republished real write of one of n1's claims: its subject names
        it, its headers name its key and stream, and the last heard of each key is at the revision
        the seat stores."""
        for msg in self.heard:
            key = FLEET.key_of(msg.subject)
            headers = msg.headers or {}
            assert own_claim(key), f"n2 heard {msg.subject!r}, headers {headers}, body {msg.data[:200]!r}"
            assert headers.get("Nats-Subject") == FLEET.subject(key), headers
            assert headers.get("Nats-Stream") == FLEET.stream, headers
        revisions = _revisions(stored)
        for key, revision in self.last_heard().items():
            assert revisions.get(key) == revision, (key, revision, revisions.get(key))

    def heard_as_stored(self, stored: Everything) -> bool:
        """Whether each key heard was last heard at the revision stored."""
        revisions = _revisions(stored)
        return all(revisions.get(key) == revision for key, revision in self.last_heard().items())

    def last_heard(self) -> dict[str, int]:
        """Each key heard, the revision it was last heard at (`Nats-Sequence`)."""
        return {FLEET.key_of(m.subject): int((m.headers or {}).get("Nats-Sequence", "0")) for m in self.heard}


def _revisions(stored: Everything) -> dict[str, int]:
    return {key: revision for key, _, revision, _ in stored[FLEET.name]}


@pytest.fixture
def judges_itself() -> None:
    """Asked by a test that changes keys outside n1's own claims on purpose (an operator's hold)."""


@pytest.fixture(autouse=True)
async def judged(request: pytest.FixtureRequest, mesh: AnyMesh, seat: Bus) -> AsyncIterator[None]:
    """Every test: nothing outside n1's own claims changed (at the hub, and in the site's copy of the
    fleet where n1 lives at a site), n2 reads the fleet as it is stored, and n2's live feed carried
    nothing of n1's but its real writes."""
    if "judges_itself" in request.fixturenames:
        yield
        return
    before = outside_own_claims(await everything(seat, JUDGED))
    site_before = await site_copy_outside_own_claims(mesh, seat)
    n2 = await mesh.raw(N2)
    feed = LiveFeed()
    try:
        await n2.subscribe(FLEET.live_subject(">"), cb=feed.on_message)
        await n2.flush()
        yield
        await barrier_through(n1 := await mesh.raw(N1), FLEET.subject(OWN))  # after the attack, on its path
        await n1.close()
        await stream_barrier(seat, JUDGED)
        after = await everything(seat, JUDGED)
        assert outside_own_claims(after) == before
        assert await site_copy_outside_own_claims(mesh, seat) == site_before
        async with mesh.connect(N2) as reader:
            await n2_reads_the_fleet_as_stored(reader, after)
        await until(partial(feed.heard_as_stored, after), 10)  # a republish crosses the site link on its own time
        feed.check_real_writes_of_own_claims(after)
    finally:
        await n2.close()


async def site_copy_outside_own_claims(mesh: AnyMesh, hub: Bus) -> Everything | None:
    """The site's copy of the fleet (once caught up with the hub) without n1's own claims; None
    where n1 lives at the hub."""
    if not isinstance(mesh, SiteMesh) or mesh.site is None:
        return None
    async with mesh.connect(f"seat-{SITE}", mesh.site) as site:
        await eventually(Ends(hub, site).caught_up, "the site's copies at the hub's last sequences")
        copies = [bucket for bucket in await data_buckets(site) if bucket.name == FLEET.name]
        assert copies, "the site holds a copy of the fleet"
        return outside_own_claims(await everything(site, copies))


async def n2_reads_the_fleet_as_stored(reader: Bus, stored: Everything) -> None:
    read = await get_last_many(reader, FLEET, ">")
    assert sorted((i.key, i.value, i.revision, i.deleted) for i in read) == stored[FLEET.name]
    now = datetime.now(UTC)  # the server's stamp, which a claim's ttl runs from, is the server's alone
    assert all(i.stored_at is not None and abs(now - i.stored_at) < timedelta(minutes=5) for i in read), read
    for key, value, revision, deleted in stored[FLEET.name]:
        if not shaped(key):  # n1's literal `claim.*.n1`: a get of it is a wildcard's (the seat erases it)
            continue
        item = await get_direct(reader, FLEET, key)
        assert item is not None and (item.value, item.revision, item.deleted) == (value, revision, deleted), key
        assert item.stored_at is not None and abs(now - item.stored_at) < timedelta(minutes=5), item


def shaped(key: str) -> bool:
    try:
        fleet.parse_fleet_key(key)
    except KeyShapeError:
        return False
    return True


def request(name: str, key: str, **headers: str) -> RequestAttack:
    """A write of `key` (relative to the fleet) with the body of a claim and `headers` (`_` for `-`)."""
    document = fleet.Claim.model_validate_json(EVIL).model_dump(mode="json")
    return RequestAttack(name, FLEET.subject(key), document, {k.replace("_", "-"): v for k, v in headers.items()})


DEL, PURGE = {"KV_Operation": "DEL"}, {"KV_Operation": "PURGE"}
# Writes of n1 on keys outside `claim.*.n1`: refused, nothing comes back but the refusal.
WRITES = [
    request("a put of n2's claim", fleet.claim_key(MODULE, "n2")),
    request("a delete of n2's claim", fleet.claim_key(MODULE, "n2"), **DEL),
    request("a purge of n2's claim", fleet.claim_key(MODULE, "n2"), **PURGE),
    request("a purge of n2's claim by rollup", fleet.claim_key(MODULE, "n2"), Nats_Rollup="sub", **PURGE),
    request("a second slot under a node with none", fleet.claim_key(MODULE, "n3")),
    request("a claim of four tokens", f"{fleet.claim_key(MODULE, ATTACKER)}.x"),
    request("a claim of two tokens", f"claim.{MODULE}"),
    request("a claim escaped as n2's", f"claim.{MODULE}.n2=2En1"),
    request("a claim escaped under n2's module", f"claim.{MODULE}=2En1.n2"),
    request("a claim with n1 first", f"claim.{ATTACKER}.{MODULE}"),
    request("a literal wildcard node", f"claim.{MODULE}.*"),
    request("a hold of m", fleet.hold_key(MODULE)),
    request("a hold overwritten", fleet.hold_key("held")),
    request("a hold deleted", fleet.hold_key("held"), **DEL),
    request("a gone mark of n2 overwritten", fleet.gone_key("n2")),
    request("a gone mark of n2 deleted", fleet.gone_key("n2"), **DEL),
    request("n1's own gone mark deleted", fleet.gone_key(ATTACKER), **DEL),
    request("n1's own gone mark overwritten", fleet.gone_key(ATTACKER)),
    request("a gone mark of a new node", fleet.gone_key("n3")),
    request("a key of no kind", "anything"),
]


@pytest.mark.parametrize("attack", WRITES, ids=named(WRITES))
async def test_a_node_writes_no_key_of_the_fleet_but_its_own_claims(
    seat: Bus, attacker: Client, attack: RequestAttack
) -> None:
    await nothing_comes_back(seat, attacker, attack, among=[FLEET])


async def test_the_only_key_a_node_writes_for_a_module_is_its_own_claim(mesh: Mesh, seat: Bus) -> None:
    """Every key of module `m` n1 tries to write, through our library: only `claim.m.n1` takes it,
    so it holds one slot of `m` at most."""
    tried = [
        fleet.claim_key(MODULE, ATTACKER),
        fleet.claim_key(MODULE, "n2"),
        fleet.claim_key(MODULE, "n3"),
        fleet.claim_key(MODULE, "n1.x"),  # a node named `n1.x`: `claim.m.n1=2Ex`
        fleet.claim_key(MODULE, "x.n1"),
        f"{fleet.claim_key(MODULE, ATTACKER)}.x",
        f"claim.{MODULE}",
    ]
    before = {key: revision for key, _, revision, _ in (await everything(seat, [FLEET]))[FLEET.name]}
    written = []
    async with mesh.connect(N1) as n1:
        for key in tried:
            try:
                await put(n1, FLEET, key, a_claim())
            except BusError:
                continue
            written.append(key)
    after = {key: revision for key, _, revision, _ in (await everything(seat, [FLEET]))[FLEET.name]}
    changed = [key for key in after if before.get(key) != after[key]]
    assert written == changed == [fleet.claim_key(MODULE, ATTACKER)]
    module_claims = [key for key in after if subject_matches(fleet.claims_of(MODULE), key)]
    assert sorted(module_claims) == [fleet.claim_key(MODULE, ATTACKER), fleet.claim_key(MODULE, "n2")]


# Headers n1 may put on a write of its own claim: none reaches another key or what n2 reads.
OWN = fleet.claim_key(MODULE, ATTACKER)
HEADERED = [
    request("a rollup of all", OWN, Nats_Rollup="all"),
    request("a rollup of its subject", OWN, Nats_Rollup="sub"),
    request("a purge with rollup", OWN, Nats_Rollup="all", **PURGE),
    request("an expected stream", OWN, Nats_Expected_Stream=FLEET.stream),
    request("an expected last sequence", OWN, Nats_Expected_Last_Sequence="1"),
    request("an expected last subject sequence", OWN, Nats_Expected_Last_Subject_Sequence="0"),
    request(
        "an expected last sequence of n2's claim",
        OWN,
        Nats_Expected_Last_Subject_Sequence="1",
        Nats_Expected_Last_Subject_Sequence_Subject=FLEET.subject(fleet.claim_key(MODULE, "n2")),
    ),
    request("an expected last message id", OWN, Nats_Expected_Last_Msg_Id="x"),
    request("a message ttl", OWN, Nats_TTL="1s"),
    request("a message id", OWN, Nats_Msg_Id="n2-claim"),
    request(
        "headers naming n2's claim",
        OWN,
        Nats_Subject=FLEET.subject(fleet.claim_key(MODULE, "n2")),
        Nats_Sequence="1",
        Nats_Stream=FLEET.stream,
        Nats_Time_Stamp="2020-01-01T00:00:00Z",
        Nats_Last_Sequence="0",
    ),
    request("a stamp of its own, far ahead", OWN, Nats_Time_Stamp="2099-01-01T00:00:00Z"),
    request("an atomic batch", OWN, Nats_Batch_Id="b1", Nats_Batch_Sequence="1", Nats_Batch_Commit="1"),
    request("a counter increment", OWN, Nats_Incr="1"),
    request("a delete marker of its own naming n2's", OWN, Nats_Subject=FLEET.subject("gone.n2"), **DEL),
    request("a hold's key in its own header", OWN, KV_Operation="PUT", Nats_Subject=FLEET.subject("rollout.m")),
]


@pytest.mark.parametrize("attack", HEADERED, ids=named(HEADERED))
async def test_headers_on_a_nodes_own_claim_reach_no_other_key_nor_reader(
    attacker: Client, attack: RequestAttack
) -> None:
    with anyio.fail_after(5):
        answers = await attack.answers(attacker)
    assert answers, "its own claim's subject is granted: the stream answers"


async def test_a_rollup_on_a_nodes_own_claim_is_refused(seat: Bus, attacker: Client) -> None:
    for rollup in ("all", "sub"):
        reply = await attacker.request(FLEET.subject(OWN), EVIL, headers={"Nats-Rollup": rollup}, timeout=10)
        assert b"error" in reply.data, reply.data


# n1's own claim's subject with a token the contract never builds: a wildcard, written literally.
ODD_TOKENS = ["*", ">", "m=2a", "m=41"]


async def unshaped_keys(seat: Bus) -> list[str]:
    """The keys of no shape standing in the fleet (one the seat deleted stays as a delete marker)."""
    stored = (await everything(seat, [FLEET]))[FLEET.name]
    return [key for key, _, _, deleted in stored if not shaped(key) and not deleted]


async def none_unshaped(seat: Bus) -> bool:
    return not await unshaped_keys(seat)


@pytest.mark.parametrize("token", ODD_TOKENS)
async def test_a_node_stores_no_claim_of_a_module_token_the_contract_never_builds(
    seat: Bus, attacker: Client, token: str
) -> None:
    """The grant `claim.*.n1` takes any one token and the stream stores it: the seat deletes it."""
    reply = await attacker.request(FLEET.subject(f"claim.{token}.{ATTACKER}"), EVIL, timeout=2)
    assert b"error" not in reply.data, "stored: the seat's erasure is what is tested"
    assert await until(partial(none_unshaped, seat), 10), await unshaped_keys(seat)


async def test_a_literal_wildcard_claim_is_deleted_and_a_later_claim_read_as_itself(
    mesh: Mesh, seat: Bus, attacker: Client
) -> None:
    """A get of `claim.*.n1` would be a wildcard's get (n1's latest claim of any module): the seat
    deletes the key, and n2 reads n1's standing claims as each key stores it."""
    stored = await attacker.request(FLEET.subject(f"claim.*.{ATTACKER}"), EVIL, timeout=2)
    assert b"error" not in stored.data
    later = await attacker.request(FLEET.subject(fleet.claim_key("later", ATTACKER)), a_claim(), timeout=2)
    assert b"error" not in later.data
    assert await until(partial(none_unshaped, seat), 10), await unshaped_keys(seat)
    async with mesh.connect(N2) as reader:
        read = [item for item in await get_last_many(reader, FLEET, fleet.own_claims(ATTACKER)) if not item.deleted]
    assert sorted(item.key for item in read) == [fleet.claim_key("later", ATTACKER), OWN]
    assert {item.key: item.value for item in read}[fleet.claim_key("later", ATTACKER)] == a_claim()


REPLY_TARGETS = [
    FLEET.subject(fleet.claim_key(MODULE, "n2")),
    FLEET.subject(fleet.hold_key(MODULE)),
    FLEET.subject(fleet.gone_key("n2")),
    FLEET.subject(fleet.gone_key(ATTACKER)),
    FLEET.subject(OWN),
    FLEET.live_subject(fleet.claim_key(MODULE, "n2")),
    FLEET.live_subject(fleet.hold_key(MODULE)),
    f"$JS.API.STREAM.PURGE.{FLEET.stream}",
    f"$JS.API.STREAM.DELETE.{FLEET.stream}",
]
REPLY_IDS = [
    "into n2's claim",
    "into a hold",
    "into n2's gone mark",
    "into n1's gone mark",
    "into n1's own claim",
    "into n2's live claim",
    "into a live hold",
    "purge the fleet",
    "delete the fleet",
]
N2_CLAIM = fleet.claim_key(MODULE, "n2")
READS_ANSWERED = {
    "a get of n2's claim": (FLEET.direct_get_subject(N2_CLAIM), b""),
    "a batch get of the fleet": (FLEET.batch_get_subject, b'{"multi_last":["$KV.mesh-provisioner_fleet.>"]}'),
    "a put of its own claim": (FLEET.subject(OWN), EVIL),
}


@pytest.mark.parametrize("target", REPLY_TARGETS, ids=REPLY_IDS)
@pytest.mark.parametrize("asked", list(READS_ANSWERED))
async def test_an_answer_to_a_chosen_reply_subject_lands_nowhere(attacker: Client, asked: str, target: str) -> None:
    subject, data = READS_ANSWERED[asked]
    await attacker.publish(subject, data, reply=target)
    await attacker.flush()


# A node's own account on the fleet's live subjects: what it publishes there stays there.
FAKE_LIVE = [
    fleet.claim_key(MODULE, "n2"),
    fleet.claim_key(MODULE, "n3"),
    fleet.hold_key(MODULE),
    fleet.gone_key("n2"),
    OWN,
]


@pytest.mark.parametrize("key", FAKE_LIVE)
async def test_a_fake_live_update_reaches_no_other_node(attacker: Client, key: str) -> None:
    headers = {"Nats-Subject": FLEET.subject(key), "Nats-Stream": FLEET.stream, "Nats-Sequence": "999"}
    await attacker.publish(FLEET.live_subject(key), EVIL, headers=headers)
    await attacker.publish(FLEET.subject(key).replace("$KV.", "$KVR.", 1), EVIL)
    await attacker.flush()


EVIL_CONSUMER = {
    "stream_name": FLEET.stream,
    "config": {
        "name": "evil",
        "deliver_subject": FLEET.subject(N2_CLAIM),
        "filter_subject": FLEET.subject(">"),
        "ack_policy": "none",
        "deliver_policy": "last_per_subject",
    },
}
# JetStream's API on the fleet's stream: none of it is n1's.
API_ATTACKS = [
    RequestAttack("a purge", f"$JS.API.{FLEET.purge_api}", {}),
    RequestAttack("a purge of n2's claims", f"$JS.API.{FLEET.purge_api}", {"filter": FLEET.subject("claim.*.n2")}),
    RequestAttack("a stream delete", f"$JS.API.STREAM.DELETE.{FLEET.stream}", {}),
    RequestAttack("a message delete", f"$JS.API.STREAM.MSG.DELETE.{FLEET.stream}", {"seq": 1, "no_erase": True}),
    RequestAttack(
        "a stream update allowing rollups",
        f"$JS.API.{FLEET.update_api}",
        {"name": FLEET.stream, "subjects": [FLEET.subject(">")], "allow_rollup_hdrs": True},
    ),
    RequestAttack(
        "a consumer delivering into n2's claim",
        f"$JS.API.CONSUMER.CREATE.{FLEET.stream}.evil.{FLEET.subject('>')}",
        EVIL_CONSUMER,
    ),
    RequestAttack("a durable consumer", f"$JS.API.CONSUMER.DURABLE.CREATE.{FLEET.stream}.evil", EVIL_CONSUMER),
    RequestAttack(
        "an ordered consumer of the fleet",
        f"$JS.API.{FLEET.consumer_create_api('watch', '>')}",
        FLEET.consumer_request([">"], {"name": "watch", "ack_policy": "none", "deliver_policy": "all"}),
    ),
    RequestAttack("stream info", f"$JS.API.{FLEET.info_api}", {"subjects_filter": ">"}),
    RequestAttack("a message get", f"$JS.API.{FLEET.message_get_api}", {"last_by_subj": FLEET.subject(N2_CLAIM)}),
]


@pytest.mark.parametrize("attack", API_ATTACKS, ids=named(API_ATTACKS))
async def test_a_node_holds_no_jetstream_api_on_the_fleet(seat: Bus, attacker: Client, attack: RequestAttack) -> None:
    await nothing_comes_back(seat, attacker, attack, among=[FLEET])
    consumers = await seat.jetstream(f"CONSUMER.NAMES.{FLEET.stream}", {}, operation="consumer names")
    assert not {"evil", "watch"} & set(consumers["consumers"] or [])  # the judges' own are the seat's
    assert FLEET.stream in (await seat.jetstream("STREAM.NAMES", {}, operation="names"))["streams"]


async def test_a_node_writes_and_deletes_its_own_claim_and_reads_and_follows_the_fleet(
    mesh: Mesh, seat: Bus, judges_itself: None
) -> None:
    """n1's own claims written and deleted, the whole fleet read in one batch, and every write
    heard live, n1's own and the seat's (a hold), each where the stream republishes it."""
    n1_raw = await mesh.raw(N1)
    heard = LiveFeed()
    try:
        await n1_raw.subscribe(FLEET.live_subject(">"), cb=heard.on_message)
        await n1_raw.flush()
        async with mesh.connect(N1) as n1:
            written = await put(n1, FLEET, fleet.claim_key("new", ATTACKER), a_claim())
            await delete(n1, FLEET, fleet.claim_key("new", ATTACKER), last=written)
            current = await get_direct(n1, FLEET, OWN)
            assert current is not None
            await delete(n1, FLEET, OWN, last=current.revision)
            read = {item.key for item in await get_last_many(n1, FLEET, ">")}
            held = await put(seat, FLEET, fleet.hold_key("held"), a_hold("ops"))
            await wait_for(
                lambda: any(m.subject == FLEET.live_subject(fleet.hold_key("held")) for m in heard.heard),
                "the hold heard",
            )
    finally:
        await n1_raw.close()
    assert read == set(SEEDED) | {fleet.claim_key("new", ATTACKER)}
    heard_keys = [FLEET.key_of(m.subject) for m in heard.heard]
    assert heard_keys == [fleet.claim_key("new", ATTACKER)] * 2 + [OWN, fleet.hold_key("held")]
    assert (heard.heard[-1].headers or {}).get("Nats-Sequence") == str(held)


async def test_an_operator_holds_and_resumes_a_rollout_and_nothing_else(
    mesh: Mesh, seat: Bus, judges_itself: None
) -> None:
    before = await everything(seat, JUDGED)
    async with mesh.connect(OPS) as ops:
        read = {item.key for item in await get_last_many(ops, FLEET, ">")}
        held = await put(ops, FLEET, fleet.hold_key(MODULE), a_hold("ops"))
        await delete(ops, FLEET, fleet.hold_key(MODULE), last=held)
        for key in (fleet.claim_key(MODULE, "ops"), N2_CLAIM, fleet.gone_key("n2"), fleet.gone_key("n3"), "anything"):
            with pytest.raises(BusError):
                await put(ops, FLEET, key, a_claim())
        with pytest.raises(BusError):
            await delete(ops, FLEET, fleet.gone_key("n2"), last=0)
    assert read == set(SEEDED)
    after = await everything(seat, JUDGED)
    changed = {
        key
        for key, value, revision, deleted in after[FLEET.name]
        if (key, value, revision, deleted) not in before[FLEET.name]
    }
    assert changed == {fleet.hold_key(MODULE)}
    assert {k: v for k, v in after.items() if k != FLEET.name} == {k: v for k, v in before.items() if k != FLEET.name}


async def test_an_operators_writes_and_a_reply_subject_it_chooses_land_nowhere_else(
    mesh: Mesh, seat: Bus, judges_itself: None
) -> None:
    before = await everything(seat, JUDGED)
    operator = await mesh.raw(OPS)
    try:
        for target in REPLY_TARGETS:
            await operator.publish(FLEET.direct_get_subject(N2_CLAIM), b"", reply=target)
        for attack in WRITES[:5] + WRITES[14:]:
            await nothing_comes_back(seat, operator, attack, among=[FLEET])
        await operator.flush()
    finally:
        await operator.close()
    await stream_barrier(seat, JUDGED)
    assert await everything(seat, JUDGED) == before


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("rollout.m.x", id="rollout.m.x"),
        pytest.param("rollout.*", id="rollout.*"),
        pytest.param("rollout.m=41", id="rollout.m=41"),
    ],
)
async def test_an_operator_stores_no_hold_of_a_key_the_contract_never_builds(
    mesh: Mesh, seat: Bus, judges_itself: None, key: str
) -> None:
    """An operator's grant is `rollout.*`: a hold of more tokens is refused; a literal `*` and a
    non-canonical escape in the one token are stored, and the seat erases them."""
    operator = await mesh.raw(OPS)
    try:
        with contextlib.suppress(*BUS_ERRORS):
            await operator.request(FLEET.subject(key), a_hold("ops"), timeout=2)
    finally:
        await operator.close()
    assert await until(partial(none_unshaped, seat), 10), await unshaped_keys(seat)


async def test_the_judges_see_a_change_of_another_nodes_claim(mesh: Mesh, seat: Bus, judges_itself: None) -> None:
    """The premise of `judged`: n1's own claim changed passes, n2's fails each of its three checks."""
    before = await everything(seat, JUDGED)
    await put(seat, FLEET, OWN, EVIL)
    assert outside_own_claims(await everything(seat, JUDGED)) == outside_own_claims(before)
    n2 = await mesh.raw(N2)
    feed = LiveFeed()
    try:
        await n2.subscribe(FLEET.live_subject(">"), cb=feed.on_message)
        await n2.flush()
        await put(seat, FLEET, N2_CLAIM, SEEDED[N2_CLAIM])  # the same value: its revision alone changes
        await wait_for(lambda: bool(feed.heard), "n2's write heard")
    finally:
        await n2.close()
    after = await everything(seat, JUDGED)
    assert outside_own_claims(after) != outside_own_claims(before)
    with pytest.raises(AssertionError):
        feed.check_real_writes_of_own_claims(after)
    async with mesh.connect(N2) as reader:
        await n2_reads_the_fleet_as_stored(reader, after)
        with pytest.raises(AssertionError):
            await n2_reads_the_fleet_as_stored(reader, before)


async def test_a_claim_written_later_stands_behind_an_earlier_one_whatever_it_says(
    mesh: Mesh, seat: Bus, judges_itself: None
) -> None:
    """n2's claim rewritten by the seat (the first write of a change), then n1's saying it was
    queued at revision 1: the seat deletes n1's, and every reader's queue has n2 first."""
    first = await put(seat, FLEET, N2_CLAIM, a_claim())  # n2's claim, first of this change: its revision
    forged = fleet.Claim(state="waiting", change="c0ffee", since=datetime.now(UTC), ttl_seconds=60, queued=1)
    async with mesh.connect(N1) as n1:
        later = await put(n1, FLEET, OWN, forged.model_dump_json().encode())

        async def refused() -> bool:
            own = await get_direct(n1, FLEET, OWN)
            return own is not None and own.deleted

        assert await until(refused, 10), "n1's forged place in the queue stands"
        claims = await get_last_many(n1, FLEET, fleet.claims_of(MODULE))
    assert later > first
    queue = fleet.live_claims(claims, datetime.now(UTC), skew=SKEW)
    assert [live.node for live in queue] == ["n2"]


SCHEDULES = ["@at 2020-01-01T00:00:00Z", "@every 1s"]
TARGETS = [N2_CLAIM, fleet.hold_key(MODULE), fleet.gone_key(ATTACKER)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_a_message_scheduled_on_its_own_claim_lands_on_no_other_key(
    attacker: Client, schedule: str, target: str
) -> None:
    """nats-server's message schedules (`Nats-Schedule`, `Nats-Schedule-Target`: the stream itself
    publishes the message to the target later) on the subject n1 may write, aimed at another key:
    the fleet's stream refuses schedules, so nothing is kept to fire."""
    headers = {"Nats-Schedule": schedule, "Nats-Schedule-Target": FLEET.subject(target), "Nats-Schedule-TTL": "5m"}
    for key in (OWN, fleet.claim_key("sched", ATTACKER)):
        reply = await attacker.request(FLEET.subject(key), EVIL, headers=headers, timeout=10)
        # refused as it comes: nothing is stored that could fire later (were it, `judged` would
        # need a barrier after its firing time)
        assert b'"err_code":10188' in reply.data, reply.data


# A header block n1 writes itself, status line included: what a reader takes for the end of a batch
# (`204`), a flow control or heartbeat (`100`), a missing key (`404`).
STATUS_LINES = [b"NATS/1.0 204 EOB", b"NATS/1.0 100 Idle Heartbeat", b"NATS/1.0 404 No Messages", b"NATS/1.0 503"]


@pytest.mark.parametrize("status", STATUS_LINES, ids=[line.decode() for line in STATUS_LINES])
async def test_a_status_line_stored_with_its_own_claim_ends_no_readers_batch_nor_feed(
    attacker: Client, status: bytes
) -> None:
    """Sent as nats-py never would (it writes `NATS/1.0` alone): the judge's batch read by n2, the
    seat's feed and n2's live feed each still read every key as stored."""
    block = status + b"\r\nNats-Subject: " + FLEET.subject(N2_CLAIM).encode() + b"\r\nNats-Sequence: 1\r\n\r\n"
    for subject in (FLEET.subject(OWN), FLEET.subject(fleet.claim_key("other", ATTACKER))):
        await attacker._send_command(command.hpub_cmd(subject, "", block, EVIL))
    await attacker.flush()


async def test_a_literal_wildcard_module_of_its_own_counts_in_no_modules_claims(mesh: Mesh, attacker: Client) -> None:
    """`claim.*.n1` and `claim.>.n1`, stored until the seat erases them: a read of module `m`'s claims
    is not widened by them, so they take no slot of any module."""
    for token in ("*", ">"):
        await attacker.request(FLEET.subject(f"claim.{token}.{ATTACKER}"), EVIL, timeout=2)
    async with mesh.connect(N2) as reader:
        claims = [item.key for item in await get_last_many(reader, FLEET, fleet.claims_of(MODULE))]
        counted = [item.key for item in await get_last_many(reader, FLEET, fleet.claims_of("other"))]
    assert sorted(claims) == [fleet.claim_key(MODULE, ATTACKER), N2_CLAIM]
    assert counted == [fleet.claim_key("other", "n2")]


class TestAtASite:
    """The core attacks by n1 living at site 1 (`tests/sites/test_site_isolation.py`'s mesh: the hub's and
    the site's seats on what `mesh-provisioner grants --mesh` writes, n2 at the hub): its writes of
    the fleet cross the link and are decided at the hub, its reads and live updates are answered
    from the site's copy. Each test runs a list of attacks and is judged once, by `judged`, at both
    ends: the hub's fleet and the site's copy, n2's reads and n2's live feed at the hub."""

    @pytest.fixture(params=[False, True], ids=["static accounts", "decentralized JWT accounts"])
    async def mesh(self, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SiteMesh]:
        async with in_own_task(site_mesh(tmp_path / "mesh", jwt=request.param)) as running:
            yield running

    async def test_a_node_at_a_site_writes_no_key_of_the_fleet_but_its_own_claims(
        self, seat: Bus, attacker: Client
    ) -> None:
        for attack in WRITES:
            await nothing_comes_back(seat, attacker, attack, among=[FLEET])

    async def test_a_node_at_a_site_holds_no_jetstream_api_on_the_fleet(self, seat: Bus, attacker: Client) -> None:
        for attack in API_ATTACKS:
            await nothing_comes_back(seat, attacker, attack, among=[FLEET])

    async def test_its_headers_reply_subjects_and_fake_live_updates_land_nowhere(self, attacker: Client) -> None:
        for attack in HEADERED:
            with anyio.fail_after(5):
                await attack.answers(attacker)
        for status in STATUS_LINES:
            await attacker._send_command(command.hpub_cmd(FLEET.subject(OWN), "", status + b"\r\n\r\n", EVIL))
        for subject, data in READS_ANSWERED.values():
            for target in REPLY_TARGETS:
                await attacker.publish(subject, data, reply=target)
        for key in FAKE_LIVE:
            await attacker.publish(FLEET.live_subject(key), EVIL, headers={"Nats-Subject": FLEET.subject(key)})
        await attacker.flush()

    async def test_a_node_at_a_site_writes_its_own_claim_at_the_hub_and_reads_and_follows_the_fleet(
        self, mesh: SiteMesh, seat: Bus
    ) -> None:
        """Its claim crosses the link (the hub's fleet holds it), the only key of module `m` it
        writes; it reads the whole fleet and hears its own write live at its site."""
        n1_raw = await mesh.raw(N1)
        heard = LiveFeed()
        try:
            await n1_raw.subscribe(FLEET.live_subject(">"), cb=heard.on_message)
            await n1_raw.flush()
            async with mesh.connect(N1) as n1:
                written = await put(n1, FLEET, OWN, a_claim("running"))
                for key in (N2_CLAIM, fleet.claim_key(MODULE, "n3"), f"{OWN}.x", fleet.hold_key(MODULE)):
                    with pytest.raises(BusError):
                        await put(n1, FLEET, key, a_claim())
                read = await eventually(partial(_read_at, n1, written), "n1's write read back at its site")
            await wait_for(
                lambda: any(m.subject == FLEET.live_subject(OWN) for m in heard.heard), "n1's write heard live"
            )
        finally:
            await n1_raw.close()
        at_the_hub = await get_direct(seat, FLEET, OWN)
        assert at_the_hub is not None and at_the_hub.revision == written
        assert {item.key for item in read} == set(SEEDED)

    async def test_the_judge_sees_a_change_in_the_sites_copy(
        self, mesh: SiteMesh, seat: Bus, judges_itself: None
    ) -> None:
        before = await site_copy_outside_own_claims(mesh, seat)
        await put(seat, FLEET, OWN, EVIL)
        assert await site_copy_outside_own_claims(mesh, seat) == before
        await put(seat, FLEET, N2_CLAIM, SEEDED[N2_CLAIM])
        assert await site_copy_outside_own_claims(mesh, seat) != before


async def _read_at(reader: Bus, revision: int) -> list[KvItem] | None:
    """The fleet as `reader` reads it, once its copy holds `revision` of n1's claim."""
    items = await get_last_many(reader, FLEET, ">")
    return items if any(item.key == OWN and item.revision == revision for item in items) else None


# A fleet of 2 MiB, and each node's quota there (its claims) a tenth of it, as tests/limits/test_quotas.py's.
SMALL_FLEET = {
    "bucket_max_bytes": 2 * 1024 * 1024,
    "bucket_max_value_size": 16 * 1024,
    "node_quota_keys": 100,
    "node_quota_bytes": 200 * 1024,
}
FILLER = b"x" * 8000  # the server takes any bytes as a claim's value: the bytes are what fill a bucket


async def fill_with_claims(n1: Bus, seconds: float) -> int:
    """n1 writing claims of ever new modules under its own name for `seconds` (`fill_own_keys`);
    how many puts were stored."""
    return await fill_own_keys(
        n1, FLEET, lambda writer, index: fleet.claim_key(f"m{writer}-{index}", ATTACKER), FILLER, seconds
    )


class TestFillingTheFleet:
    """n1 writing its own claims without end into a fleet bucket of 2 MiB (the seat's
    `bucket_max_bytes`, as `tests/limits/test_quotas.py` does for the needs): every other party's write of
    the fleet must still be taken, or the rollout's coordination is unreachable for every node."""

    @pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
    async def mesh(self, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
        start = mesh_server if request.param == "static" else jwt_mesh_server
        async with in_own_task(start(tmp_path / "mesh", seat=SMALL_FLEET)) as running:
            yield running

    async def test_a_node_filling_the_fleet_with_its_own_claims_refuses_no_other_write(
        self, mesh: Mesh, seat: Bus, judges_itself: None
    ) -> None:
        refused: list[str] = []
        async with mesh.connect(N1) as n1, mesh.connect(N2) as n2, mesh.connect(OPS) as ops:

            def writes(index: int) -> list[tuple[Bus, str, bytes]]:
                """Keys new at each round: a claim of n2's next change, a module paused, a node gone."""
                return [
                    (n2, fleet.claim_key(f"m{index}", "n2"), a_claim()),
                    (ops, fleet.hold_key(f"by-ops-{index}"), a_hold("ops")),
                    (seat, fleet.hold_key(f"by-seat-{index}"), a_hold()),
                    (seat, fleet.gone_key(f"n{index}"), a_gone()),
                ]

            async def others_write(rounds: range) -> None:
                for index in rounds:
                    await anyio.sleep(0.1)
                    for writer, key, value in writes(index):
                        try:
                            await put(writer, FLEET, key, value)
                        except BusError as err:
                            refused.append(f"{key}: {err}")

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(others_write, range(20))
                stored = await fill_with_claims(n1, 3.0)
            await others_write(range(20, 25))
        info = await seat.jetstream(FLEET.info_api, operation="info")
        assert stored > 0
        assert refused == [], f"{len(refused)} refused, the fleet at {info['state']['bytes']} bytes: {refused[:3]}"
