"""Rollouts end to end: many watching clients, each on its own node's grants, one shared
config value changed; the change actions record their own start and end in one file.

- With a budget of 3, at no moment do more than 3 change actions run, and every node finishes.
- Nodes whose action fails keep their slots (their claims `failed`), the seat holds the module's
  rollout, and the nodes that have not changed keep their env files and say why in their applied
  records (`rollout: paused`). An abort (the hold written here as an operator's) rolls back the
  nodes whose module allows it; a resume lets the change through.
- nats-server killed and started again mid-rollout: no node runs its action twice for the change,
  the rollout completes, no node waits past the bound.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskGroup

from bench.rollout import Run, most_at_once, runs_of
from mesh_dev.standins import ASSIGNMENT, ASSIGNMENTS, CONFIG
from provisioner.seat.buckets import ensure_bucket
from provisioner_client.reconcile import ClientPlan
from provisioner_client.rollout import RolloutPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.access import Kind
from registry.contract import fleet, to_json
from registry.contract.buckets import NEEDS
from registry.errors import BusError
from registry.wire import BucketConfig, Bus, BusOptions, KvItem, connect, delete, get_direct, get_last_many, put
from tests.helpers import Reports, in_own_task, restartable_nats, serving, sh_env, wait_for
from tests.isolation import Mesh, jwt_mesh_server, mesh_server, party

TIMING = WatchTiming(debounce=timedelta(seconds=0.1), poll=timedelta(seconds=1), backoff_max=timedelta(seconds=1))
CLAIM_TTL = timedelta(seconds=6)
BOUND = 90.0


def action_script(folder: Path, log: Path, *, seconds: float, fail_at: str | None = None) -> Path:
    """A change action recording its start and end (module, node, LOG_LEVEL, time) in `log`, as the
    bench's do (`bench.rollout.runs_of` reads them); it fails (exit 3) for the values of level `fail_at`."""
    failing = f'[ "$LOG_LEVEL" = "{fail_at}" ] && exit 3\n' if fail_at else ""
    script = folder / "action.sh"
    script.write_text(
        "#!/bin/sh\n"
        '. "$MESH_ENV_FILE"\n'
        f'echo "start $MESH_MODULE $MESH_NODE $LOG_LEVEL $(date +%s.%N)" >> {log}\n'
        f"sleep {seconds}\n"
        f'echo "end $MESH_MODULE $MESH_NODE $LOG_LEVEL $(date +%s.%N)" >> {log}\n' + failing + "exit 0\n"
    )
    script.chmod(0o755)
    return script


def manifest(script: Path, rollout: dict[str, object]) -> dict[str, object]:
    return {
        "module": "web",
        "env": {"LOG_LEVEL": "${config:log-level}"},
        "on_change": {"command": [str(script)], "timeout_seconds": 30},
        "rollout": rollout,
    }


def runs(log: Path, level: str) -> list[Run]:
    """Each action's run at `level`, from its own records (a start without an end: end = inf)."""
    return runs_of(log, "web", level)


def claims_in(items: Sequence[KvItem], state: str) -> set[str]:
    """The nodes whose claim stands in `state`."""
    found = set()
    for item in items:
        claim = None if item.deleted else fleet.read_claim(item.value)
        node = fleet.parse_fleet_key(item.key).node
        if claim is not None and claim.state == state and node is not None:
            found.add(node)
    return found


def starts_of(log: Path, level: str) -> list[str]:
    return [
        line.split()[2] for line in log.read_text().splitlines() if line.startswith("start ") and f" {level} " in line
    ]


