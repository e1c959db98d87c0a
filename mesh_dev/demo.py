"""The demo: the other domains' stand-ins, a client over `deploy/examples/`, and a summary.

`run_demo(nats_url, state_dir)` expects the provisioner server on that bus (it writes the
registry); `mesh-provisioner-dev` starts both and hands it the URL. It starts the stand-ins
(`mesh_dev.standins`), copies the example manifests to `<state_dir>/manifests`,
reconciles node `node-1` into `<state_dir>/env`, prints what was needed and applied, then keeps
watching until cancelled: edit a manifest there, or a value in `mesh-config_values`, and watch
the env file follow.
"""

from __future__ import annotations

import json
import logging
import shutil
from datetime import timedelta
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from mesh_dev.standins import stand_ins
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.watching import WatchTiming, watch
from registry import buckets
from registry.bus import Bus, BusOptions, connect
from registry.errors import BusError
from registry.kv import bucket_config, snapshot

log = logging.getLogger(__name__)

NODE = "node-1"
EXAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "examples"
_TIMING = WatchTiming(refresh=timedelta(seconds=30), poll=timedelta(seconds=1))


async def run_demo(
    nats_url: str, state_dir: Path, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Starts the stand-ins, reconciles the examples, prints a summary, then watches until cancelled.

    Ready (for `TaskGroup.start`) once the summary is printed."""
    plan = ClientPlan(node=NODE, manifests=state_dir / "manifests", materialize=state_dir / "env")
    _copy_examples(plan.manifests)
    async with connect(BusOptions(servers=(nats_url,), name="mesh-provisioner demo")) as bus:
        await _wait_for_registry(bus)
        async with stand_ins(bus, NODE):
            report = await reconcile(bus, plan)
            print(await describe(bus, plan, report, nats_url), flush=True)
            task_status.started()
            await watch(bus, plan, _TIMING, on_report=_print_changes)


def _copy_examples(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for example in sorted(EXAMPLES.glob("*.json")):
        shutil.copyfile(example, folder / example.name)


async def _wait_for_registry(bus: Bus) -> None:
    """The server writes the registry at start; wait for it rather than fail."""
    warned = False
    while True:
        try:
            existing = [await bucket_config(bus, bucket) for bucket in buckets.OWN]
            if all(existing) and await snapshot(bus, buckets.REGISTRY):
                return
        except BusError as err:  # the server may still be creating its buckets
            log.debug("registry not ready: %s", err)
        if not warned:
            log.info("waiting for the provisioner server to write %s", buckets.REGISTRY.name)
            warned = True
        await anyio.sleep(0.5)


async def describe(bus: Bus, plan: ClientPlan, report: Report, nats_url: str) -> str:
    needs = await snapshot(bus, buckets.NEEDS, buckets.NEEDS.shape.filters(node=plan.node))
    lines = [f"== node {plan.node}: manifests in {plan.manifests}", "", "needed (mesh-provisioner_needs):"]
    lines.extend(f"  {item.key}  {json.loads(item.value)['placeholder']}" for item in needs)
    lines += ["", "applied (mesh-provisioner_applied) and env files:", report.summary(), ""]
    lines.append(f"env files are in {plan.materialize} (mode 0600); watching for changes, Ctrl-C stops")
    lines.append(f"edit a manifest in {plan.manifests} and the env files follow; from another terminal:")
    lines.append(
        f"  mesh-provisioner-client status --node {plan.node} --materialize {plan.materialize} --nats-url {nats_url}"
    )
    return "\n".join(lines)


def _print_changes(report: Report) -> None:
    written = sorted(m for m, r in report.modules.items() if r.written)
    if written or report.removed or any(r.applied.state == "pending" for r in report.modules.values()):
        print(report.summary(), flush=True)
