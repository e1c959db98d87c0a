"""The health gate: a module's `on_change.health` command, run after its change action.

It runs as the action does (`provisioner_client.materializing.action`: no shell, a session of its
own, the same minimal environment, killed at its timeout). A change succeeded only when the action
and the health command both exited 0; only then is the node's rollout slot freed.
"""

from __future__ import annotations

from collections.abc import Mapping

from provisioner_client.materializing.action import run_action
from provisioner_client.resolving.manifest import HealthCheck


async def healthy(module: str, check: HealthCheck, digest: str, *, env: Mapping[str, str]) -> str | None:
    """None when the health command exits 0 in time; else why not, in a few words."""
    record = await run_action(module, check, digest, env=env, what="health check")
    if record.ok:
        return None
    how = f"exit code {record.exit_code}" if record.exit_code is not None else record.outcome
    return f"the health check {' '.join(check.command)[:200]} failed ({how})"