@dataclass
class Fleet:
    """Watching clients, one per node, each on its own connection."""

    plans: dict[str, ClientPlan]
    reports: dict[str, Reports]

    def level(self, node: str) -> str | None:
        path = self.plans[node].materialize / "web.env"
        return sh_env(path).get("LOG_LEVEL") if path.exists() else None

    def said(self, node: str, prefix: str) -> bool:
        """Whether the node's last reconcile left `web` pending for a reason starting with `prefix`."""
        if not self.reports[node].all:
            return False
        done = self.reports[node].all[-1].modules.get("web")
        reasons = done.applied.reasons if done is not None and done.applied.state == "pending" else ()
        return any(reason.startswith(prefix) for reason in reasons)

    async def until(self, check: Callable[[], bool], what: str, bound: float = BOUND) -> None:
        await wait_for(check, what, bound, every=0.1)

    async def each_reconciled_again(self, nodes: Sequence[str], what: str) -> None:
        """Returns once each of `nodes` has finished a reconcile begun after the call: the barrier
        before "nothing more happened" is judged (an action starts within a reconcile, and a node
        let through changes in one)."""
        counts = {node: len(self.reports[node].all) for node in nodes}
        await self.until(lambda: all(len(self.reports[n].all) > counts[n] + 1 for n in nodes), what)

    async def each_reconciled_after_a_touch(self, nodes: Sequence[str], what: str) -> None:
        """`each_reconciled_again` for nodes nothing wakes: until each has, its manifest is touched,
        unchanged (the watch polls the manifests), which asks it for another reconcile."""
        counts = {node: len(self.reports[node].all) for node in nodes}

        def reconciled() -> bool:
            waiting = [n for n in nodes if len(self.reports[n].all) <= counts[n] + 1]
            for node in waiting:
                os.utime(self.plans[node].manifests / "web.json")
            return not waiting

        await self.until(reconciled, what)


def plans_of(
    tmp_path: Path, nodes: Sequence[str], document: dict[str, object], budget: int | None
) -> dict[str, ClientPlan]:
    plans = {}
    for node in nodes:
        manifests = tmp_path / node / "manifests"
        manifests.mkdir(parents=True)
        (manifests / "web.json").write_text(json.dumps(document))
        plans[node] = ClientPlan(
            node,
            manifests,
            tmp_path / node / "env",
            timedelta(seconds=2),
            lease_ttl=timedelta(seconds=6),
            rollout=RolloutPlan(claim_ttl=CLAIM_TTL, wait_limit=timedelta(seconds=20)),
        )
    return plans


@asynccontextmanager
async def watching(
    tg: TaskGroup, plans: dict[str, ClientPlan], connect_as: Callable[[str], AbstractAsyncContextManager[Bus]]
) -> AsyncIterator[Fleet]:
    fleet_ = Fleet(plans, {node: Reports(BOUND) for node in plans})
    stop = anyio.Event()

    async def one(node: str) -> None:
        async with connect_as(node) as bus:
            await watch(bus, plans[node], TIMING, stop=stop, on_report=fleet_.reports[node])

    for node in plans:
        tg.start_soon(one, node)
    try:
        yield fleet_
    finally:
        stop.set()


NODES = tuple(f"n{i:02d}" for i in range(20))


async def seeded(seat: Bus, level: str = "info", nodes: Sequence[str] = (*NODES, "n1", "n2")) -> None:
    """The config value the nodes' env files read, and placement saying each of `nodes` runs `web`:
    a node's failure pauses only a module placement says it runs, and a claim of a placed module
    counts only for a node placed on it."""
    await ensure_bucket(seat, CONFIG, BucketConfig())
    await ensure_bucket(seat, ASSIGNMENTS, BucketConfig())
    await put(seat, CONFIG, "log-level", json.dumps(level).encode())
    for node in nodes:
        await put(seat, ASSIGNMENTS, ASSIGNMENT.build(node=node, module="web"), b'{"plan":{}}')


@pytest.fixture
async def mesh20(tmp_path: Path) -> AsyncIterator[Mesh]:
    async with in_own_task(mesh_server(tmp_path / "mesh", nodes=NODES)) as mesh:
        yield mesh


def as_node(mesh: Mesh) -> Callable[[str], AbstractAsyncContextManager[Bus]]:
    return lambda node: mesh.connect(party(Kind.NODE, node))


