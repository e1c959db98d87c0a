"""The change action: once per change, with a timeout, its outcome in applied."""

from __future__ import annotations

import json

import pytest

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.wire import Bus, put


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        pytest.param(["true"], ("succeeded", 0), id="a command that succeeds"),
        pytest.param(["sh", "-c", "exit 3"], ("failed", 3), id="a command that fails"),
        pytest.param(["sleep", "30"], ("timed out", None), id="a command that overruns its timeout"),
        pytest.param(["/nonexistent/restart"], ("could not start", None), id="a command that does not exist"),
    ],
)
async def test_the_action_runs_once_per_change_and_its_outcome_is_recorded(
    domains: StandIns, bus: Bus, plan: ClientPlan, command: list[str], expected: tuple[str, int | None]
) -> None:
    manifest = {
        "module": "svc",
        "env": {"LEVEL": "${config:log-level}"},
        "on_change": {"command": command, "timeout_seconds": 1},
    }
    (plan.manifests / "svc.json").write_text(json.dumps(manifest))
    first = await reconcile(bus, plan)
    action = first.modules["svc"].action
    assert action is not None
    assert (action.outcome, action.exit_code) == expected
    assert action.digest == first.modules["svc"].applied.digest
    assert first.ok == (expected[0] == "succeeded")
    again = await reconcile(bus, plan)
    assert "svc" not in again.actions_run
    assert again.modules["svc"].action == action
    await put(bus, domains.config, "log-level", b'"debug"')
    changed = await reconcile(bus, plan)
    assert "svc" in changed.actions_run
