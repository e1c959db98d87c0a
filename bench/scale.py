"""`python -m bench --scale`: the targets at mesh scale, each figure beside its floor in one run.

The bucket is filled to 1,000 keys, measured, then 1,000 nodes register as node clients do
(`bench.register`: a process of its own, a connection per node, about 20 nodes arriving a second)
while the seat's `what=registry` and the bare echo are sampled in turn, back to back; the rest of
`--keys` is loaded by plain publishes, and measured again (`--only` runs some parts). A tail node's
keys are written again after each fill, so that they are last in the stream."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import nats
from nats.aio.client import Client

from bench import raw_reads
from bench.cases import (
    Report,
    ask_echo,
    ask_registry,
    echo_process,
    need_items,
    read_whole,
    registry_and_echo,
    server_process,
    vault_process,
)
from bench.convergence import NODE, Fleet, Run, client_peak_rss_mb, measured_reconcile, own_bucket_sequences
from bench.harness import ROOT, Latency, median, peak_rss_mb, sequential_latency, timed
from mesh_dev.local_nats import local_nats
from mesh_dev.standins import stand_ins
from provisioner_client.reconcile import ClientPlan
from registry.contract import buckets
from registry.errors import ServiceError
from registry.wire import Bus, BusOptions, answer_of, connect, converge, page_of

NODE_KEYS = 100
FIRST = 0  # n00000: its keys are the first in the stream
TAIL = 99_999  # n99999: its keys are written again after each fill, so they are the last
BATCH = 1024  # the most keys a batch direct get answers (multi_last), and the page of a raw full read


@dataclass(frozen=True)
class ScaleSizes:
    keys: int = 1_000_000
    small: int = 1_000
    rounds: int = 200
    registry_rounds: int = 2000
    idle_samples: int = 4000
    registering_nodes: int = 1_000
    sample_every: float = 0.0  # back to back, as before; 0.005: a pair every ~5 ms, a lighter observer
    arrivals_per_second: float = 20  # one load process keeps up with about 30 on 2 shared cores
    modules: int = 100
    many_modules: int = 1_000
    listings_at_once: int = 3


def met(report: Report, name: str, value: float, unit: str, target: str, *, ok: bool) -> None:
    report.add(name, value, unit, target=target, met=ok)


# The floors: nats-py reading the bucket by itself.


async def raw_batch(nc: Client, body: dict[str, Any]) -> tuple[int, int]:
    """One batch direct get read by nats-py: the keys it answered and the last stream sequence among them."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(buckets.NEEDS.batch_get_subject, json.dumps(body).encode(), reply=inbox)
    count = last = 0
    try:
        while True:
            msg = await sub.next_msg(timeout=30)
            headers = msg.headers or {}
            if "Status" in headers:
                return count, last
            count += 1
            last = int(headers["Nats-Sequence"])
    finally:
        await sub.unsubscribe()


async def raw_multi_last(nc: Client, node: str) -> None:
    count, _ = await raw_batch(nc, {"multi_last": [buckets.NEEDS.subject(f"{node}.>")], "batch": BATCH})
    assert count == NODE_KEYS, count


# The fill: loading keys, and nodes registering.


async def last_seq(nc: Client) -> int:
    return (await nc.jetstream().stream_info(buckets.NEEDS.stream)).state.last_seq


async def until_stored(nc: Client, seq: int, *, within: float) -> None:
    with anyio.fail_after(within):
        while await last_seq(nc) < seq:
            await anyio.sleep(0.05)


async def publish_nodes(nc: Client, nodes: range) -> None:
    before = await last_seq(nc)
    for node in nodes:
        for key, value in need_items(node, NODE_KEYS, NODE_KEYS):
            await nc.publish(buckets.NEEDS.subject(key), value)
        await nc.flush()
    await until_stored(nc, before + NODE_KEYS * len(nodes), within=60)


class Sampler:
    """`what=registry` and the bare echo asked in turn, a pair at random moments (exponential gaps of
    `every` seconds on average, seeded), or back to back with `every` 0; the same idle and busy."""

    def __init__(self, nc: Client, every: float) -> None:
        self.nc = nc
        self.every = every
        self.draw = random.Random(10)
        self.registry: list[float] = []
        self.echo: list[float] = []

    async def pair(self) -> None:
        if self.every:
            await anyio.sleep(self.draw.expovariate(1 / self.every))
        self.registry.append(await timed(partial(ask_registry, self.nc)))
        self.echo.append(await timed(partial(ask_echo, self.nc)))

    def latencies(self) -> tuple[Latency, Latency]:
        return Latency.of(self.registry), Latency.of(self.echo)