async def test_twenty_nodes_with_a_budget_of_three_never_run_more_than_three_actions_at_once(
    mesh20: Mesh, tmp_path: Path
) -> None:
    log = tmp_path / "actions.log"
    document = manifest(action_script(tmp_path, log, seconds=0.6), {"budget": 3})
    plans = plans_of(tmp_path, NODES, document, 3)
    async with mesh20.connect(party(Kind.SEAT)) as seat, anyio.create_task_group() as tg:
        await seeded(seat)
        async with watching(tg, plans, as_node(mesh20)) as nodes:
            await nodes.until(lambda: all(nodes.level(n) == "info" for n in NODES), "every node's first env file")
            await nodes.until(lambda: len(runs(log, "info")) == len(NODES), "every first action ran")
            await put(seat, CONFIG, "log-level", b'"debug"')
            await nodes.until(lambda: all(nodes.level(n) == "debug" for n in NODES), "every node changed")
            await nodes.until(
                lambda: len([r for r in runs(log, "debug") if r.end < float("inf")]) == len(NODES), "all finished"
            )
            freed = await every_claim_deleted(seat, "web")  # a slot is freed just after its action ends
        tg.cancel_scope.cancel()
    changed = runs(log, "debug")
    assert sorted(r.node for r in changed) == sorted(NODES), "each node ran its action once for the change"
    assert most_at_once(changed) <= 3, f"{most_at_once(changed)} actions ran at once"
    assert most_at_once(runs(log, "info")) > 3, "the premise: the first env files came without a budget, at once"
    assert freed, "every slot freed"


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def mesh4(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    start = mesh_server if request.param == "static" else jwt_mesh_server
    async with in_own_task(start(tmp_path / "mesh", nodes=NODES[:4])) as mesh:
        yield mesh


async def test_attack_a_squat_by_every_field_a_node_writes_holds_no_slot_and_the_honest_nodes_finish(
    mesh4: Mesh, tmp_path: Path
) -> None:
    """Budget 1; before the change, n03, placed on no module, claims web naming the first place in
    the queue, writes a literal wildcard claim, registers needs of web and claims it again, first
    of all and for a day: the seat deletes each, and the three nodes placed on web change one at
    a time."""
    honest, squatter = NODES[:3], NODES[3]
    log = tmp_path / "actions.log"
    document = manifest(action_script(tmp_path, log, seconds=0.3), {"budget": 1})
    plans = plans_of(tmp_path, honest, document, 1)
    async with mesh4.connect(party(Kind.SEAT)) as seat, anyio.create_task_group() as tg:
        await seeded(seat, nodes=honest)
        async with watching(tg, plans, as_node(mesh4)) as nodes:
            await nodes.until(lambda: all(nodes.level(n) == "info" for n in honest), "every node's first env file")
            await _squat(mesh4, squatter)
            await put(seat, CONFIG, "log-level", b'"debug"')
            await nodes.until(
                lambda: len([r for r in runs(log, "debug") if r.end < float("inf")]) == len(honest), "all finished"
            )
            freed = await every_claim_deleted(seat, "web")
        tg.cancel_scope.cancel()
    changed = runs(log, "debug")
    assert sorted(r.node for r in changed) == sorted(honest), "each honest node ran its action once"
    assert most_at_once(changed) == 1, f"{most_at_once(changed)} actions ran at once"
    assert freed, "every claim of web deleted, the squatter's with the honest nodes'"


async def _squat(mesh: Mesh, node: str) -> None:
    """`node`'s squat of web's slot by each field it writes, through nats-py itself."""
    day = {"state": "running", "change": "x", "since": datetime.now(UTC).isoformat(), "ttl_seconds": 86400}
    hostile = await mesh.raw(party(Kind.NODE, node))
    try:
        need = b'{"placeholder":"${config:log-level}","used_in":["LOG_LEVEL"]}'
        first = json.dumps(day | {"queued": 1}).encode()
        await hostile.request(fleet.FLEET.subject(fleet.claim_key("web", node)), first, timeout=2)
        await hostile.request(fleet.FLEET.subject(f"claim.*.{node}"), json.dumps(day).encode(), timeout=2)
        await hostile.request(NEEDS.subject(f"{node}.web.config.log-level"), need, timeout=2)
        await hostile.request(fleet.FLEET.subject(fleet.claim_key("web", node)), json.dumps(day).encode(), timeout=2)
    finally:
        await hostile.close()


async def every_claim_deleted(seat: Bus, module: str, within: float = 30.0) -> bool:
    """Whether every claim of `module` is deleted within `within` seconds (a bound to fail, not a speed)."""
    with anyio.move_on_after(within):
        while not all(item.deleted for item in await get_last_many(seat, fleet.FLEET, fleet.claims_of(module))):
            await anyio.sleep(0.1)
        return True
    return False


async def test_failed_changes_keep_their_slots_and_the_seats_hold_stops_the_nodes_that_have_not_changed(
    mesh20: Mesh, tmp_path: Path
) -> None:
    """Every node's action fails for the new value: the first two admitted (budget 2) fail, keep
    their slots, and the seat pauses the module's rollout; nobody else changes."""
    nodes_ = NODES[:8]
    log = tmp_path / "actions.log"
    document = manifest(action_script(tmp_path, log, seconds=0.3, fail_at="debug"), {"budget": 2})
    plans = plans_of(tmp_path, nodes_, document, 2)
    async with mesh20.connect(party(Kind.SEAT)) as seat, anyio.create_task_group() as tg:
        await seeded(seat)
        async with watching(tg, plans, as_node(mesh20)) as nodes:
            await nodes.until(lambda: all(nodes.level(n) == "info" for n in nodes_), "every node's first env file")
            await put(seat, CONFIG, "log-level", b'"debug"')
            hold = await _until_held(seat, "web")
            await nodes.until(
                lambda: all(nodes.said(n, "rollout: paused") for n in nodes_ if nodes.level(n) == "info"),
                "the nodes not changed say the rollout is paused",
            )
            await nodes.each_reconciled_again(nodes_, "each node reconciled again while held")
            failed = claims_in(await get_last_many(seat, fleet.FLEET, fleet.claims_of("web")), "failed")
            changed = sorted(n for n in nodes_ if nodes.level(n) == "debug")
        tg.cancel_scope.cancel()
    assert 1 <= len(changed) <= 2, f"at most the budget's worth changed: {changed}"
    assert sorted(failed) == changed, "each failed change keeps its claim, failed"
    assert hold.state == "paused" and hold.by == "seat" and hold.node in changed
    assert sorted(starts_of(log, "debug")) == changed, "no other node ran its action"


async def _until_held(bus: Bus, module: str) -> fleet.Hold:
    with anyio.fail_after(BOUND):
        while True:
            found = await get_direct(bus, fleet.FLEET, fleet.hold_key(module))
            hold = fleet.read_hold(found.value, found.stored_at) if found is not None and not found.deleted else None
            if hold is not None:
                return hold
            await anyio.sleep(0.2)


@pytest.mark.slow
async def test_nats_server_killed_mid_rollout_no_action_runs_twice_and_the_rollout_completes(tmp_path: Path) -> None:
    nodes_ = tuple(f"r{i}" for i in range(8))
    log = tmp_path / "actions.log"
    document = manifest(action_script(tmp_path, log, seconds=1.0), {"budget": 2})
    plans = plans_of(tmp_path, nodes_, document, 2)
    async with restartable_nats(tmp_path / "nats") as server, anyio.create_task_group() as tg:
        options = BusOptions(servers=(server.url,), name="test", reconnect_wait=timedelta(seconds=0.2))
        tg.start_soon(_serve_seat, server.url)
        async with connect(options) as seat:
            await _until_fleet_bucket(seat)
            await seeded(seat, nodes=nodes_)

            def as_plain(node: str) -> AbstractAsyncContextManager[Bus]:
                return connect(BusOptions(servers=(server.url,), name=node, reconnect_wait=timedelta(seconds=0.2)))

            async with watching(tg, plans, as_plain) as nodes:
                await nodes.until(lambda: all(nodes.level(n) == "info" for n in nodes_), "every node's first env file")
                await put(seat, CONFIG, "log-level", b'"debug"')
                await nodes.until(lambda: len(runs(log, "debug")) >= 3, "the rollout is under way")
                await server.kill()
                started_before = len(starts_of(log, "debug"))
                await anyio.sleep(2)  # the outage itself: the nodes' reconnects and renewals meet a dead server
                await server.start()
                back = anyio.current_time()
                await nodes.until(lambda: all(nodes.level(n) == "debug" for n in nodes_), "every node changed")
                await nodes.until(
                    lambda: len([r for r in runs(log, "debug") if r.end < float("inf")]) == len(nodes_), "all finished"
                )
                completed_after = anyio.current_time() - back
                await later_value_everywhere(seat, nodes, nodes_, log)
        tg.cancel_scope.cancel()
    print(
        f"nats-server killed with {started_before} of {len(nodes_)} actions started, back after 2 s: "
        f"the rollout completed {completed_after:.1f} s later"
    )
    assert started_before < len(nodes_), "the premise: killed mid-rollout"
    started = starts_of(log, "debug")
    assert sorted(started) == sorted(nodes_), f"each node ran its action once for the change: {sorted(started)}"
    assert most_at_once(runs(log, "debug")) <= 2


async def later_value_everywhere(seat: Bus, nodes: Fleet, names: Sequence[str], log: Path) -> None:
    """The barrier before "no action ran again" is judged: a later value's action started on every
    node. A node applies changes in order, so a run for an earlier value, were there one, would
    have started before its run for this one."""
    await put(seat, CONFIG, "log-level", b'"warning"')
    await nodes.until(lambda: sorted(starts_of(log, "warning")) == sorted(names), "a later value's action everywhere")


async def _serve_seat(url: str) -> None:
    options = BusOptions(servers=(url,), name="seat", reconnect_wait=timedelta(seconds=0.2))
    async with serving(url, bus_options=options):
        await anyio.sleep_forever()


async def _until_fleet_bucket(bus: Bus) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                await get_last_many(bus, fleet.FLEET, fleet.claims_of("web"))
            except BusError:  # the seat is still making its buckets
                await anyio.sleep(0.2)
            else:
                return


async def test_an_abort_rolls_back_where_the_module_allows_and_a_resume_lets_the_change_through(
    mesh20: Mesh, tmp_path: Path
) -> None:
    rolling, keeping = NODES[:3], NODES[3:6]
    log = tmp_path / "actions.log"
    script = action_script(tmp_path, log, seconds=0.1)
    plans = {
        **plans_of(tmp_path, rolling, manifest(script, {"budget": 6, "rollback": True}), 6),
        **plans_of(tmp_path, keeping, manifest(script, {"budget": 6}), 6),
    }
    everyone = (*rolling, *keeping)
    async with mesh20.connect(party(Kind.SEAT)) as seat, anyio.create_task_group() as tg:
        await seeded(seat)
        async with watching(tg, plans, as_node(mesh20)) as nodes:
            await nodes.until(lambda: all(nodes.level(n) == "info" for n in everyone), "every node's first env file")
            await put(seat, CONFIG, "log-level", b'"debug"')
            await nodes.until(lambda: all(nodes.level(n) == "debug" for n in everyone), "every node changed")
            hold = fleet.Hold(state="aborted", since=datetime.now(UTC), by="ops", reason="bad value")
            revision = await put(seat, fleet.FLEET, fleet.hold_key("web"), to_json(hold))
            await nodes.until(lambda: all(nodes.level(n) == "info" for n in rolling), "rolled back")
            await nodes.until(lambda: all(nodes.said(n, "rollout: aborted") for n in rolling), "said aborted")
            await nodes.each_reconciled_after_a_touch(everyone, "each node reconciled after the abort")
            kept = {n: nodes.level(n) for n in keeping}
            info_runs = sorted(starts_of(log, "info"))
            await delete(seat, fleet.FLEET, fleet.hold_key("web"), last=revision)
            await nodes.until(lambda: all(nodes.level(n) == "debug" for n in everyone), "resumed: changed again")
            # an action starts just after its env file is written: each, once more, or a bound to fail
            twice = sorted([*everyone, *rolling])
            await nodes.until(lambda: len(starts_of(log, "debug")) >= len(twice), "the actions after the resume")
            await later_value_everywhere(seat, nodes, everyone, log)
        tg.cancel_scope.cancel()
    assert kept == dict.fromkeys(keeping, "debug"), "a module without rollback keeps its change"
    assert info_runs == sorted([*everyone, *rolling]), "each rolled-back node ran its action again for the old values"
    assert sorted(starts_of(log, "debug")) == twice, "after the resume, once more each"


async def test_on_either_kind_of_accounts_a_failed_change_holds_the_other_node_back(mesh: Mesh, tmp_path: Path) -> None:
    """The mesh's two nodes (n1, n2) on their generated grants, static and JWT: budget 1, the new
    value fails every action; one node changes and fails, the seat pauses, the other stays."""
    pair = ("n1", "n2")
    log = tmp_path / "actions.log"
    document = manifest(action_script(tmp_path, log, seconds=0.2, fail_at="debug"), {"budget": 1})
    plans = plans_of(tmp_path, pair, document, 1)
    async with mesh.connect(party(Kind.SEAT)) as seat, anyio.create_task_group() as tg:
        await seeded(seat)
        async with watching(tg, plans, as_node(mesh)) as nodes:
            await nodes.until(lambda: all(nodes.level(n) == "info" for n in pair), "both first env files")
            await put(seat, CONFIG, "log-level", b'"debug"')
            hold = await _until_held(seat, "web")
            await nodes.until(lambda: any(nodes.said(n, "rollout: paused") for n in pair), "the other is paused")
            changed = [n for n in pair if nodes.level(n) == "debug"]
        tg.cancel_scope.cancel()
    assert len(changed) == 1 and hold.node == changed[0]
    assert starts_of(log, "debug") == changed
