"""`python -m bench.register URL FIRST_NODE NODES RATE [KEYS]`: nodes registering their needs as node
clients do, in a process of their own; with KEYS, each connects with its own seed
(`KEYS/node-<node>.nk`, as `mesh-provisioner grants` writes them), else on a single-account bus.

Each node arrives at a random moment (uniform, seeded) within NODES / RATE seconds, so about RATE
nodes a second, and then does on the bus what the client's first reconcile does (its own `OwnKeys`,
nothing remembered), on a connection of its own: takes its lease; finds its needs, collect and
applied (a stamp, then asked of the verb) and reads the registry, all at once; converges its 100
needs (10 modules x 10 placeholders) with conditional writes, 64 in flight, then its 10 modules'
applied records; releases its lease. A node that arrives while others are still registering
registers beside them: nothing waits for a free slot.

Prints one line of JSON at the end: how long the nodes took, how many registered at once at most,
and the p50 and p99 of one node's registration."""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import anyio

from bench.cases import need_items
from bench.harness import Latency
from provisioner_client.resolving.own import OwnKeys
from provisioner_client.resolving.resolve import read_registry
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.watch.holding import holding
from registry.contract import AppliedValue, buckets, to_json
from registry.wire import Bus, BusOptions, Changes, connect

NODE_KEYS = 100
MODULES = 10  # need_items: 10 placeholders a module
LEASE_TTL = timedelta(seconds=60)
SEED = 10


@dataclass
class Progress:
    registering: int = 0
    most_at_once: int = 0
    seconds: list[float] = field(default_factory=list)

    def summary(self, started: float) -> dict[str, float]:
        each = Latency.of(self.seconds)
        return {
            "nodes": len(self.seconds),
            "seconds": time.perf_counter() - started,
            "most_at_once": self.most_at_once,
            "node_p50_ms": each.p50_ms,
            "node_p99_ms": each.p99_ms,
        }


async def register_node(bus: Bus, node: int) -> None:
    """One node's first reconcile, as far as the bus sees it (the client's own `OwnKeys`, nothing
    remembered): its lease held while its needs, collect and applied are found (a stamp, then asked
    of the verb) and the registry read, all at once; its needs (and empty collect) converged, then
    its modules' applied records."""
    name = f"n{node:05d}"
    written, modules = await reconcile_once(bus, OwnKeys(bus, NodeScope(name)), node)
    assert len(written.written) == NODE_KEYS and len(modules.written) == MODULES, (written.summary(), modules.summary())


async def reconcile_once(bus: Bus, own: OwnKeys, node: int) -> tuple[Changes, Changes]:
    """A reconcile of node `node` as the bus sees it, with what `own` remembers (nothing, at a
    first reconcile): what it changed in needs, and in applied."""
    name = own.scope.node
    needs = dict(need_items(node, NODE_KEYS, NODE_KEYS))
    async with holding(bus, name, LEASE_TTL):
        async with anyio.create_task_group() as tg:
            for bucket, desired in ((buckets.NEEDS, needs), (buckets.COLLECT, {}), (buckets.APPLIED, None)):
                tg.start_soon(own.find, bucket, desired)
            tg.start_soon(read_registry, bus)
        written = await own.converge(buckets.NEEDS, needs)
        await own.converge(buckets.COLLECT, {})
        modules = await own.converge(buckets.APPLIED, applied_of(name))
    return written, modules


def applied_of(node: str) -> dict[str, bytes]:
    """Each module's applied record, as a first reconcile writes it for a module it rendered."""
    record = to_json(AppliedValue(state="applied", digest="0" * 64, file="/run/mesh-provisioner/env/m.env"))
    return {buckets.APPLIED.shape.build(node=node, module=f"m{module}"): record for module in range(MODULES)}


async def arrive(url: str, node: int, at: float, progress: Progress, keys: Path | None = None) -> None:
    await anyio.sleep_until(at)
    started = time.perf_counter()
    progress.registering += 1
    progress.most_at_once = max(progress.most_at_once, progress.registering)
    seed = keys / f"node-n{node:05d}.nk" if keys is not None else None
    options = BusOptions(
        servers=(url,), name=f"bench-node-{node}", request_timeout=timedelta(seconds=30), nkey_seed=seed
    )
    try:
        async with connect(options) as bus:
            await register_node(bus, node)
    finally:
        progress.registering -= 1
    progress.seconds.append(time.perf_counter() - started)


def arrivals(nodes: range, rate: float, start: float) -> list[tuple[int, float]]:
    """Each node with its moment of arrival: uniform within len(nodes) / rate seconds of `start`."""
    spread = len(nodes) / rate
    draw = random.Random(SEED)
    return [(node, start + draw.uniform(0, spread)) for node in nodes]


async def register(url: str, first_node: int, nodes: int, rate: float, keys: Path | None = None) -> dict[str, float]:
    progress = Progress()
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for node, at in arrivals(range(first_node, first_node + nodes), rate, anyio.current_time()):
            tg.start_soon(arrive, url, node, at, progress, keys)
    return progress.summary(started)


if __name__ == "__main__":
    url, first, count, rate, *keys = sys.argv[1:]
    seeds = Path(keys[0]) if keys else None
    print(json.dumps(anyio.run(register, url, int(first), int(count), float(rate), seeds)), flush=True)
