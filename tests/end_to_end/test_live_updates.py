"""A party's live updates carry every write to a bucket it follows, whoever wrote it, in both
account modes, and nothing it may not read.

nats-server passes a write that came into the data account through a service import (a writer's,
a provider's, a node's) on to no stream import of its subject. So each bucket's stream republishes
every write it stores under `$KVR.<bucket>.`, and a party imports exactly its own part of that
(a node: its `<node>.>` of a node-keyed bucket, or a mesh-wide bucket whole) onto the keys' own
subjects `$KV.<bucket>.`, where its watch listens as before. The attacks: a node sees no other
node's key there, forges no update another node sees, and the judge bites on a node whose grants
were widened to every node's updates.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from nats.aio.subscription import Subscription

from mesh_dev.standins import ASSIGNMENTS, BOUND_BUCKET, CONFIG, dev_plans
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.watch.watching import WatchTiming, watch
from registry.access import Kind, Party
from registry.contract import Bucket, buckets
from registry.wire import Bus, delete, get_latest, put
from tests.helpers import logged, sh_env
from tests.isolation import Domains, Mesh, Widening, granting, jwt_mesh_server, mesh_server, party
from tests.live import LIVE_WITHIN, live_update

SEAT, N1, N2 = party(Kind.SEAT), party(Kind.NODE, "n1"), party(Kind.NODE, "n2")
PROVIDER = party(Kind.PROVIDER, "postgres")
CONFIG_DOMAIN, CONTROLLER = party(Kind.WRITER, "config"), party(Kind.WRITER, "placement")
# Within this a node's watch has followed a write into its env file (its refresh is 5 minutes).
WATCH_WITHIN = 5.0
WATCHING = "provisioner_client.watch.watching"


async def test_what_a_provider_binds_reaches_its_consumer_nodes_live_updates_at_once(mesh: Mesh, seat: Bus) -> None:
    key = BOUND_BUCKET.shape.build(node="n1", module="app", provision="db", local="host")
    node = await mesh.raw(N1)
    try:
        updates = await node.subscribe(BOUND_BUCKET.subject("n1.>"))
        await node.flush()
        async with mesh.connect(PROVIDER) as provider:
            bound = await live_update(updates, put(provider, BOUND_BUCKET, key, b'"db-1.internal"'))
            unbound = await live_update(updates, delete(provider, BOUND_BUCKET, key, last=bound.revision))
    finally:
        await node.close()
    assert (bound.subject, bound.value, bound.operation) == (BOUND_BUCKET.subject(key), b'"db-1.internal"', None)
    assert (unbound.subject, unbound.operation) == (BOUND_BUCKET.subject(key), "DEL")


async def test_a_nodes_need_reaches_the_providers_live_updates_at_once(mesh: Mesh, seat: Bus) -> None:
    """The provider follows the needs (who consumes it), which every node writes through its own
    service import."""
    key = buckets.NEEDS.shape.build(node="n1", module="app", kind="bound", name="postgres:db:host")
    provider = await mesh.raw(PROVIDER)
    try:
        updates = await provider.subscribe(buckets.NEEDS.subject(">"))
        await provider.flush()
        async with mesh.connect(N1) as node:
            need = b'{"placeholder":"${bound:postgres:db:host}","used_in":["DB_HOST"]}'
            declared = await live_update(updates, put(node, buckets.NEEDS, key, need))
    finally:
        await provider.close()
    assert (declared.subject, declared.value) == (buckets.NEEDS.subject(key), need)


@dataclass(frozen=True)
class Change:
    """A write of another party that a node's `app` module reads, and how its env file shows it."""

    writer: Party
    bucket: Bucket
    key: str
    value: bytes
    shows: Callable[[dict[str, str]], bool]


def _app_plan_with_port(port: int) -> bytes:
    plan = dev_plans("n1")["app"]
    return json.dumps({"plan": {**plan, "port": {"http": port}}}).encode()


CHANGES = [
    Change(CONFIG_DOMAIN, CONFIG, "log-level", b'"debug"', lambda env: env["LOG_LEVEL"] == "debug"),
    Change(CONTROLLER, ASSIGNMENTS, "n1.app", _app_plan_with_port(9090), lambda env: env["HTTP_PORT"] == "9090"),
    Change(
        PROVIDER,
        BOUND_BUCKET,
        "n1.app.db.host",
        b'"db-2.internal"',
        lambda env: "@db-2.internal:" in env["DATABASE_URL"],
    ),
]


@pytest.mark.parametrize("change", CHANGES, ids=["the config domain", "the controller", "the provider"])
async def test_a_nodes_watch_follows_another_partys_write_into_its_env_file_at_once(
    mesh: Mesh, domains: Domains, node_plan: ClientPlan, change: Change, caplog: pytest.LogCaptureFixture
) -> None:
    """Woken by the live update of the key written (its log says which), not by a refresh."""
    caplog.set_level(logging.DEBUG, logger=WATCHING)
    async with mesh.connect(N1) as node, mesh.connect(change.writer) as writer:
        assert (await reconcile(node, node_plan)).ok
        assert not change.shows(sh_env(node_plan.materialize / "app.env")), "the premise: not changed yet"
        seconds = await watch_until(
            node, node_plan, change, lambda: put(writer, change.bucket, change.key, change.value)
        )
    assert seconds < WATCH_WITHIN


