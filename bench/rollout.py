"""`python -m bench --rollout`: a shared config change rolled out to a fleet of watching clients with
a budget, against the same change without one.

A mesh of static accounts for `nodes` nodes (50), the seat a process of its own. Every node
declares two modules reading a config value each (`mesh-config_values`): `free` (no budget) and
`budgeted` (`"rollout": {"budget": 5}`); each module's change action records its own start and end
(module, node, value, time) in one file, and takes `action_seconds`. The nodes' clients run their
watch code, `per_process` (10) of them in each Python process (`python -m bench.rollout --child`),
each on its own connection and node key, as the real client does.

Once every node's first env files are written (those need no slot), the value `free` reads is
changed, and when every node ran its action for it, the value `budgeted` reads. For each: how long
from the write to the last action's end, and the most actions running at once, from the actions'
own records (target: at most the budget with one, and every node finished).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

from bench.cases import Report
from bench.harness import python_process
from bench.mesh import SEAT, Access, bench_mesh, child_environment, node
from mesh_dev.standins import CONFIG
from provisioner.seat.buckets import ensure_bucket
from provisioner_client.reconcile import ClientPlan
from provisioner_client.rollout import RolloutPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.wire import BucketConfig, Bus, connect, put

MODULES = {"free": "free-level", "budgeted": "budgeted-level"}  # module to the config value it reads
TIMING = WatchTiming(debounce=timedelta(seconds=0.2))


@dataclass(frozen=True)
class RolloutSizes:
    nodes: int = 50
    per_process: int = 10
    budget: int = 5
    action_seconds: float = 1.0
    claim_ttl: float = 30.0
    within: float = 600.0  # seconds a round may take before the bench gives up on it

    @staticmethod
    def quick() -> RolloutSizes:
        return RolloutSizes(nodes=4, per_process=2, budget=1, action_seconds=0.2, within=120.0)


@dataclass(frozen=True)
class Run:
    module: str
    node: str
    value: str
    start: float
    end: float


def runs_of(log: Path, module: str, value: str) -> list[Run]:
    """The runs of `module`'s action for `value`, as they recorded themselves (unfinished: end inf)."""
    starts: dict[str, float] = {}
    found = []
    for line in log.read_text().splitlines() if log.exists() else []:
        what, at_module, at_node, at_value, when = line.split()
        if at_module != module or at_value != value:
            continue
        if what == "start":
            starts[at_node] = float(when)
        else:
            found.append(Run(module, at_node, value, starts.pop(at_node, float(when)), float(when)))
    return found + [Run(module, n, value, start, float("inf")) for n, start in starts.items()]