async def sampled_idle(nc: Client, pairs: int, every: float) -> tuple[Latency, Latency]:
    sampler = Sampler(nc, every)
    for _ in range(pairs):
        await sampler.pair()
    return sampler.latencies()


@dataclass(frozen=True)
class Busy:
    """`what=registry` and the echo sampled while nodes registered, and the load as `bench.register`
    reports it."""

    registry: Latency
    echo: Latency
    load: dict[str, float]


async def register_while_sampling(nc: Client, url: str, nodes: range, rate: float, every: float) -> Busy:
    """Nodes register as node clients do (`bench.register`, a process of its own, about `rate`
    arriving a second) while the seat's `what=registry` and the bare echo are sampled, until the
    last node has registered."""
    command = [sys.executable, "-m", "bench.register", url, str(nodes.start), str(len(nodes)), str(rate)]
    registered: list[bytes] = []
    sampler = Sampler(nc, every)

    async def load() -> None:
        registered.append((await anyio.run_process(command, cwd=ROOT, stderr=None)).stdout)

    async with anyio.create_task_group() as tg:
        tg.start_soon(load)
        with anyio.fail_after(120 + len(nodes) / rate * 3):
            while not registered:
                await sampler.pair()
    return Busy(*sampler.latencies(), json.loads(registered[0]))


# The figures.


async def one_node(bus: Bus, nc: Client, node: int, rounds: int) -> tuple[Latency, Latency, Latency]:
    """`needs node=X` and both raw floors, interleaved: (verb, batch direct get, filtered watch)."""
    name = f"n{node:05d}"

    async def ask_needs() -> None:
        answer = await answer_of(bus, {"what": "needs", "node": name})
        assert len(answer.entries) == NODE_KEYS, len(answer.entries)

    calls: list[Callable[[], Awaitable[object]]] = [
        ask_needs,
        partial(raw_multi_last, nc, name),
        partial(read_whole, nc, f"{name}.>", NODE_KEYS),
    ]
    for call in calls:
        await sequential_latency(call, 10)
    samples: list[list[float]] = [[], [], []]
    for _ in range(rounds):
        for call, taken in zip(calls, samples, strict=True):
            taken.append(await timed(call))
    verb, batch, watch = (Latency.of(s) for s in samples)
    return verb, batch, watch


async def node_reads(bus: Bus, nc: Client, report: Report, sizes: ScaleSizes, total: int) -> dict[str, float]:
    """p50 of one node's answer, first and last in the stream, beside the faster raw read of its keys."""
    p50s = {}
    for where, node in (("first", FIRST), ("last", TAIL)):
        verb, batch, watch = await one_node(bus, nc, node, sizes.rounds)
        floor = min(batch.p50_ms, watch.p50_ms)
        report.add(f"needs node=X p50, {where} ({total:,} keys)", verb.p50_ms, "ms")
        report.add(f"  raw batch direct get p50, {where} ({total:,} keys)", batch.p50_ms, "ms")
        report.add(f"  raw filtered watch p50, {where} ({total:,} keys)", watch.p50_ms, "ms")
        ratio = verb.p50_ms / floor
        met(report, f"needs node=X / fastest raw read, {where} ({total:,} keys)", ratio, "x", "<= 1.3", ok=ratio <= 1.3)
        p50s[where] = verb.p50_ms
    return p50s


async def first_page_and_all(bus: Bus, total: int) -> tuple[float, float]:
    """A whole listing read page after page: seconds to its first page, and to its last. Its pages
    are counted, not joined (`answer_of`), so the benchmark holds one page of a million keys' listing."""
    request: dict[str, object] = {"what": "needs"}
    wait = timedelta(seconds=600)
    started = anyio.current_time()
    page = await page_of(bus, request, reply_wait=wait)
    first = anyio.current_time() - started
    count = len(page.entries)
    while page.next is not None:
        page = await page_of(bus, {**request, "cursor": page.next}, reply_wait=wait)
        count += len(page.entries)
    assert count == total, f"the listing answered {count} of {total} keys"
    return first, anyio.current_time() - started


