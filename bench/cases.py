"""The measurements, each beside its floor, and the report that prints them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path

import nats
from nats.aio.client import Client

from bench.convergence import NODE, Fleet, Run, client_peak_rss_mb, measured_reconcile
from bench.harness import (
    Latency,
    answers,
    cpu_seconds,
    load_keys,
    median,
    peak_rss_mb,
    python_process,
    sequential_latency,
    throughput,
    timed,
    write_json,
)
from mesh_dev.local_nats import local_nats
from mesh_dev.standins import SECRET_SUBJECT, stand_ins
from provisioner.seat.registry_sync import sync_registry
from provisioner_client.reconcile import ClientPlan
from registry.contract import REQUEST_ID_HEADER, buckets
from registry.wire import Bus, BusOptions, answer_of, connect

ECHO_SUBJECT = "bench.echo"


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, *, target: str = "", met: bool | None = None) -> None:
        self.figures.append(Figure(name, value, unit, target, met))
        print(f"  {name}: {value:,.3f} {unit}" + (f"  [{target}: {'met' if met else 'MISSED'}]" if target else ""))

    def table(self) -> str:
        width = max(len(f.name) for f in self.figures)
        lines = [f"{'measurement'.ljust(width)}  {'value':>14}  unit      target"]
        for f in self.figures:
            verdict = "" if f.met is None else ("met" if f.met else "MISSED")
            lines.append(f"{f.name.ljust(width)}  {f.value:>14,.3f}  {f.unit:<8}  {f.target} {verdict}".rstrip())
        return "\n".join(lines)

    def save(self, path: Path) -> None:
        write_json(path, {"figures": [asdict(f) for f in self.figures]})


@dataclass(frozen=True)
class Sizes:
    sequential: int = 2000
    workers: int = 50
    per_worker: int = 100
    growth: tuple[int, ...] = (1_000, 10_000, 100_000)
    node_keys: int = 100
    modules: int = 100
    placeholders: int = 10
    growth_rounds: int = 200

    @staticmethod
    def quick() -> Sizes:
        return Sizes(sequential=200, per_worker=10, growth=(1_000, 5_000), modules=10, growth_rounds=30)


def need_items(start_node: int, count: int, per_node: int) -> list[tuple[str, bytes]]:
    """`count` needs keys spread over nodes of `per_node` keys each, as a client would write them."""
    items = []
    for index in range(start_node * per_node, start_node * per_node + count):
        node, rest = divmod(index, per_node)
        module, name = divmod(rest, 10)
        key = buckets.NEEDS.shape.build(node=f"n{node:05d}", module=f"m{module}", kind="config", name=f"v{name}")
        items.append((key, json.dumps({"placeholder": f"${{config:v{name}}}", "used_in": ["env.X"]}).encode()))
    return items


@asynccontextmanager
async def server_process(url: str) -> AsyncIterator[int]:
    nc = await nats.connect(url)
    try:
        args = ["-m", "provisioner.commands.cli", "serve", "--nats-url", url]
        async with python_process(args, ready=lambda: answers(nc, "$SRV.PING.mesh-provisioner")) as process:
            yield process.pid
    finally:
        await nc.close()


@asynccontextmanager
async def echo_process(url: str, subject: str = ECHO_SUBJECT, answer: Path | None = None) -> AsyncIterator[int]:
    """The bare echo (`bench.echo`); with `answer`, answering that file's bytes and a request id header."""
    nc = await nats.connect(url)
    args = ["-m", "bench.echo", url, subject]
    if answer is not None:
        args += ["--answer", str(answer), "--reply-header", REQUEST_ID_HEADER]
    try:
        async with python_process(args, ready=lambda: answers(nc, subject)) as p:
            yield p.pid
    finally:
        await nc.close()


@asynccontextmanager
async def answer_echo(url: str, state: Path, name: str, answer: bytes) -> AsyncIterator[tuple[str, int]]:
    """A bare echo answering `answer` (an answer of the verb, as it came) on a subject of its own:
    the bus doing what the verb does, and nothing more. Yields its subject and process id."""
    path = state / f"echo-{name}.answer"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(answer)
    subject = f"{ECHO_SUBJECT}.{name}"
    async with echo_process(url, subject, path) as pid:
        yield subject, pid


@asynccontextmanager
async def vault_process(url: str) -> AsyncIterator[int]:
    nc = await nats.connect(url)
    secret = b'{"name": "db-password"}'
    try:
        async with python_process(["-m", "bench.vault", url], ready=lambda: answers(nc, SECRET_SUBJECT, secret)) as p:
            yield p.pid
    finally:
        await nc.close()


REGISTRY_REQUEST = json.dumps({"what": "registry"}).encode()


async def ask_registry(nc: Client) -> None:
    await nc.request(buckets.VERB_SUBJECT, REGISTRY_REQUEST, timeout=10)