def most_at_once(runs: Sequence[Run]) -> int:
    events = sorted([(r.start, 1) for r in runs] + [(r.end, -1) for r in runs], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def node_names(count: int) -> list[str]:
    return [f"r{i:03d}" for i in range(count)]


def write_manifests(state: Path, names: Sequence[str], sizes: RolloutSizes, log: Path) -> None:
    script = state / "action.sh"
    script.write_text(
        "#!/bin/sh\n"
        '. "$MESH_ENV_FILE"\n'
        f'echo "start $MESH_MODULE $MESH_NODE $LEVEL $(date +%s.%N)" >> {log}\n'
        f"sleep {sizes.action_seconds}\n"
        f'echo "end $MESH_MODULE $MESH_NODE $LEVEL $(date +%s.%N)" >> {log}\n'
    )
    script.chmod(0o755)
    for name in names:
        manifests = state / "nodes" / name / "manifests"
        manifests.mkdir(parents=True, exist_ok=True)
        for module, value in MODULES.items():
            document: dict[str, Any] = {
                "module": module,
                "env": {"LEVEL": f"${{config:{value}}}"},
                "on_change": {"command": [str(script)], "timeout_seconds": 60},
            }
            if module == "budgeted":
                document["rollout"] = {"budget": sizes.budget}
            (manifests / f"{module}.json").write_text(json.dumps(document))


def plan_of(state: Path, name: str, claim_ttl: float) -> ClientPlan:
    folder = state / "nodes" / name
    rollout = RolloutPlan(claim_ttl=timedelta(seconds=claim_ttl))
    return ClientPlan(name, folder / "manifests", folder / "env", timedelta(seconds=5), rollout=rollout)


def applied_everywhere(state: Path, names: Sequence[str], value_of: dict[str, str]) -> bool:
    """Whether every node's env file of each module in `value_of` holds that value."""
    for name in names:
        for module, value in value_of.items():
            path = state / "nodes" / name / "env" / f"{module}.env"
            if not path.exists() or f'LEVEL="{value}"' not in path.read_text():
                return False
    return True


@dataclass
class Round:
    module: str
    seconds: float
    at_once: int
    finished: int


async def run_rollout(state: Path, sizes: RolloutSizes) -> tuple[Report, dict[str, Any]]:
    names = node_names(sizes.nodes)
    log = state / "actions.log"
    write_manifests(state, names, sizes, log)
    async with bench_mesh(state / "mesh", nodes=names) as mesh:
        access = mesh.access
        async with connect(access.options(SEAT)) as seat:
            await ensure_bucket(seat, CONFIG, BucketConfig())
            for value in MODULES.values():
                await put(seat, CONFIG, value, b'"v0"')
            async with anyio.create_task_group() as tg:
                for first in range(0, len(names), sizes.per_process):
                    group = names[first : first + sizes.per_process]
                    await tg.start(_clients, access, state, group, sizes)
                with anyio.fail_after(sizes.within):
                    while not applied_everywhere(state, names, dict.fromkeys(MODULES, "v0")):
                        await anyio.sleep(0.2)
                print(f"{len(names)} nodes watching, {sizes.per_process} a process; first env files written")
                rounds = [
                    await _round(seat, names, log, "free", sizes),
                    await _round(seat, names, log, "budgeted", sizes),
                ]
                tg.cancel_scope.cancel()
    return report_of(rounds, sizes), {"rounds": [r.__dict__ for r in rounds], "sizes": sizes.__dict__}


async def _round(seat: Bus, names: Sequence[str], log: Path, module: str, sizes: RolloutSizes) -> Round:
    started = time.time()
    await put(seat, CONFIG, MODULES[module], b'"v1"')
    with anyio.fail_after(sizes.within):
        while len([r for r in runs_of(log, module, "v1") if r.end < float("inf")]) < len(names):
            await anyio.sleep(0.1)
    runs = runs_of(log, module, "v1")
    done = Round(module, max(r.end for r in runs) - started, most_at_once(runs), len({r.node for r in runs}))
    print(f"  {module}: {done.finished} nodes in {done.seconds:.1f} s, at most {done.at_once} actions at once")
    return done


async def _clients(access: Access, state: Path, group: Sequence[str], sizes: RolloutSizes, *, task_status: Any) -> None:
    """One child process running the watch code of the nodes of `group`, until cancelled."""
    args = [
        *("-m", "bench.rollout", "--child", "--state", str(state), "--ttl", str(sizes.claim_ttl)),
        *access.argv(),
        *("--nodes", *group),
    ]

    async def ready() -> bool:
        return True

    async with python_process(args, ready=ready, log=state / "clients.log", env=child_environment()):
        task_status.started()
        await anyio.sleep_forever()


def report_of(rounds: Sequence[Round], sizes: RolloutSizes) -> Report:
    report = Report()
    free, budgeted = rounds
    print(f"\n{sizes.nodes} nodes, a shared config change, each action {sizes.action_seconds:g} s")
    report.add("nodes", sizes.nodes, "nodes")
    report.add("budget", sizes.budget, "nodes")
    report.add("without a budget: total time", free.seconds, "s")
    report.add("without a budget: most actions at once", free.at_once, "actions")
    report.add(
        "without a budget: nodes finished",
        free.finished,
        "nodes",
        target=f"= {sizes.nodes}",
        met=free.finished == sizes.nodes,
    )
    report.add("with the budget: total time", budgeted.seconds, "s")
    ok = budgeted.at_once <= sizes.budget
    report.add(
        "with the budget: most actions at once", budgeted.at_once, "actions", target=f"<= {sizes.budget}", met=ok
    )
    done = budgeted.finished == sizes.nodes
    report.add("with the budget: nodes finished", budgeted.finished, "nodes", target=f"= {sizes.nodes}", met=done)
    return report


async def _child(access: Access, state: Path, names: Sequence[str], claim_ttl: float) -> None:
    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(_one_client, access, state, name, claim_ttl)


async def _one_client(access: Access, state: Path, name: str, claim_ttl: float) -> None:
    async with connect(access.options(node(name))) as bus:
        await watch(bus, plan_of(state, name, claim_ttl), TIMING)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rollout", description="a process of watching clients")
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--nodes", nargs="+", required=True)
    Access.add_arguments(parser)
    args = parser.parse_args()
    anyio.run(_child, Access.of(args), args.state, args.nodes, args.ttl)


if __name__ == "__main__":
    main()