# nats-py's KV watch subscribes with its default pending limit (512 Ki messages): over a million
# keys it dropped 273,693 as a slow consumer and waited for ever for its end.
WATCH_HOLDS = 500_000


async def whole_listings(bus: Bus, nc: Client, report: Report, sizes: ScaleSizes, seat: int) -> None:
    """A whole listing beside the fastest of three raw reads of every key (a watch, paged batch
    direct gets, a pull consumer), run in turn twice so that a shared machine's load falls on each
    alike, the best of each kept; then `listings_at_once` listings at once."""
    total = sizes.keys
    print(f"whole listings of {total:,} keys")
    seat_runs: list[tuple[float, float]] = []
    floors: dict[str, list[float]] = {"watch": [], "paged batch direct get": [], "pull consumer": []}
    if total > WATCH_HOLDS:
        del floors["watch"]
        print(
            f"  no raw watch of {total:,} keys: nats-py's watch drops messages past {WATCH_HOLDS:,} pending"
            " and never ends"
        )
    for _ in range(2):
        seat_runs.append(await first_page_and_all(bus, total))
        if "watch" in floors:
            floors["watch"].append(await timed(partial(read_whole, nc, ">", total)))
        floors["paged batch direct get"].append(await timed(partial(raw_reads.direct_pages, nc, total)))
        floors["pull consumer"].append(await timed(partial(raw_reads.pulled, nc, total)))
    first = min(run[0] for run in seat_runs)
    whole = min(run[1] for run in seat_runs)
    met(report, f"whole listing: first page ({total:,} keys, best of 2)", first, "s", "< 0.3", ok=first < 0.3)
    report.add("whole listing: keys per second (best of 2)", total / whole, "keys/s")
    for name, seconds in floors.items():
        report.add(f"  raw {name}: keys per second (best of 2)", total / min(seconds), "keys/s")
    speed = min(min(seconds) for seconds in floors.values()) / whole
    met(report, "whole listing speed / fastest raw read", speed, "x", ">= 0.9", ok=speed >= 0.9)
    rss = peak_rss_mb(seat)
    met(report, "seat peak RSS, one listing", rss, "MB", "< 150", ok=rss < 150)
    failures: list[str] = []

    async def listing() -> None:
        try:
            await first_page_and_all(bus, total)
        except ServiceError as err:  # the seat answering 503 is a figure of this run, not its end
            failures.append(str(err))

    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for _ in range(sizes.listings_at_once):
            tg.start_soon(listing)
    taken = anyio.current_time() - started
    at_once = sizes.listings_at_once
    report.add(f"{at_once} listings at once: keys per second, all together", at_once * total / taken, "keys/s")
    for failure in failures:
        print(f"  a listing failed: {failure}")
    met(
        report,
        f"listings at once that failed ({sizes.listings_at_once} asked)",
        len(failures),
        "",
        "= 0",
        ok=not failures,
    )
    rss = peak_rss_mb(seat)
    met(report, f"seat peak RSS, {sizes.listings_at_once} listings at once", rss, "MB", "< 200", ok=rss < 200)


async def one_at_a_time(bus: Bus, writes: int) -> float:
    """Seconds to write `writes` needs one conditional write after another (the converge of before)."""
    desired = {key: value for key, value in need_items(TAIL - 1, writes, writes)}
    seconds = await timed(partial(converge, bus, buckets.NEEDS, [], desired, in_flight=1))
    return seconds


async def pipelined_writes(bus: Bus, writes: int) -> float:
    """Seconds to write `writes` needs conditionally, 64 in flight (the reconcile's own pipelining)."""
    desired = {key: value for key, value in need_items(TAIL - 2, writes, writes)}
    return await timed(partial(converge, bus, buckets.NEEDS, [], desired, in_flight=64))