async def ask_echo(nc: Client, subject: str = ECHO_SUBJECT) -> None:
    await nc.request(subject, REGISTRY_REQUEST, timeout=10)


async def registry_and_echo(nc: Client, rounds: int) -> tuple[Latency, Latency]:
    """`what=registry` and the same request to the bare echo responder, in interleaved rounds, so that
    a noisy moment hits both sides alike."""
    latencies = await interleaved({"verb": partial(ask_registry, nc), "echo": partial(ask_echo, nc)}, rounds)
    return latencies["verb"], latencies["echo"]


Call = Callable[[], Awaitable[object]]


async def interleaved(calls: Mapping[str, Call], rounds: int) -> dict[str, Latency]:
    """Each call's latency, asked in turn `rounds` times after a warm-up, so that a noisy moment
    hits each alike."""
    for call in calls.values():
        await sequential_latency(call, 50)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name].append(await timed(call))
    return {name: Latency.of(taken) for name, taken in samples.items()}


@dataclass(frozen=True)
class Responder:
    """A request to measure, and the process that answers it."""

    call: Call
    pid: int


async def alternated_throughput(
    asks: Mapping[str, Responder], *, workers: int, per_worker: int
) -> dict[str, tuple[float, float]]:
    """Each request's rate with `workers` requesters (the median of 3 rounds taken in turn), and
    its responder's CPU microseconds a request over the 3 (the clock counts in hundredths of a
    second: a round alone is too short to tell)."""
    rounds: dict[str, list[float]] = {name: [] for name in asks}
    spent = dict.fromkeys(asks, 0.0)
    for _ in range(3):
        for name, ask in asks.items():
            before = cpu_seconds(ask.pid)
            rounds[name].append(await throughput(ask.call, workers=workers, per_worker=per_worker))
            spent[name] += cpu_seconds(ask.pid) - before
    asked = 3 * workers * per_worker
    return {name: (median(rounds[name]), spent[name] / asked * 1e6) for name in asks}


@dataclass(frozen=True)
class Processes:
    """The processes the verb's figures are taken of: the seat, the echo of the request."""

    seat: int
    echo: int


async def verb_against_echo(
    nc: Client, url: str, report: Report, sizes: Sizes, *, state: Path, pids: Processes
) -> None:
    print("verb what=registry against a bare echo responder")
    answer = (await nc.request(buckets.VERB_SUBJECT, REGISTRY_REQUEST, timeout=10)).data
    async with answer_echo(url, state, "registry", answer) as (subject, pid):
        echoes = (Responder(partial(ask_echo, nc), pids.echo), Responder(partial(ask_echo, nc, subject), pid))
        await against_echoes(report, sizes, ("registry", Responder(partial(ask_registry, nc), pids.seat)), echoes)


async def needs_against_echo(
    nc: Client, url: str, report: Report, sizes: Sizes, *, state: Path, pids: Processes
) -> None:
    """`what=needs` of one node (its `node_keys` keys, answered by one batch read) beside the echoes."""
    print("verb what=needs node=X against a bare echo responder")
    request = json.dumps({"what": "needs", "node": "n00000"}).encode()
    answer = (await nc.request(buckets.VERB_SUBJECT, request, timeout=10)).data
    assert answer.count(b'"key"') == sizes.node_keys, answer[:200]

    async def ask_needs() -> None:
        await nc.request(buckets.VERB_SUBJECT, request, timeout=10)

    async with answer_echo(url, state, "needs", answer) as (subject, pid):
        echoes = (Responder(partial(ask_echo, nc), pids.echo), Responder(partial(ask_echo, nc, subject), pid))
        asked = ("needs node=X", Responder(ask_needs, pids.seat))
        await against_echoes(report, sizes, asked, echoes, rounds=sizes.growth_rounds)


