"""Every writer a party: the config domain (`writer-config`) and the controller (`writer-placement`),
each on the account `mesh-provisioner grants` issues it, on a real nats-server in both account modes.

Each writes and reads its own bucket, compare-and-set included, and nothing else: not another
domain's bucket, not the needs, applied, collect, leases or registry buckets, not a provider's;
it creates, purges and deletes no stream and makes no consumer; it reads no other bucket (so no
node's keys but the assignments the controller writes itself); it asks no verb, and the seat that
hears from one anyway (its grants widened on purpose) answers it nothing. Every attack is judged
by the data of every bucket of the data account (keys, revisions and contents unchanged after) and
a read by all that comes back to it (`tests/attacks.py`). What a writer writes reaches a node's
live updates at once (`tests/end_to_end/test_live_updates.py` follows it into a node's env file).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
from nats.aio.client import Client

from mesh_dev.standins import ASSIGNMENTS, BOUND_BUCKET, CONFIG
from registry.access import Kind, Party
from registry.contract import Bucket, buckets
from registry.errors import NoResponders, ServiceError, WrongLastSequence
from registry.wire import Bus, Holder, ask, delete, get_last_many, get_latest, put, update
from tests.attacks import (
    API_ATTACKS,
    READ_ATTACKS,
    RequestAttack,
    data_buckets,
    nothing_comes_back,
    unchanged_after,
)
from tests.helpers import in_own_task
from tests.isolation import Mesh, Widening, granting, jwt_mesh_server, mesh_server, party
from tests.live import live_update

SEAT = party(Kind.SEAT)
N1 = party(Kind.NODE, "n1")
A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'


@dataclass(frozen=True)
class Writer:
    """A writer party, its own bucket and a key there, and the other writer's bucket and key."""

    party: Party
    own: Bucket
    own_key: str
    other: Bucket
    other_key: str


WRITERS = [
    Writer(party(Kind.WRITER, "config"), CONFIG, "log-level", ASSIGNMENTS, "n1.app"),
    Writer(party(Kind.WRITER, "placement"), ASSIGNMENTS, "n1.app", CONFIG, "log-level"),
]


@pytest.fixture(params=WRITERS, ids=["the config domain", "the controller"])
def writer(request: pytest.FixtureRequest) -> Writer:
    found: Writer = request.param
    return found


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    """The seat, once every bucket holds keys of two nodes (the writers' buckets are the seat's
    too: it makes them at its start, as it makes its own)."""
    async with in_own_task(mesh.connect(SEAT)) as bus:
        await put(bus, CONFIG, "log-level", b'"info"')
        lease = Holder.me(timedelta(hours=1)).model_dump_json().encode()
        for node in ("n1", "n2"):
            await put(bus, buckets.NEEDS, f"{node}.web.config.x", A_NEED)
            await put(bus, buckets.APPLIED, f"{node}.web", b'{"state":"applied"}')
            await put(bus, buckets.COLLECT, f"{node}.shell=3Azsh.web", b'{"items":["a"]}')
            await put(bus, buckets.LEASES, f"node.{node}", lease)
            await put(bus, ASSIGNMENTS, f"{node}.app", b'{"plan":{"port":{"http":8080}}}')
            await put(bus, BOUND_BUCKET, f"{node}.app.db.host", b'"db-1.internal"')
        yield bus


@pytest.fixture
async def attacker(mesh: Mesh, seat: Bus, writer: Writer) -> AsyncIterator[Client]:
    """The writer through nats-py itself: it may send anything its account lets it."""
    client = await mesh.raw(writer.party)
    try:
        yield client
    finally:
        await client.close()