async def watch_until(node: Bus, plan: ClientPlan, change: Change, write: Callable[[], Awaitable[object]]) -> float:
    """Runs the watch loop as `node`, writes once it follows the bucket, and says how long after
    the write its live update woke the watch and the `app` module's env file showed it."""
    changed = anyio.Event()

    def on_report(report: Report) -> None:
        if change.shows(sh_env(plan.materialize / "app.env")):
            changed.set()

    timing = WatchTiming(debounce=timedelta(seconds=0.05))
    following = logged(f"resync after following {change.bucket.name}", WATCHING)
    woken = logged(f"{change.bucket.name} {change.key}", WATCHING)
    with following as subscribed, woken as updated:
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: watch(node, plan, timing, on_report=on_report, task_status=task_status))
            await subscribed.wait(WATCH_WITHIN)
            started = time.monotonic()
            await write()
            await updated.wait(WATCH_WITHIN)
            with anyio.fail_after(WATCH_WITHIN):
                await changed.wait()
            seconds = time.monotonic() - started
            tg.cancel_scope.cancel()
    return seconds


async def other_nodes_updates_seen(mesh: Mesh, seat: Bus) -> list[str]:
    """The subjects node n1 receives, on anything its account lets it subscribe to (`>`), of n2's
    keys written by the seat, the controller and the provider: a leak, each of them."""
    node = await mesh.raw(N1)
    try:
        everything = await node.subscribe(">")
        await node.flush()
        async with mesh.connect(CONTROLLER) as controller, mesh.connect(PROVIDER) as provider:
            for writer, bucket, key in (
                (controller, ASSIGNMENTS, "n2.app"),
                (provider, BOUND_BUCKET, "n2.app.db.host"),
                (seat, ASSIGNMENTS, "n2.web"),
                (seat, BOUND_BUCKET, "n2.web.db.host"),
            ):
                await put(writer, bucket, key, b'"for n2 only"')
            # n1's own keys last: once their updates came, a leaked one before them would have
            await put(controller, ASSIGNMENTS, "n1.last", b'"for n1"')
            await put(provider, BOUND_BUCKET, "n1.last.db", b'"for n1"')
        return await _seen_until_own(everything, [ASSIGNMENTS.subject("n1.last"), BOUND_BUCKET.subject("n1.last.db")])
    finally:
        await node.close()


async def _seen_until_own(everything: Subscription, last: list[str]) -> list[str]:
    leaked, waiting = [], set(last)
    while waiting:
        message = await everything.next_msg(timeout=LIVE_WITHIN)
        waiting.discard(message.subject)
        if not message.subject.startswith((ASSIGNMENTS.subject("n1."), BOUND_BUCKET.subject("n1."))):
            leaked.append(message.subject)
    return leaked


async def test_a_node_sees_no_other_nodes_key_where_the_buckets_republish_their_writes(mesh: Mesh, seat: Bus) -> None:
    assert await other_nodes_updates_seen(mesh, seat) == []


async def test_a_node_forges_no_live_update_another_node_sees(mesh: Mesh, seat: Bus) -> None:
    """n1 publishes where the buckets republish (`$KVR.`) and on the keys' subjects it only reads:
    it reaches its own account alone; n2 hears the seat's next write and nothing before it."""
    forged = [
        CONFIG.live_subject("log-level"),
        CONFIG.subject("log-level"),
        ASSIGNMENTS.live_subject("n2.app"),
        ASSIGNMENTS.subject("n2.app"),
        BOUND_BUCKET.live_subject("n2.app.db.host"),
        buckets.REGISTRY.live_subject("secret"),
    ]
    attacker, victim = await mesh.raw(N1), await mesh.raw(N2)
    try:
        heard = await victim.subscribe(">")
        await victim.flush()
        for subject in forged:
            await attacker.publish(subject, b'"forged by n1"')
        await attacker.flush()
        written = await put(seat, CONFIG, "log-level", b'"by the seat"')
        first = await heard.next_msg(timeout=LIVE_WITHIN)
    finally:
        await attacker.close()
        await victim.close()
    assert (first.subject, first.data) == (CONFIG.subject("log-level"), b'"by the seat"')
    stored = await get_latest(seat, CONFIG, "log-level")
    assert stored is not None and (stored.value, stored.revision) == (b'"by the seat"', written)


def every_nodes_assignments_to_n1() -> Widening:
    live = {"kind": "stream", "subject": ASSIGNMENTS.live_subject(">"), "to": ASSIGNMENTS.subject(">")}
    return granting(N1, {**live, "why": "widened: every node's assignments, live"})


@pytest.mark.parametrize("mode", ["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def test_the_judge_sees_a_node_widened_to_every_nodes_live_updates(tmp_path: Path, mode: str) -> None:
    start = mesh_server if mode == "static" else jwt_mesh_server
    async with start(tmp_path / "mesh", widen=every_nodes_assignments_to_n1()) as mesh, mesh.connect(SEAT) as seat:
        leaked = await other_nodes_updates_seen(mesh, seat)
    assert ASSIGNMENTS.subject("n2.app") in leaked and ASSIGNMENTS.subject("n2.web") in leaked