async def reconciles(bus: Bus, nc: Client, url: str, report: Report, *, sizes: ScaleSizes, state: Path) -> None:
    print(f"a client reconciling {sizes.modules} modules x 10 placeholders, and one managing {sizes.many_modules}")
    fleet = Fleet(sizes.modules, state / "fleet")
    many = Fleet(sizes.many_modules, state / "many", node=f"{NODE}-many")
    plan = ClientPlan(node=NODE, manifests=fleet.write_manifests(), materialize=fleet.folder / "env")
    async with stand_ins(bus, NODE, with_vault=False) as parts, vault_process(url):
        await fleet.write_values(bus, parts)
        await many.write_values(bus, parts)
        first = await measured_reconcile(bus, nc, plan)
        repeats = [await measured_reconcile(bus, nc, plan) for _ in range(5)]
        serial = await one_at_a_time(bus, first.kv_writes)
        pipelined = await pipelined_writes(bus, first.kv_writes)
        many_plan = ClientPlan(node=many.node, manifests=many.write_manifests(), materialize=many.folder / "env")
        many_first = await measured_reconcile(bus, nc, many_plan)
        many_second = await measured_reconcile(bus, nc, many_plan)
        before = await own_bucket_sequences(nc)
        rss = await client_peak_rss_mb(url, many_plan.manifests, many.folder / "env-of-a-process", node=many.node)
        process_writes = await own_bucket_sequences(nc) - before
    second = Run(median([r.seconds for r in repeats]), max(r.kv_writes for r in repeats), 0)
    report.add(f"first reconcile ({sizes.modules} modules): time", first.seconds * 1e3, "ms")
    report.add("first reconcile: KV writes", first.kv_writes, "writes")
    met(report, "second reconcile: KV writes (most of 5)", second.kv_writes, "writes", "= 0", ok=second.kv_writes == 0)
    report.add("second reconcile: time (median of 5)", second.seconds * 1e3, "ms")
    ratio = second.seconds / first.seconds
    met(report, "second reconcile time / first", ratio, "x", "<= 0.1", ok=ratio <= 0.1)
    report.add("first reconcile: time spent writing", first.write_seconds * 1e3, "ms")
    report.add(f"  {first.kv_writes} writes one at a time: time", serial * 1e3, "ms")
    speed = serial / first.write_seconds
    met(report, "first reconcile's writes: speed / one at a time", speed, "x", ">= 3", ok=speed >= 3)
    report.add("  whole first reconcile / its writes one at a time", first.seconds / serial, "x")
    report.add(f"  {first.kv_writes} writes 64 in flight, alone: time", pipelined * 1e3, "ms")
    report.add(f"first reconcile of {sizes.many_modules} modules: time", many_first.seconds * 1e3, "ms")
    report.add(f"first reconcile of {sizes.many_modules} modules: KV writes", many_first.kv_writes, "writes")
    report.add(f"second reconcile of {sizes.many_modules} modules: time", many_second.seconds * 1e3, "ms")
    report.add(f"  second / first, {sizes.many_modules} modules", many_second.seconds / many_first.seconds, "x")
    met(report, f"client peak RSS, {sizes.many_modules} modules (as a process)", rss, "MB", "< 100", ok=rss < 100)
    report.add("  KV writes of that process (after 2 in-process runs)", process_writes, "writes")
    writes = many_second.kv_writes
    met(report, f"second reconcile of {sizes.many_modules} modules: KV writes", writes, "writes", "= 0", ok=writes == 0)


def sampling(sizes: ScaleSizes) -> str:
    every = sizes.sample_every
    return f"a pair every ~{every * 1e3:g} ms" if every else "back to back"


async def registry_figures(nc: Client, report: Report, sizes: ScaleSizes) -> tuple[Latency, Latency]:
    """`what=registry` beside the echo, idle: their p50s back to back (a target), then their p99s
    sampled as they are while nodes register; (registry, echo) of the latter."""
    verb, echo = await registry_and_echo(nc, sizes.registry_rounds)
    report.add("registry p50", verb.p50_ms, "ms")
    report.add("  echo p50", echo.p50_ms, "ms")
    ratio = verb.p50_ms / echo.p50_ms
    met(report, "registry p50 / echo p50", ratio, "x", "<= 1.1", ok=ratio <= 1.1)
    verb, echo = await sampled_idle(nc, sizes.idle_samples, sizes.sample_every)
    report.add(f"registry p99, idle ({verb.count:,} samples, {sampling(sizes)})", verb.p99_ms, "ms")
    report.add("  echo p99, idle", echo.p99_ms, "ms")
    return verb, echo


