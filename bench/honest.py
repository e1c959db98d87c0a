"""`python -m bench.honest ACCESS --nodes N --seconds S --out FILE`: the soak's honest nodes, in a
process of their own.

Each node is a party of the grants (`n00000`, ...: its own account and key) and does on the bus what
`bench.register` does, reconcile after reconcile, as a node client run by a timer would: it arrives
at a random moment (uniform, seeded) within N / `--rate` seconds and registers (its first
reconcile: lease, its 100 needs and 10 applied records written conditionally, the registry read),
then reconciles again every `--every` seconds (give or take a fifth, seeded; a reconcile that
failed, a registration too, is tried again then) until `--seconds` have passed, each time on a
connection of its own, remembering what the last one left (the client's own `Memory`): a
reconcile that finds its keys as it left them writes nothing but its lease. Every write it makes
is kept in a ledger (key: revision), so that whoever reads the buckets afterwards can tell
whether anyone but the node changed its keys.

Writes to FILE, as JSON: the figures (reconciles completed, failures by reason, writes refused,
writes after registering) and the ledger of every node, which `check_honest_keys` compares with
the buckets.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench.cases import need_items
from bench.harness import Latency
from bench.mesh import Access, node
from bench.observe import own_cpu_seconds
from bench.register import NODE_KEYS, SEED, applied_of, reconcile_once
from provisioner_client.resolving.memory import Memory
from provisioner_client.resolving.own import OwnKeys
from provisioner_client.resolving.scope import IN_FLIGHT, NodeScope
from registry.contract import Bucket, buckets
from registry.errors import BusError, ConvergeError, sole_exception
from registry.wire import Bus, Changes, KvItem, connect, get_last_many, get_latest, node_key

REASON_CHARS = 200
JITTER = 0.2  # each later reconcile comes `every` seconds after the last, give or take this fraction
FINISHING = 60.0  # seconds a reconcile under way at the end may take to finish
OWN = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)
CHECKS_AT_ONCE = 16


def node_name(number: int) -> str:
    return f"n{number:05d}"


Ledger = dict[str, dict[str, int]]  # bucket: key: the revision the node wrote


class LedgerScope(NodeScope):
    """A node's scope that keeps, in `ledger`, the revision of every key it writes or deletes."""

    def __init__(self, node: str, ledger: Ledger) -> None:
        super().__init__(node)
        self.ledger = ledger

    async def converge(
        self,
        bus: Bus,
        bucket: Bucket,
        current: Sequence[KvItem],
        desired: Mapping[str, bytes],
        *,
        in_flight: int = IN_FLIGHT,
        revisions: dict[str, int] | None = None,
    ) -> Changes:
        written = revisions if revisions is not None else {}
        try:
            return await super().converge(bus, bucket, current, desired, in_flight=in_flight, revisions=written)
        finally:
            self.ledger.setdefault(bucket.name, {}).update(written)


@dataclass
class HonestNode:
    """A node, what it remembers between reconciles, what it wrote, and whether it has registered
    (a reconcile of its completed)."""

    number: int
    ledger: Ledger = field(default_factory=dict)
    registered: bool = False
    memory: Memory = field(init=False)
    scope: LedgerScope = field(init=False)

    def __post_init__(self) -> None:
        self.memory = Memory(node_name(self.number))
        self.scope = LedgerScope(node_name(self.number), self.ledger)


@dataclass
class Tally:
    """What the honest nodes did: reconciles completed (the first of each node apart), failures by
    reason, writes made and refused, and how long a reconcile took."""

    registered: int = 0
    reconciled: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    writes_refused: int = 0
    writes: int = 0
    writes_after_registering: int = 0
    at_once: int = 0
    most_at_once: int = 0
    first_seconds: list[float] = field(default_factory=list)
    later_seconds: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        first, later = Latency.of(self.first_seconds or [0.0]), Latency.of(self.later_seconds or [0.0])
        return {
            "registered": self.registered,
            "reconciled_after_registering": self.reconciled,
            "failed": sum(self.failures.values()),
            "failures": dict(self.failures.most_common()),
            "writes": self.writes,
            "writes_refused": self.writes_refused,
            "writes_after_registering": self.writes_after_registering,
            "most_at_once": self.most_at_once,
            "registration_p50_ms": first.p50_ms,
            "registration_p99_ms": first.p99_ms,
            "reconcile_p50_ms": later.p50_ms,
            "reconcile_p99_ms": later.p99_ms,
        }


def reason_of(err: BaseException) -> str:
    """Why a reconcile failed, without the key or value it was at: failures of a kind count together."""
    if isinstance(err, BaseExceptionGroup):
        err = sole_exception(err)
    if isinstance(err, ConvergeError):
        cause = err.__cause__
        why = cause.reason if isinstance(cause, BusError) else err.reason
        return f"write refused in {err.bucket}: {why}"[:REASON_CHARS]
    if isinstance(err, BusError):
        return f"{' '.join(err.operation.split()[:2])}: {err.reason}"[:REASON_CHARS]
    return f"{type(err).__name__}: {err}"[:REASON_CHARS]


def is_refused_write(reason: str) -> bool:
    return reason.startswith(("write ", "delete "))


