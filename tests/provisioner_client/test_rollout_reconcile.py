"""Rollouts through a whole reconcile (`provisioner_client.reconcile` with `provisioner_client.rollout`),
on a real nats-server with the seat in-process: a health gate that fails, a quiet period, a change
admitted under a claim whose action runs once even when the client stops mid-action, and a node
not admitted keeping its env file."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from mesh_dev.standins import CONFIG, StandIns
from provisioner.seat.rollouts import Placement
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.rollout import RolloutPlan
from provisioner_client.rollout.gate import RolloutState
from registry.contract import buckets, fleet, to_json
from registry.wire import Bus, get_direct, put
from tests.helpers import NODE, sh_env


def _plan(tmp_path: Path, document: dict[str, Any]) -> ClientPlan:
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "web.json").write_text(
        json.dumps({"module": "web", "env": {"LEVEL": "${config:log-level}"}, **document})
    )
    rollout = RolloutPlan(claim_ttl=timedelta(seconds=30))
    return ClientPlan(NODE, manifests, tmp_path / "env", timedelta(seconds=2), rollout=rollout)


def _counter(tmp_path: Path) -> tuple[list[str], Path]:
    runs = tmp_path / "runs"
    return ["sh", "-c", f'echo "$MESH_MODULE" >> {runs}'], runs


def _count(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


async def test_a_failing_health_check_fails_the_change_and_keeps_its_claim(
    domains: StandIns, provisioned: Bus, tmp_path: Path
) -> None:
    command, runs = _counter(tmp_path)
    health = ["sh", "-c", '. "$MESH_ENV_FILE"; [ "$LEVEL" != "debug" ]']
    plan = _plan(tmp_path, {"on_change": {"command": command, "health": {"command": health}}, "rollout": {"budget": 2}})
    assert (await reconcile(provisioned, plan)).ok
    await put(provisioned, CONFIG, "log-level", b'"debug"')
    report = await reconcile(provisioned, plan)
    applied = report.modules["web"].applied
    assert applied.state == "applied" and sh_env(plan.materialize / "web.env")["LEVEL"] == "debug"
    assert applied.reasons and applied.reasons[0].startswith("rollout: the health check")
    assert applied.action is not None and applied.action.ok, "the action itself succeeded"
    stored = await get_direct(provisioned, fleet.FLEET, fleet.claim_key("web", NODE))
    assert stored is not None and (claim := fleet.read_claim(stored.value)) is not None
    assert claim.state == "failed" and "health check" in claim.reason
    await reconcile(provisioned, plan)
    assert _count(runs) == 2, "the failed change's action is not run again"


async def test_a_quiet_period_holds_a_change_then_applies_it(
    domains: StandIns, provisioned: Bus, tmp_path: Path
) -> None:
    command, runs = _counter(tmp_path)
    plan = _plan(tmp_path, {"on_change": {"command": command}, "rollout": {"wait_seconds": 1.5}})
    assert (await reconcile(provisioned, plan)).ok, "the first env file waits for nothing"
    await put(provisioned, CONFIG, "log-level", b'"debug"')
    held = await reconcile(provisioned, plan)
    applied = held.modules["web"].applied
    assert applied.state == "pending"
    assert applied.reasons[0].startswith("rollout: waiting for a slot: splay and quiet period")
    assert held.rollout.wake_after is not None and 0 < held.rollout.wake_after <= 1.5
    assert sh_env(plan.materialize / "web.env")["LEVEL"] == "info", "its env file kept"
    await anyio.sleep(held.rollout.wake_after + 0.1)
    done = await reconcile(provisioned, plan)
    assert done.modules["web"].applied.state == "applied"
    assert sh_env(plan.materialize / "web.env")["LEVEL"] == "debug"
    assert _count(runs) == 2


async def test_a_node_not_admitted_keeps_its_env_file_and_says_why(
    domains: StandIns, provisioned: Bus, tmp_path: Path
) -> None:
    command, runs = _counter(tmp_path)
    plan = _plan(tmp_path, {"on_change": {"command": command}, "rollout": {"budget": 1}})
    assert (await reconcile(provisioned, plan)).ok
    other = fleet.Claim(state="running", change="x", since=datetime.now(UTC), ttl_seconds=60)
    placement = Placement.of_catalogue().bucket
    assert placement is not None
    await put(provisioned, placement, "another-node.web", b'{"plan":{}}')  # it runs web: its claim counts
    await put(provisioned, fleet.FLEET, fleet.claim_key("web", "another-node"), to_json(other))
    await put(provisioned, CONFIG, "log-level", b'"debug"')
    report = await reconcile(provisioned, plan)
    applied = report.modules["web"].applied
    assert applied.state == "pending"
    assert applied.reasons[0].startswith("rollout: waiting for a slot (budget 1): 1 ahead in the queue")
    assert sh_env(plan.materialize / "web.env")["LEVEL"] == "info"
    assert report.rollout.waiting == {"web"}
    assert _count(runs) == 1


async def test_an_action_the_client_stopped_in_is_never_run_again_for_that_change(
    domains: StandIns, provisioned: Bus, tmp_path: Path
) -> None:
    command, runs = _counter(tmp_path)
    plan = _plan(tmp_path, {"on_change": {"command": command}, "rollout": {"budget": 1}})
    first = await reconcile(provisioned, plan)
    await put(provisioned, CONFIG, "log-level", b'"debug"')
    assert (await reconcile(provisioned, plan)).ok
    assert _count(runs) == 2
    # As a client killed while the action ran leaves it: the env file written, the action started
    # with no outcome, its claim standing, the applied record not yet written.
    state = RolloutState(plan.materialize)
    record = state.get("web")
    assert record is not None and record.started
    state.put("web", record.model_copy(update={"stage": "running", "action": None, "claimed": True}))
    key = buckets.APPLIED.shape.build(node=NODE, module="web")
    await put(provisioned, buckets.APPLIED, key, to_json(first.modules["web"].applied))
    after = await reconcile(provisioned, plan)
    action = after.modules["web"].applied.action
    assert _count(runs) == 2, "not run again for the change it had started for"
    assert action is not None and action.outcome == "failed", "an interrupted action counts as failed"
    stored = await get_direct(provisioned, fleet.FLEET, fleet.claim_key("web", NODE))
    assert stored is not None and (claim := fleet.read_claim(stored.value)) is not None
    assert claim.state == "failed", "its slot kept, as a failure's"


async def test_a_budgeted_module_without_an_action_frees_its_slot_once_its_file_is_written(
    domains: StandIns, provisioned: Bus, tmp_path: Path
) -> None:
    plan = _plan(tmp_path, {"rollout": {"budget": 1}})
    assert (await reconcile(provisioned, plan)).ok
    await put(provisioned, CONFIG, "log-level", b'"debug"')
    report = await reconcile(provisioned, plan)
    assert report.ok
    assert report.modules["web"].applied.action is None
    assert sh_env(plan.materialize / "web.env")["LEVEL"] == "debug"
    stored = await get_direct(provisioned, fleet.FLEET, fleet.claim_key("web", NODE))
    assert stored is not None and stored.deleted, "the slot freed"
    assert report.rollout.ran_under_claim == ["web"]