async def registry_while_registering(
    nc: Client, url: str, nodes: range, report: Report, *, sizes: ScaleSizes, idle: tuple[Latency, Latency]
) -> None:
    rate = sizes.arrivals_per_second
    print(f"{len(nodes):,} nodes registering {len(nodes) * NODE_KEYS:,} needs, about {rate:g} arriving a second")
    busy = await register_while_sampling(nc, url, nodes, rate, sizes.sample_every)
    load = busy.load
    report.add("  load: nodes arriving a second (uniform, seeded)", rate, "nodes/s")
    report.add("  load: seconds until the last node had registered", load["seconds"], "s")
    report.add("  load: most nodes registering at once", load["most_at_once"], "nodes")
    report.add("  load: one node's registration p50", load["node_p50_ms"], "ms")
    report.add("  load: one node's registration p99", load["node_p99_ms"], "ms")
    report.add(f"  samples of each while they registered ({sampling(sizes)})", busy.registry.count, "")
    verb, echo = busy.registry, busy.echo
    report.add(f"registry p99 while {len(nodes):,} nodes register", verb.p99_ms, "ms")
    report.add(f"  echo p99 while {len(nodes):,} nodes register", echo.p99_ms, "ms")
    ratio = verb.p99_ms / idle[0].p99_ms
    met(report, "registry p99 registering / idle", ratio, "x", "< 3", ok=ratio < 3)
    report.add("  echo p99 registering / idle", echo.p99_ms / idle[1].p99_ms, "x")


SCALE_PARTS = ("registry", "reads", "listing", "reconcile")


async def measure(
    bus: Bus, nc: Client, url: str, seat: int, *, report: Report, sizes: ScaleSizes, state: Path, parts: Sequence[str]
) -> None:
    """The parts asked for, in order. With `registry`, 1,000 nodes register while the registry is
    sampled; the rest of `sizes.keys` is loaded by plain publishes when a later part needs it."""
    print(f"filling to {sizes.small:,} keys")
    await publish_nodes(nc, range(FIRST, sizes.small // NODE_KEYS - 1))
    await publish_nodes(nc, range(TAIL, TAIL + 1))
    small: dict[str, float] = {}
    if "registry" in parts:
        idle = await registry_figures(nc, report, sizes)
    if "reads" in parts:
        small = await node_reads(bus, nc, report, sizes, sizes.small)
    nodes = range(sizes.small // NODE_KEYS - 1, sizes.keys // NODE_KEYS - 1)
    if "registry" in parts:
        registering = nodes[: sizes.registering_nodes]
        await registry_while_registering(nc, url, registering, report, sizes=sizes, idle=idle)
        nodes = nodes[len(registering) :]
    if nodes and ("reads" in parts or "listing" in parts):
        print(f"filling to {sizes.keys:,} keys")
        await publish_nodes(nc, nodes)
    await publish_nodes(nc, range(TAIL, TAIL + 1))
    if "reads" in parts:
        await growth_figures(bus, nc, report, sizes, small)
    if "listing" in parts:
        await whole_listings(bus, nc, report, sizes, seat)
    if "reconcile" in parts:
        await reconciles(bus, nc, url, report, sizes=sizes, state=state)


async def growth_figures(bus: Bus, nc: Client, report: Report, sizes: ScaleSizes, small: dict[str, float]) -> None:
    large = await node_reads(bus, nc, report, sizes, sizes.keys)
    for where in ("first", "last"):
        ratio = large[where] / small[where]
        met(
            report,
            f"needs node=X time({sizes.keys:,}) / time({sizes.small:,}), {where}",
            ratio,
            "x",
            "<= 1.2",
            ok=ratio <= 1.2,
        )


async def run_scale(state: Path, keys: int, parts: Sequence[str] = SCALE_PARTS) -> Report:
    sizes = ScaleSizes(keys=keys)
    report = Report()
    async with local_nats(state / "nats") as server:
        nc = await nats.connect(server.url, name="bench", pending_size=1024**3)
        options = BusOptions(servers=(server.url,), name="bench", request_timeout=timedelta(seconds=60))
        try:
            async with server_process(server.url) as seat, echo_process(server.url), connect(options) as bus:
                await measure(bus, nc, server.url, seat, report=report, sizes=sizes, state=state, parts=parts)
        finally:
            await nc.close()
    return report
