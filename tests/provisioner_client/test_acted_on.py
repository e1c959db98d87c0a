"""A change action is judged by the node's own record of what it last ran on, never by the bus's
applied record alone: a nats-server whose store lost its last writes (a power failure before its
sync) serves an older applied record, and taken as the truth that record would run an action a
second time on the same file, or skip one a change of the file needs. Judged by the data: how
many times the action ran, and the applied record the bus holds afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.state import records
from registry.contract import AppliedValue, buckets, read_json
from registry.wire import Bus, get_direct, put
from tests.helpers import NODE

KEY = f"{NODE}.svc"


def counting_module(plan: ClientPlan, counter: Path) -> None:
    manifest = {
        "module": "svc",
        "env": {"LEVEL": "${config:log-level}"},
        "on_change": {"command": ["sh", "-c", f"echo ran >> {counter}"], "timeout_seconds": 5},
    }
    (plan.manifests / "svc.json").write_text(json.dumps(manifest))


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines())


async def applied_now(bus: Bus) -> AppliedValue:
    item = await get_direct(bus, buckets.APPLIED, KEY)
    assert item is not None
    return AppliedValue.model_validate(read_json(item.value))


async def test_an_older_applied_record_on_the_bus_neither_runs_an_action_again_nor_skips_one(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    counting_module(plan, counter)
    await reconcile(bus, plan)
    first = await get_direct(bus, buckets.APPLIED, KEY)
    assert first is not None and runs(counter) == 1
    await put(bus, domains.config, "log-level", b'"debug"')
    await reconcile(bus, plan)
    acted = (await applied_now(bus)).action
    assert acted is not None and runs(counter) == 2

    await put(bus, buckets.APPLIED, KEY, first.value)  # the bus lost the second record: the first is back
    again = await reconcile(bus, plan)
    assert runs(counter) == 2, "the action ran a second time on the file it had already run on"
    assert "svc" not in again.actions_run
    assert (await applied_now(bus)).action == acted  # the record put back as the node acted

    await put(bus, buckets.APPLIED, KEY, first.value)  # lost again, and the file goes back to the first content
    await put(bus, domains.config, "log-level", b'"info"')
    back = await reconcile(bus, plan)
    assert runs(counter) == 3, "the action was skipped: the service kept the configuration of the lost change"
    assert "svc" in back.actions_run
    restored = (await applied_now(bus)).action
    assert restored is not None and restored.digest == back.modules["svc"].applied.digest


async def test_a_node_upgraded_without_a_record_of_its_actions_judges_by_the_applied_record(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    counting_module(plan, counter)
    await reconcile(bus, plan)
    records.ACTIONS.remove(plan.materialize)  # as a client before the record left its folder
    again = await reconcile(bus, plan)
    assert runs(counter) == 1 and "svc" not in again.actions_run