async def test_a_writer_writes_and_reads_its_own_bucket_compare_and_set_included(
    mesh: Mesh, seat: Bus, writer: Writer
) -> None:
    async with mesh.connect(writer.party) as own:
        current = await get_latest(own, writer.own, writer.own_key)
        assert current is not None
        revision = await update(own, writer.own, writer.own_key, b'"changed"', last=current.revision)
        with pytest.raises(WrongLastSequence):
            await update(own, writer.own, writer.own_key, b'"stale"', last=current.revision)
        created = await put(own, writer.own, "n3.new", b'"new"')
        await delete(own, writer.own, "n3.new", last=created)
        listed = {i.key: i.value for i in await get_last_many(own, writer.own, ">") if not i.deleted}
    assert listed[writer.own_key] == b'"changed"' and "n3.new" not in listed
    stored = await get_latest(seat, writer.own, writer.own_key)
    assert stored is not None and (stored.value, stored.revision) == (b'"changed"', revision)


async def test_what_a_writer_writes_reaches_a_nodes_live_updates_at_once(mesh: Mesh, seat: Bus, writer: Writer) -> None:
    """nats-server passes a put that came into the data account through a service import (the
    writer's) on to no stream import of its subject; the bucket's stream republishes it under
    `$KVR.<bucket>.`, and the node imports that onto the key's own subject. So the node's live
    updates carry the writer's put and delete within a second, as they carry the seat's, each with
    the stream's headers (its revision, and the delete's operation)."""
    node = await mesh.raw(N1)
    try:
        updates = await node.subscribe(writer.own.subject(writer.own_key))
        await node.flush()
        async with mesh.connect(writer.party) as own:
            put_by_writer = await live_update(updates, put(own, writer.own, writer.own_key, b'"from the writer"'))
            deleted = await live_update(updates, delete(own, writer.own, writer.own_key, last=put_by_writer.revision))
        put_by_seat = await live_update(updates, put(seat, writer.own, writer.own_key, b'"from the seat"'))
    finally:
        await node.close()
    assert (put_by_writer.value, put_by_writer.operation) == (b'"from the writer"', None)
    assert (deleted.value, deleted.operation) == (b"", "DEL")
    assert (put_by_seat.value, put_by_seat.operation) == (b'"from the seat"', None)
    assert put_by_writer.subject == deleted.subject == put_by_seat.subject == writer.own.subject(writer.own_key)


def writes_outside(writer: Writer) -> list[tuple[Bucket, str]]:
    """A key of every bucket but the writer's own."""
    return [
        (writer.other, writer.other_key),
        (buckets.NEEDS, "n1.web.config.x"),
        (buckets.APPLIED, "n1.web"),
        (buckets.COLLECT, "n1.shell=3Azsh.web"),
        (buckets.LEASES, "node.n1"),
        (buckets.REGISTRY, "secret"),
        (BOUND_BUCKET, "n1.app.db.host"),
    ]


async def test_a_writer_writes_nothing_outside_its_own_bucket(mesh: Mesh, seat: Bus, writer: Writer) -> None:
    judged = await data_buckets(seat)
    async with mesh.connect(writer.party) as own:
        for bucket, key in writes_outside(writer):

            async def attack(bucket: Bucket = bucket, key: str = key) -> None:
                with pytest.raises(NoResponders):
                    await put(own, bucket, key, b'{"evil":true}')

            await unchanged_after(seat, attack, judged)


def reply_targets(writer: Writer) -> list[str]:
    """Where a writer would have JetStream send an answer, if its reply subject reached the data account."""
    return [
        buckets.REGISTRY.subject("secret"),
        buckets.NEEDS.subject("n2.web.config.x"),
        buckets.LEASES.subject("node.n2"),
        writer.other.subject(writer.other_key),
        f"$JS.API.{buckets.APPLIED.purge_api}",
        f"$JS.API.STREAM.DELETE.{buckets.COLLECT.stream}",
        f"$JS.API.{writer.other.purge_api}",
    ]


async def test_an_answer_to_a_writers_chosen_reply_subject_lands_nowhere(
    seat: Bus, attacker: Client, writer: Writer
) -> None:
    judged = await data_buckets(seat)
    asked = [writer.own.direct_get_subject(writer.own_key), buckets.VERB_SUBJECT]
    for subject in asked:
        for target in reply_targets(writer):

            async def attack(subject: str = subject, target: str = target) -> None:
                await attacker.publish(subject, b"{}", reply=target)
                await attacker.flush()

            await unchanged_after(seat, attack, judged)