async def against_echoes(
    report: Report, sizes: Sizes, asked: tuple[str, Responder], echoes: tuple[Responder, Responder], rounds: int = 0
) -> None:
    """The verb's request (`asked`: its name, its call) beside the bare echo of the request and the
    echo of its answer (`echoes`: the bus carrying the same bytes both ways): p50, p99 and
    throughput, side by side. The targets hold against the echo of the answer; the echo of the
    request is the bus at its barest (the verb's answer is larger, and carries its request id).
    Each responder's CPU time a request says what it costs however loaded the machine is."""
    verb = asked[0]
    echo, answer_echo = f"echo of the request [{verb}]", f"echo of the answer [{verb}]"
    asks = dict([asked, (echo, echoes[0]), (answer_echo, echoes[1])])
    latencies = await interleaved({name: ask.call for name, ask in asks.items()}, rounds or sizes.sequential)
    for name, latency in latencies.items():
        report.add(f"{name} p50", latency.p50_ms, "ms")
        report.add(f"{name} p99", latency.p99_ms, "ms")
    for quantile in ("p50", "p99"):
        ratio = getattr(latencies[verb], f"{quantile}_ms") / getattr(latencies[answer_echo], f"{quantile}_ms")
        report.add(f"{verb} {quantile} / {answer_echo} {quantile}", ratio, "x", target="<= 1.1", met=ratio <= 1.1)
        ratio = getattr(latencies[verb], f"{quantile}_ms") / getattr(latencies[echo], f"{quantile}_ms")
        report.add(f"{verb} {quantile} / {echo} {quantile}", ratio, "x")
    per_worker = sizes.per_worker if not rounds else max(1, sizes.per_worker // 10)
    measured = await alternated_throughput(asks, workers=sizes.workers, per_worker=per_worker)
    for name, (rate, cost) in measured.items():
        report.add(f"{name} throughput ({sizes.workers} requesters, median of 3)", rate, "req/s")
        report.add(f"{name}: responder CPU a request", cost, "us")
    rates = {name: rate for name, (rate, _) in measured.items()}
    ratio = rates[verb] / rates[answer_echo]
    report.add(f"{verb} / {answer_echo} throughput", ratio, "x", target=">= 0.9", met=ratio >= 0.9)
    report.add(f"{verb} / {echo} throughput", rates[verb] / rates[echo], "x")


async def direct_read(nc: Client, subject_filter: str) -> int:
    """The KV floor: keys read straight from the needs bucket through a filtered nats-py watch."""
    kv = await nc.jetstream().key_value(buckets.NEEDS.name)
    watcher = await kv.watch(subject_filter, ignore_deletes=True, inactive_threshold=2.0)
    count = 0
    async for entry in watcher:
        if entry is None:
            break
        count += 1
    await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves KeyWatcher.stop unannotated
    return count


async def read_whole(nc: Client, subject_filter: str, expected: int) -> None:
    # nats-py's watch can signal "no more" before the first key when its consumer info races the
    # deliveries; such a short read is not the floor, so it is read again.
    for _ in range(5):
        if await direct_read(nc, subject_filter) == expected:
            return
    raise AssertionError(f"the direct read of {subject_filter} kept coming back short of {expected}")


async def needs_of_one_node(bus: Bus, nc: Client, report: Report, sizes: Sizes, total: int) -> tuple[float, float]:
    """p50 of `what=needs node=X` against the direct filtered read, at the bucket's current size."""
    node = "n00000"

    async def ask_needs() -> None:
        answer = await answer_of(bus, {"what": "needs", "node": node})
        assert len(answer.entries) == sizes.node_keys, len(answer.entries)

    async def read_direct() -> None:
        await read_whole(nc, f"{node}.>", sizes.node_keys)

    for call in (ask_needs, read_direct):
        await sequential_latency(call, 10)
    verb_samples: list[float] = []
    direct_samples: list[float] = []
    for _ in range(sizes.growth_rounds):
        verb_samples.append(await timed(ask_needs))
        direct_samples.append(await timed(read_direct))
    verb, direct = Latency.of(verb_samples), Latency.of(direct_samples)
    report.add(f"needs node=X p50 ({total:,} keys)", verb.p50_ms, "ms")
    report.add(f"needs node=X p99 ({total:,} keys)", verb.p99_ms, "ms")
    report.add(f"direct filtered read p50 ({total:,} keys)", direct.p50_ms, "ms")
    return verb.p50_ms / direct.p50_ms, verb.p50_ms


async def growth(bus: Bus, nc: Client, report: Report, sizes: Sizes, loaded: int = 0) -> None:
    """`needs node=X` at each size of `sizes.growth`, `loaded` keys being there already."""
    print("needs node=X as the bucket grows")
    first_p50 = p50 = 0.0
    for total in sizes.growth:
        if total > loaded:
            await load_keys(nc, buckets.NEEDS.name, need_items(loaded, total - loaded, sizes.node_keys))
        loaded = total
        ratio, p50 = await needs_of_one_node(bus, nc, report, sizes, total)
        if total == sizes.growth[0]:
            first_p50 = p50
            report.add("needs node=X p50 / direct read p50", ratio, "x", target="<= 1.5", met=ratio <= 1.5)
    growth_ratio = p50 / first_p50
    report.add(
        f"needs node=X time({sizes.growth[-1]:,}) / time({sizes.growth[0]:,})",
        growth_ratio,
        "x",
        target="<= 2",
        met=growth_ratio <= 2,
    )


async def whole_listing(bus: Bus, nc: Client, report: Report, sizes: Sizes, server_pid: int) -> None:
    total = sizes.growth[-1]
    print(f"what=needs unfiltered over {total:,} keys")
    pages = 0

    async def ask_all() -> None:
        nonlocal pages
        answer = await answer_of(bus, {"what": "needs"}, reply_wait=timedelta(seconds=60))
        assert len(answer.entries) == total, len(answer.entries)
        pages = answer.pages or 0

    async def read_all() -> None:
        await read_whole(nc, ">", total)

    verb_seconds = await timed(ask_all)
    direct_seconds = await timed(read_all)
    report.add("whole listing: time", verb_seconds, "s")
    report.add("whole listing: pages", pages, "pages")
    report.add("whole listing: keys per second", total / verb_seconds, "keys/s")
    report.add("direct read of every key: keys per second", total / direct_seconds, "keys/s")
    speed = direct_seconds / verb_seconds
    report.add("whole listing speed / direct read speed", speed, "x", target=">= 0.5", met=speed >= 0.5)
    rss = peak_rss_mb(server_pid)
    report.add(f"server peak RSS after the {total:,}-key listing", rss, "MB", target="< 120", met=rss < 120)


async def compile_unchanged(bus: Bus, nc: Client, report: Report) -> None:
    print("the hourly compile with nothing changed")
    js = nc.jetstream()
    before = (await js.stream_info(buckets.REGISTRY.stream)).state.last_seq
    seconds = await timed(lambda: sync_registry(bus, domains_file=None))
    writes = (await js.stream_info(buckets.REGISTRY.stream)).state.last_seq - before
    report.add("compile, nothing changed: writes", writes, "writes", target="= 0", met=writes == 0)
    report.add("compile, nothing changed: time", seconds * 1e3, "ms")


async def convergence(bus: Bus, nc: Client, url: str, report: Report, *, sizes: Sizes, state: Path) -> None:
    print(f"a client reconciling {sizes.modules} modules x 10 placeholders")
    fleet = Fleet(sizes.modules, state / "fleet")
    manifests = fleet.write_manifests()
    plan = ClientPlan(node=NODE, manifests=manifests, materialize=fleet.folder / "env")
    async with stand_ins(bus, NODE, with_vault=False) as parts, vault_process(url):
        await fleet.write_values(bus, parts)
        first = await measured_reconcile(bus, nc, plan)
        # The first run happens once; the unchanged run can be repeated, and its median is steadier.
        repeats = [await measured_reconcile(bus, nc, plan) for _ in range(5)]
        second = Run(
            median([r.seconds for r in repeats]),
            max(r.kv_writes for r in repeats),
            max(r.files_written for r in repeats),
        )
        rss = await client_peak_rss_mb(url, manifests, fleet.folder / "env-of-a-process")
    report.add("first reconcile: time", first.seconds * 1e3, "ms")
    report.add("first reconcile: KV writes", first.kv_writes, "writes")
    report.add("first reconcile: env files written", first.files_written, "files")
    report.add(
        "second reconcile: KV writes (most of 5)", second.kv_writes, "writes", target="= 0", met=second.kv_writes == 0
    )
    files = second.files_written
    report.add("second reconcile: env files written (most of 5)", files, "files", target="= 0", met=files == 0)
    report.add("second reconcile: time (median of 5)", second.seconds * 1e3, "ms")
    ratio = second.seconds / first.seconds
    report.add("second reconcile time / first", ratio, "x", target="<= 0.3", met=ratio <= 0.3)
    report.add(f"client peak RSS, {sizes.modules} modules", rss, "MB", target="< 80", met=rss < 80)


PARTS = ("verb", "compile", "growth", "listing", "convergence")


async def run_all(state: Path, quick: bool, parts: Sequence[str] = PARTS) -> Report:
    sizes = Sizes.quick() if quick else Sizes()
    report = Report()
    async with local_nats(state / "nats") as server:
        nc = await nats.connect(server.url, name="bench")
        try:
            async with (
                server_process(server.url) as server_pid,
                echo_process(server.url) as echo_pid,
                connect(BusOptions(servers=(server.url,), name="bench", request_timeout=timedelta(seconds=30))) as bus,
            ):
                loaded = 0
                if "verb" in parts:
                    pids = Processes(server_pid, echo_pid)
                    await verb_against_echo(nc, server.url, report, sizes, state=state, pids=pids)
                    loaded = sizes.growth[0]
                    await load_keys(nc, buckets.NEEDS.name, need_items(0, loaded, sizes.node_keys))
                    await needs_against_echo(nc, server.url, report, sizes, state=state, pids=pids)
                if "compile" in parts:
                    await compile_unchanged(bus, nc, report)
                if "growth" in parts or "listing" in parts:
                    await growth(bus, nc, report, sizes, loaded)
                if "listing" in parts:
                    await whole_listing(bus, nc, report, sizes, server_pid)
                if "convergence" in parts:
                    await convergence(bus, nc, server.url, report, sizes=sizes, state=state)
        finally:
            await nc.close()
    return report
