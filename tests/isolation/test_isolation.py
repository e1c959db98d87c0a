"""A hostile node's attacks, each on a real nats-server running the configuration `mesh-provisioner grants`
writes (static and JWT accounts), each judged by the data: the target's keys, revisions and
contents are unchanged after; a request attack also by what came back to it: a refusal only, no key
name, no value, no count (`tests/attacks.py`; `tests/isolation/test_isolation_sees_a_leak.py` shows that
these judges fail on grants widened on purpose).

On the single-account configuration these attacks succeeded; across accounts
a reply subject names the requester's own namespace, and a party holds no JetStream API in the
data account.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable
from functools import partial

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from provisioner.seat.buckets import ensure_buckets
from registry.access import Kind
from registry.contract import Bucket, buckets
from registry.errors import BusError, ServiceError
from registry.wire import BucketConfig, Bus, ask, get_latest, put, update
from tests.attacks import (
    API_ATTACKS,
    READ_ATTACKS,
    RequestAttack,
    everything,
    named,
    nothing_comes_back,
    unchanged_after,
)
from tests.helpers import in_own_task, stream_barrier, wait_for
from tests.isolation import Mesh, party

N1, N2 = party(Kind.NODE, "n1"), party(Kind.NODE, "n2")
POSTGRES, OPS, SEAT = party(Kind.PROVIDER, "postgres"), party(Kind.OPERATOR, "ops"), party(Kind.SEAT)
A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'


@pytest.fixture
def answering_seat(seat: Bus) -> Bus:
    """A connection to the server whose seat answers the attacker's verb requests: the hub's."""
    return seat


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    async with in_own_task(mesh.connect(SEAT)) as bus:
        for node in ("n1", "n2"):
            await put(bus, buckets.NEEDS, f"{node}.web.config.x", A_NEED)
            await put(bus, buckets.APPLIED, f"{node}.web", b'{"state":"applied"}')
            await put(bus, buckets.COLLECT, f"{node}.shell=3Azsh.web", b'{"items":["a"]}')
        yield bus


async def test_a_node_writes_and_reads_its_own_keys_and_asks_the_verb(mesh: Mesh, seat: Bus) -> None:
    async with mesh.connect(N1) as n1:
        current = await get_latest(n1, buckets.NEEDS, "n1.web.config.x")
        assert current is not None
        await update(n1, buckets.NEEDS, "n1.web.config.x", b'{"placeholder":"${config:y}"}', last=current.revision)
        answer = await ask(n1, {"what": "needs"})
    assert [e["key"] for e in answer["entries"]] == ["n1.web.config.x"]
    stored = await get_latest(seat, buckets.NEEDS, "n1.web.config.x")
    assert stored is not None and b"config:y" in stored.value


@pytest.mark.parametrize(
    ("bucket", "key"),
    [(buckets.NEEDS, "n2.web.config.x"), (buckets.APPLIED, "n2.web"), (buckets.REGISTRY, "secret")],
    ids=["another node's need", "another node's applied record", "the registry"],
)
async def test_a_node_cannot_write_outside_its_own_keys(mesh: Mesh, seat: Bus, bucket: Bucket, key: str) -> None:
    async with mesh.connect(N1) as n1:

        async def attack() -> None:
            with pytest.raises(BusError):
                await put(n1, bucket, key, b'{"evil":true}')

        await unchanged_after(seat, attack)


REPLY_TARGETS = [
    "$KV.mesh-provisioner_registry.secret",
    "$KV.mesh-provisioner_needs.n2.web.config.x",
    "$KV.mesh-provisioner_applied.n2.web",
    "$JS.API.STREAM.PURGE.KV_mesh-provisioner_applied",
    "$JS.API.STREAM.DELETE.KV_mesh-provisioner_collect",
]
REPLY_IDS = ["into the registry", "into n2's need", "into n2's applied", "purge applied", "delete collect"]


@pytest.mark.parametrize("target", REPLY_TARGETS, ids=REPLY_IDS)
async def test_a_direct_get_answered_to_a_chosen_reply_subject_lands_nowhere(
    seat: Bus, attacker: Client, target: str
) -> None:
    own_get = f"$JS.API.DIRECT.GET.{buckets.NEEDS.stream}.{buckets.NEEDS.subject('n1.web.config.x')}"

    async def attack() -> None:
        await attacker.publish(own_get, b"", reply=target)
        await attacker.flush()

    await unchanged_after(seat, attack)


@pytest.mark.parametrize("target", REPLY_TARGETS, ids=REPLY_IDS)
async def test_a_put_acknowledged_to_a_chosen_reply_subject_lands_nowhere(
    seat: Bus, attacker: Client, target: str
) -> None:
    own_key = buckets.COLLECT.subject("n1.shell=3Azsh.web")

    async def attack() -> None:
        await attacker.publish(own_key, b'{"items":["a"]}', reply=target)
        await attacker.flush()

    before = await everything(seat)
    await attack()
    await stream_barrier(seat, buckets.OWN)
    after = await everything(seat)
    own = buckets.COLLECT.name
    assert {k: v for k, v in after.items() if k != own} == {k: v for k, v in before.items() if k != own}
    assert [i for i in after[own] if not i[0].startswith("n1.")] == [
        i for i in before[own] if not i[0].startswith("n1.")
    ]


@pytest.mark.parametrize("target", REPLY_TARGETS, ids=REPLY_IDS)
async def test_the_verbs_answer_to_a_chosen_reply_subject_lands_nowhere(
    seat: Bus, answering_seat: Bus, attacker: Client, target: str
) -> None:
    async def attack() -> None:
        answered = await verb_answers_sent(answering_seat)
        await attacker.publish(buckets.VERB_SUBJECT, b"{}", reply=target)
        sent = partial(verb_answers_sent, answering_seat)
        await wait_for(lambda: _more_than(answered, sent()), "the seat's answer to the attack")

    await unchanged_after(seat, attack)


async def verb_answers_sent(bus: Bus) -> int:
    """How many answers the seat has sent to the verb's requests (`$SRV.STATS`): each counted once
    published."""
    reply = await bus.request(f"$SRV.STATS.{buckets.SEAT}", b"", operation="stats")
    endpoints = json.loads(reply.data)["endpoints"]
    return sum(n for e in endpoints for codes in e["data"]["answers"].values() for n in codes.values())


async def _more_than(count: int, now: Awaitable[int]) -> bool:
    return await now > count


@pytest.mark.parametrize("rollup", ["all", "sub"])
async def test_a_rollup_header_on_a_nodes_own_put_wipes_nothing(seat: Bus, attacker: Client, rollup: str) -> None:
    async def attack() -> None:
        reply = await attacker.request(
            buckets.COLLECT.subject("n1.shell=3Azsh.web"), b'{"items":["b"]}', headers={"Nats-Rollup": rollup}
        )
        assert b"error" in reply.data

    await unchanged_after(seat, attack)


@pytest.mark.parametrize("attack", READ_ATTACKS, ids=named(READ_ATTACKS))
async def test_a_node_reads_nothing_of_another_node_or_the_whole_bucket(
    seat: Bus, attacker: Client, attack: RequestAttack
) -> None:
    await unchanged_after(seat, partial(nothing_comes_back, seat, attacker, attack))


@pytest.mark.parametrize("attack", API_ATTACKS, ids=named(API_ATTACKS))
async def test_a_node_holds_no_jetstream_api_in_the_data_account(
    seat: Bus, attacker: Client, attack: RequestAttack
) -> None:
    await unchanged_after(seat, partial(nothing_comes_back, seat, attacker, attack))
    consumers = await seat.jetstream(f"CONSUMER.NAMES.{buckets.NEEDS.stream}", {}, operation="consumer names")
    assert "evil" not in (consumers["consumers"] or [])


async def test_a_provider_cannot_create_a_stream_to_capture_inboxes_or_verbs(mesh: Mesh, seat: Bus) -> None:
    config = {"name": "KV_mysql_bound", "subjects": ["_INBOX.>", "mesh-vault.>", "$KV.mysql_bound.>"]}
    capture = RequestAttack("a stream capturing inboxes and verbs", "$JS.API.STREAM.CREATE.KV_mysql_bound", config)
    provider = await mesh.raw(POSTGRES)
    try:
        await nothing_comes_back(seat, provider, capture)  # its own account has no JetStream
    finally:
        await provider.close()
    names = (await seat.jetstream("STREAM.NAMES", {}, operation="names"))["streams"]
    assert "KV_mysql_bound" not in names


async def test_a_node_asking_the_verb_about_another_node_learns_nothing(mesh: Mesh, seat: Bus) -> None:
    async with mesh.connect(N1) as n1:
        mine = await ask(n1, {"what": "needs"})
        with pytest.raises(ServiceError) as refused:
            await ask(n1, {"what": "needs", "node": "n2"})
    assert {e["node"] for e in mine["entries"]} == {"n1"}
    assert refused.value.code == "403"


async def test_an_operator_and_a_provider_see_the_mesh(mesh: Mesh, seat: Bus) -> None:
    for who in (OPS, POSTGRES):
        async with mesh.connect(who) as bus:
            answer = await ask(bus, {"what": "needs"})
        assert {e["node"] for e in answer["entries"]} == {"n1", "n2"}


async def test_the_check_bites_on_one_account_the_same_attack_writes_into_the_registry(bus: Bus, nc: Client) -> None:
    """The old configuration, every party in one account: the direct-get reply attack lands, so the
    `unchanged_after` judgement above can tell harm from none."""
    await ensure_buckets(bus, BucketConfig())
    await put(bus, buckets.NEEDS, "n1.web.config.x", b'{"planted":"by n1"}')
    own_get = f"$JS.API.DIRECT.GET.{buckets.NEEDS.stream}.{buckets.NEEDS.subject('n1.web.config.x')}"
    await nc.publish(own_get, b"", reply="$KV.mesh-provisioner_registry.secret")
    await nc.flush()
    await stream_barrier(bus, buckets.OWN)  # the barrier `unchanged_after` judges after: the landing is seen by then
    landed = await get_latest(bus, buckets.REGISTRY, "secret")
    assert landed is not None and landed.value == b'{"planted":"by n1"}'


async def test_the_vault_cannot_answer_the_seats_service_api_in_its_place(mesh: Mesh, seat: Bus) -> None:
    """The vault's user shares the data account with the seat; allowed `$SRV.>` it could answer an
    operator's `$SRV.INFO.mesh-provisioner` first, with whatever it likes."""
    vault = await mesh.raw(party(Kind.VAULT))
    operator = await mesh.raw(OPS)

    async def forge(msg: Msg) -> None:
        await msg.respond(b'{"name":"forged"}')

    try:
        await vault.subscribe(f"$SRV.INFO.{buckets.SEAT}", cb=forge)
        await vault.flush()
        names = set()
        for _ in range(20):
            reply = await operator.request(f"$SRV.INFO.{buckets.SEAT}", b"", timeout=10)
            names.add(json.loads(reply.data)["name"])
    finally:
        await vault.close()
        await operator.close()
    assert names == {buckets.SEAT}