async def test_a_put_acknowledged_to_a_writers_chosen_reply_subject_lands_nowhere(
    seat: Bus, attacker: Client, writer: Writer
) -> None:
    """The put lands in the writer's own bucket; its acknowledgement nowhere else."""
    judged = [b for b in await data_buckets(seat) if b.name != writer.own.name]
    for target in reply_targets(writer):

        async def attack(target: str = target) -> None:
            await attacker.publish(writer.own.subject(writer.own_key), b'"acked"', reply=target)
            await attacker.flush()

        await unchanged_after(seat, attack, judged)


@pytest.mark.parametrize("rollup", ["all", "sub"])
async def test_a_rollup_header_on_a_writers_own_put_wipes_nothing(
    seat: Bus, attacker: Client, writer: Writer, rollup: str
) -> None:
    async def attack() -> None:
        reply = await attacker.request(writer.own.subject("n9.x"), b'"x"', headers={"Nats-Rollup": rollup})
        assert b"error" in reply.data

    await unchanged_after(seat, attack, await data_buckets(seat))


def read_attacks(writer: Writer) -> list[RequestAttack]:
    """What a writer would read of another bucket, if its grants let it."""
    return [
        *READ_ATTACKS,
        RequestAttack("a get of the other domain's key", writer.other.direct_get_subject(writer.other_key)),
        RequestAttack(
            "a batch get of the other domain's bucket",
            writer.other.batch_get_subject,
            {"multi_last": [writer.other.subject(">")]},
        ),
        RequestAttack("a get of a node's applied record", buckets.APPLIED.direct_get_subject("n1.web")),
        RequestAttack("a get of a node's lease", buckets.LEASES.direct_get_subject("node.n1")),
        RequestAttack("a get of a provider's bound value", BOUND_BUCKET.direct_get_subject("n1.app.db.host")),
        RequestAttack("a get of the registry", buckets.REGISTRY.direct_get_subject("secret")),
        RequestAttack(
            "a message get of its own bucket", f"$JS.API.{writer.own.message_get_api}", {"last_by_subj": ">"}
        ),
    ]


async def test_a_writer_reads_nothing_but_its_own_bucket(seat: Bus, attacker: Client, writer: Writer) -> None:
    judged = await data_buckets(seat)
    for attack in read_attacks(writer):
        await unchanged_after(seat, partial(nothing_comes_back, seat, attacker, attack, judged), judged)


def api_attacks(writer: Writer) -> list[RequestAttack]:
    """What a writer would change with JetStream's API in the data account, if it held any of it."""
    capture = {"name": "KV_capture", "subjects": ["_INBOX.>", "mesh-vault.>", "$KV.capture.>"]}
    return [
        *API_ATTACKS,
        RequestAttack("a purge of its own bucket", f"$JS.API.{writer.own.purge_api}", {}),
        RequestAttack("a delete of its own bucket", f"$JS.API.STREAM.DELETE.{writer.own.stream}", {}),
        RequestAttack("a purge of the other domain's bucket", f"$JS.API.{writer.other.purge_api}", {}),
        RequestAttack("a stream capturing inboxes and verbs", "$JS.API.STREAM.CREATE.KV_capture", capture),
        RequestAttack(
            "a consumer of its own bucket",
            f"$JS.API.{writer.own.consumer_create_api('evil', '>')}",
            writer.own.consumer_request([">"], {"name": "evil", "ack_policy": "none"}),
        ),
    ]