class HonestNodes:
    """The nodes, their schedule and their tally."""

    def __init__(self, access: Access, nodes: range, *, seconds: float, rate: float, every: float) -> None:
        self.access = access
        self.nodes = [HonestNode(number) for number in nodes]
        self.seconds = seconds
        self.rate = rate
        self.every = every
        self.tally = Tally()
        self.draw = random.Random(SEED)
        self.end = 0.0

    async def run(self) -> None:
        start = anyio.current_time()
        self.end = start + self.seconds
        spread = min(len(self.nodes) / self.rate, self.seconds)
        with anyio.move_on_after(self.seconds + FINISHING):
            async with anyio.create_task_group() as tg:
                for honest in self.nodes:
                    tg.start_soon(self.live, honest, start + self.draw.uniform(0, spread))

    async def live(self, honest: HonestNode, arrival: float) -> None:
        """The node's first reconcile at `arrival`, then one every `every` seconds until the end."""
        at = arrival
        while at < self.end:
            await anyio.sleep_until(at)
            await self.reconcile(honest)
            at += self.every * self.draw.uniform(1 - JITTER, 1 + JITTER)

    async def reconcile(self, honest: HonestNode) -> None:
        tally = self.tally
        tally.at_once += 1
        tally.most_at_once = max(tally.most_at_once, tally.at_once)
        started = time.perf_counter()
        try:
            async with connect(self.access.options(node(node_name(honest.number)))) as bus:
                own = OwnKeys(bus, honest.scope, honest.memory)
                needs, applied = await reconcile_once(bus, own, honest.number)
        except Exception as err:
            reason = reason_of(err)
            tally.failures[reason] += 1
            tally.writes_refused += is_refused_write(reason)
            return
        finally:
            tally.at_once -= 1
        self.count(needs, applied, first=not honest.registered, seconds=time.perf_counter() - started)
        honest.registered = True

    def count(self, needs: Changes, applied: Changes, *, first: bool, seconds: float) -> None:
        tally = self.tally
        writes = sum(len(changes.written) + len(changes.deleted) for changes in (needs, applied))
        tally.writes += writes
        if first:
            tally.registered += 1
            tally.first_seconds.append(seconds)
        else:
            tally.reconciled += 1
            tally.writes_after_registering += writes
            tally.later_seconds.append(seconds)

    def ledgers(self) -> dict[str, Ledger]:
        return {node_name(honest.number): honest.ledger for honest in self.nodes}


# The check: each honest key as stored, against what its node wrote.


@dataclass
class Checked:
    """Every honest node's keys as stored, against what its node wrote."""

    keys: int = 0
    changed: list[str] = field(default_factory=list)  # "<bucket> <key>: how"
    leases_held: int = 0


async def check_honest_keys(seat: Bus, ledgers: Mapping[str, Ledger]) -> Checked:
    """Each key under an honest node must hold what the node last wrote there, at the revision it
    wrote it; a key it never wrote is someone else's doing."""
    checked = Checked()
    limiter = anyio.CapacityLimiter(CHECKS_AT_ONCE)

    async def one(name: str, ledger: Ledger) -> None:
        async with limiter:
            for bucket in OWN:
                await check_bucket(seat, bucket, name, ledger.get(bucket.name, {}), checked)
            lease = await get_latest(seat, buckets.LEASES, node_key(name))
            checked.leases_held += lease is not None and not lease.deleted

    async with anyio.create_task_group() as tg:
        for name, ledger in ledgers.items():
            tg.start_soon(one, name, ledger)
    return checked


async def check_bucket(seat: Bus, bucket: Bucket, name: str, written: Mapping[str, int], checked: Checked) -> None:
    wanted = wanted_of(bucket, name)
    stored = {item.key: item for item in await get_last_many(seat, bucket, f"{name}.>")}
    for key, revision in written.items():
        item = stored.get(key)
        checked.keys += 1
        if item is None:
            checked.changed.append(f"{bucket.name} {key}: gone (written at {revision})")
        elif item.revision != revision:
            checked.changed.append(f"{bucket.name} {key}: at {item.revision}, written at {revision}")
        elif not item.deleted and item.value != wanted.get(key):
            checked.changed.append(f"{bucket.name} {key}: content differs from what its node wrote")
    for key in stored.keys() - written.keys():
        if not stored[key].deleted:
            checked.changed.append(f"{bucket.name} {key}: never written by its node")


def wanted_of(bucket: Bucket, name: str) -> dict[str, bytes]:
    """What honest node `name` writes in `bucket`."""
    if bucket == buckets.NEEDS:
        return dict(need_items(int(name[1:]), NODE_KEYS, NODE_KEYS))
    if bucket == buckets.APPLIED:
        return applied_of(name)
    return {}


async def run(args: argparse.Namespace) -> None:
    numbers = range(args.first, args.first + args.nodes)
    nodes = HonestNodes(Access.of(args), numbers, seconds=args.seconds, rate=args.rate, every=args.every)
    started = time.perf_counter()
    await nodes.run()
    figures = nodes.tally.figures() | {"seconds": time.perf_counter() - started, "cpu_seconds": own_cpu_seconds()}
    args.out.write_text(json.dumps({"figures": figures, "ledgers": nodes.ledgers()}))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.honest", description=__doc__)
    Access.add_arguments(parser)
    parser.add_argument("--first", type=int, default=0, help="the first node's number")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True, help="how long the nodes keep reconciling")
    parser.add_argument("--rate", type=float, default=20.0, help="nodes arriving a second (default 20)")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between a node's reconciles (default 60)")
    parser.add_argument("--out", type=Path, required=True)
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