async def test_a_writer_holds_no_jetstream_api_in_the_data_account(seat: Bus, attacker: Client, writer: Writer) -> None:
    judged = await data_buckets(seat)
    for attack in api_attacks(writer):
        await unchanged_after(seat, partial(nothing_comes_back, seat, attacker, attack, judged), judged)
    assert await data_buckets(seat) == judged  # no stream created, none deleted
    for bucket in (buckets.NEEDS, writer.own):
        consumers = await seat.jetstream(f"CONSUMER.NAMES.{bucket.stream}", {}, operation="consumer names")
        assert "evil" not in (consumers["consumers"] or [])


async def test_a_writer_asks_no_verb(mesh: Mesh, seat: Bus, writer: Writer) -> None:
    async with mesh.connect(writer.party) as own:
        for subject in (buckets.VERB_SUBJECT, "mesh-vault.secret", f"$SRV.INFO.{buckets.SEAT}"):
            with pytest.raises(NoResponders):
                await own.request(subject, b"{}")


def the_verb_granted_to_the_writers() -> Widening:
    verb: dict[str, str | bool] = {"kind": "service", "subject": buckets.VERB_SUBJECT, "share": True}
    config, placement = (granting(w.party, verb) for w in WRITERS)
    return lambda grants: placement(config(grants))


@pytest.mark.parametrize("mode", ["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def test_the_seat_answers_a_writer_nothing_even_when_its_grants_let_it_ask(tmp_path: Path, mode: str) -> None:
    start = mesh_server if mode == "static" else jwt_mesh_server
    async with start(tmp_path / "mesh", widen=the_verb_granted_to_the_writers()) as mesh:
        for writer in WRITERS:
            async with mesh.connect(writer.party) as own:
                for request in ({"what": "needs"}, {"what": "registry"}, {"what": "nodes"}):
                    with pytest.raises(ServiceError) as refused:
                        await ask(own, request)
                    assert refused.value.code == "403", request
                    assert f"{writer.party.label} is answered nothing" in str(refused.value)


async def test_the_controller_writes_the_assignment_of_any_node(mesh: Mesh, seat: Bus) -> None:
    """Its grant is its bucket, not a node: the mirror of every node's placement is the controller's."""
    async with mesh.connect(WRITERS[1].party) as controller:
        for node in ("n1", "n2", "n3"):
            await put(controller, ASSIGNMENTS, f"{node}.db", json.dumps({"plan": {}}).encode())
    assert {i.key for i in await get_last_many(seat, ASSIGNMENTS, ">")} >= {"n1.db", "n2.db", "n3.db"}


def writers_widened() -> Widening:
    """The config domain's grants widened on purpose: puts into the needs, gets of the assignments."""
    return granting(
        WRITERS[0].party,
        {"kind": "service", "subject": buckets.NEEDS.subject(">"), "why": "widened: every node's needs"},
        {"kind": "service", "subject": ASSIGNMENTS.direct_get_subject(">"), "why": "widened: the assignments"},
    )


@pytest.mark.parametrize("mode", ["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def test_the_judges_see_a_writer_widened_on_purpose(tmp_path: Path, mode: str) -> None:
    """The suite's judges bite on a writer's grants: widened, the same attacks fail with what changed
    and what leaked."""
    start = mesh_server if mode == "static" else jwt_mesh_server
    config = WRITERS[0]
    async with start(tmp_path / "mesh", widen=writers_widened()) as mesh, mesh.connect(SEAT) as seat:
        await put(seat, ASSIGNMENTS, "n1.app", b'{"plan":{"port":{"http":8080}}}')
        judged = await data_buckets(seat)
        async with mesh.connect(config.party) as own:

            async def write() -> None:
                await put(own, buckets.NEEDS, "n1.web.config.x", b'{"planted":"by the config domain"}')

            with pytest.raises(AssertionError):
                await unchanged_after(seat, write, judged)
        attacker = await mesh.raw(config.party)
        try:
            read = RequestAttack("a get of the assignments", ASSIGNMENTS.direct_get_subject("n1.app"))
            with pytest.raises(AssertionError, match="something came back") as leaked:
                await nothing_comes_back(seat, attacker, read, judged)
        finally:
            await attacker.close()
    assert "8080" in str(leaked.value)
