"""`python -m bench --soak`: the multi-party soak: a hostile node running its whole
repertoire while honest nodes register and reconcile and an honest operator asks the seat.

A mesh of `nodes` honest nodes (`n00000`, ...), the hostile node `n-hostile` and an operator
(`ops`), each on an account of its own (static accounts, or JWT with `jwt`), the seat with its
defaults as a process of its own. First, idle: the operator asks `what=registry` every 0.1 s and
the bare echo in its own account beside it (the floor: nats-server and a Python responder on the
same machine), and `what=nodes` every 2 s, for `idle_seconds`. Then for `seconds`, all at once:

    the hostile node   `bench.hostile`, every act (a process of its own)
    the honest nodes   `bench.honest`: each registers as `bench.register` does, arriving `rate` a
                       second, then reconciles every `every` seconds (a process of its own)
    the operator       as when idle, from this process

Then: the honest nodes' writes refused (target 0) and reconciles completed, failures with
reasons; the operator's `what=registry` p99 against the idle one (target <= 2x); every honest key
as stored against the revision and content its node wrote (changed by anyone else: target 0);
the hostile node's verdict (over-quota); the buckets' bytes; the seat's memory and CPU.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from nats.aio.client import Client

from bench.cases import Report
from bench.harness import answers, peak_rss_mb, python_process, rss_mb
from bench.honest import Checked, check_honest_keys, node_name
from bench.hostile import ACTS
from bench.mesh import OPERATOR, SEAT, Access, RunningMesh, bench_mesh, child_environment
from bench.observe import (
    SEAT_MARKS,
    SLOW_CONSUMER,
    BucketPoll,
    Bytes,
    CpuUse,
    RssSeries,
    child_figures,
    log_lines,
    nodes_shown,
)
from bench.operator import ECHO_SUBJECT, Operator, Samples
from registry.contract import buckets
from registry.wire import Bus, connect

HOSTILE = "n-hostile"
GUARDED = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)
HOSTILE_PROCESS, HONEST_PROCESS = "the hostile node's process", "the honest nodes' process"
MB = 1e6


@dataclass(frozen=True)
class SoakSizes:
    seconds: float = 300.0
    nodes: int = 1000
    # Honest nodes arriving a second: with the hostile node beside them on 2 cores, 20 a second piled up
    # (232 registering at once, 16 s each); at 5 one registers in about 0.2 s, and 1,000 arrive within 200 s.
    rate: float = 5.0
    every: float = 60.0  # seconds between an honest node's reconciles
    idle_seconds: float = 60.0
    registry_every: float = 0.1
    nodes_every: float = 2.0
    seat: Mapping[str, object] = field(default_factory=dict)  # the seat's settings: its defaults
    hostile_writers: int = 8
    hostile_acts: tuple[str, ...] = ACTS

    @staticmethod
    def lasting(minutes: float, *, nodes: int, rate: float, every: float, acts: Sequence[str] = ACTS) -> SoakSizes:
        """A soak of `minutes`, idle for a fifth of that before (at most a minute)."""
        idle = min(60.0, minutes * 12)
        return SoakSizes(
            seconds=minutes * 60, nodes=nodes, rate=rate, every=every, idle_seconds=idle, hostile_acts=tuple(acts)
        )


@dataclass
class Soaked:
    """All that was seen."""

    mesh: RunningMesh
    idle: Samples
    busy: Samples
    hostile: dict[str, Any]
    honest: dict[str, Any]
    checked: Checked
    verdict: tuple[str, str]
    bytes: dict[str, Bytes]
    rss_before: float
    rss_after: float
    rss_peak: float
    cpu: dict[str, float]  # seconds of CPU during the soak, by process
    seat_log: dict[str, int]
    slow_consumers: int  # the seat's connection, closed by nats-server
    rss: list[tuple[float, float]]  # the seat's, every second of the soak


async def run_soak(state: Path, sizes: SoakSizes, jwt: bool) -> tuple[Report, dict[str, Any]]:
    names = [*(node_name(number) for number in range(sizes.nodes)), HOSTILE]
    print(f"issuing the grants of {len(names):,} nodes and starting the mesh ({'JWT' if jwt else 'static'} accounts)")
    async with bench_mesh(state, nodes=names, jwt=jwt, seat=sizes.seat) as mesh:
        access = mesh.access
        nc = await access.raw(OPERATOR, max_reconnect_attempts=-1)
        try:
            async with (
                echo_process(access, nc) as echo,
                connect(access.options(OPERATOR)) as ops,
                connect(access.options(SEAT)) as seat,
            ):
                operator = Operator(nc, ops, every=sizes.registry_every, nodes_every=sizes.nodes_every)
                pids = {"the operator (this process)": os.getpid(), "the operator's echo": echo}
                soaked = await soak(mesh, state, sizes, operator, seat, operator_pids=pids)
        finally:
            await nc.close()
    return report_of(soaked, sizes, jwt), details_of(soaked, sizes, jwt)


@asynccontextmanager
async def echo_process(access: Access, nc: Client) -> AsyncIterator[int]:
    """The bare echo responder on the operator's own account, which its connections reach without an import."""
    args = ["-m", "bench.echo", access.url, ECHO_SUBJECT, *access.flags(OPERATOR)]
    ready = partial(answers, nc, ECHO_SUBJECT)
    async with python_process(args, ready=ready, env=child_environment()) as process:
        yield process.pid


async def soak(
    mesh: RunningMesh, state: Path, sizes: SoakSizes, operator: Operator, seat: Bus, *, operator_pids: Mapping[str, int]
) -> Soaked:
    """The idle phase, then the soak; what was seen."""
    poll = BucketPoll(seat, GUARDED)
    async with anyio.create_task_group() as tg:
        await tg.start(operator.run)
        await tg.start(poll.poll)
        print(f"idle: the operator asking for {sizes.idle_seconds:g} s")
        await anyio.sleep(sizes.idle_seconds)
        idle = operator.phase()
        rss_before = rss_mb(mesh.seat_pid)
        cpu = CpuUse({"the seat": mesh.seat_pid, "nats-server": mesh.server_pid, **operator_pids})
        cpu.start()
        rss = RssSeries(mesh.seat_pid)
        tg.start_soon(rss.poll)
        print(f"soak: {HOSTILE} and {sizes.nodes:,} honest nodes for {sizes.seconds:g} s")
        children = await at_once(
            {
                "hostile": partial(hostile_figures, mesh.access, state, sizes),
                "honest": partial(honest_figures, mesh.access, state, sizes),
            }
        )
        busy = operator.phase()
        rss_after = rss_mb(mesh.seat_pid)
        cpu.stop()
        tg.cancel_scope.cancel()
    print("checking every honest key against what its node wrote")
    hostile, honest = children["hostile"], children["honest"]["figures"]
    checked = await check_honest_keys(seat, children["honest"]["ledgers"])
    shown = (await nodes_shown(operator.ops, patiently=True)).get(HOSTILE)
    await poll.once()
    return Soaked(
        mesh=mesh,
        idle=idle,
        busy=busy,
        hostile=hostile,
        honest=honest,
        checked=checked,
        verdict=(shown.verdict, shown.because) if shown else ("not shown", ""),
        bytes=poll.seen,
        rss_before=rss_before,
        rss_after=rss_after,
        rss_peak=peak_rss_mb(mesh.seat_pid),
        cpu=cpu.used | {HOSTILE_PROCESS: hostile["cpu_seconds"], HONEST_PROCESS: honest["cpu_seconds"]},
        seat_log=log_lines(mesh.seat_log, *SEAT_MARKS),
        slow_consumers=log_lines(mesh.server_log, SLOW_CONSUMER)[SLOW_CONSUMER],
        rss=rss.samples,
    )


async def at_once(calls: Mapping[str, Callable[[], Awaitable[dict[str, Any]]]]) -> dict[str, dict[str, Any]]:
    """Each call's result, by name, the calls run at once."""
    results: dict[str, dict[str, Any]] = {}

    async def keep(name: str) -> None:
        results[name] = await calls[name]()

    async with anyio.create_task_group() as tg:
        for name in calls:
            tg.start_soon(keep, name)
    return results


async def hostile_figures(access: Access, state: Path, sizes: SoakSizes) -> dict[str, Any]:
    args = [*access.argv(), "--node", HOSTILE, "--seconds", str(sizes.seconds), "--writers", str(sizes.hostile_writers)]
    args += ["--acts", *sizes.hostile_acts]
    return await child_figures("bench.hostile", args, state / "hostile.json")


async def honest_figures(access: Access, state: Path, sizes: SoakSizes) -> dict[str, Any]:
    args = [*access.argv(), "--nodes", str(sizes.nodes), "--seconds", str(sizes.seconds)]
    args += ["--rate", str(sizes.rate), "--every", str(sizes.every)]
    return await child_figures("bench.honest", args, state / "honest.json")


# The report.


def report_of(soaked: Soaked, sizes: SoakSizes, jwt: bool) -> Report:
    report = Report()
    mode = "JWT" if jwt else "static"
    print(f"\nthe soak, {mode} accounts: {HOSTILE} and {sizes.nodes:,} honest nodes for {sizes.seconds:g} s")
    mesh_figures(report, soaked, sizes)
    honest_figures_of(report, soaked, sizes)
    operator_figures(report, soaked)
    hostile_figures_of(report, soaked)
    seat_figures(report, soaked)
    return report


def mesh_figures(report: Report, soaked: Soaked, sizes: SoakSizes) -> None:
    mesh = soaked.mesh
    report.add(f"grants issued for {sizes.nodes + 1:,} nodes and an operator", mesh.issue_seconds, "s")
    report.add("nats-server started on them", mesh.server_start_seconds, "s")
    report.add("seat started (buckets, registry, serving)", mesh.seat_start_seconds, "s")


def honest_figures_of(report: Report, soaked: Soaked, sizes: SoakSizes) -> None:
    honest, checked = soaked.honest, soaked.checked
    report.add(f"honest load: nodes arriving a second (of {sizes.nodes:,})", sizes.rate, "nodes/s")
    report.add("honest load: seconds between a node's reconciles", sizes.every, "s")
    report.add("honest nodes registered (first reconcile)", honest["registered"], "nodes")
    report.add("honest reconciles completed after registering", honest["reconciled_after_registering"], "")
    failed = honest["failed"]
    report.add("honest reconciles failed", failed, "", target="= 0", met=failed == 0)
    refused = honest["writes_refused"]
    report.add("honest writes", honest["writes"], "writes")
    report.add("honest writes refused", refused, "writes", target="= 0", met=refused == 0)
    again = honest["writes_after_registering"]
    report.add("honest writes after registering (their keys put back)", again, "writes", target="= 0", met=again == 0)
    report.add("honest registration p50", honest["registration_p50_ms"], "ms")
    report.add("honest registration p99", honest["registration_p99_ms"], "ms")
    report.add("honest later reconcile p50", honest["reconcile_p50_ms"], "ms")
    report.add("honest later reconcile p99", honest["reconcile_p99_ms"], "ms")
    report.add("honest reconciles under way at once, most", honest["most_at_once"], "")
    report.add("honest keys checked against what their node wrote", checked.keys, "keys")
    changed = len(checked.changed)
    report.add("honest keys changed by anyone but their node", changed, "keys", target="= 0", met=changed == 0)
    report.add("honest leases not released at the end", checked.leases_held, "leases")
    for reason, count in honest["failures"].items():
        print(f"  honest failure x{count}: {reason}")
    for change in checked.changed[:20]:
        print(f"  changed: {change}")


def operator_figures(report: Report, soaked: Soaked) -> None:
    idle, busy = soaked.idle, soaked.busy
    report.add(f"operator what=registry p50, idle ({len(idle.registry):,} samples)", idle.of("registry").p50_ms, "ms")
    report.add("operator what=registry p99, idle", idle.of("registry").p99_ms, "ms")
    report.add(f"operator what=registry p50, soak ({len(busy.registry):,} samples)", busy.of("registry").p50_ms, "ms")
    report.add("operator what=registry p99, soak", busy.of("registry").p99_ms, "ms")
    ratio = busy.of("registry").p99_ms / idle.of("registry").p99_ms
    report.add("operator what=registry p99, soak / idle", ratio, "x", target="<= 2", met=ratio <= 2)
    report.add("  echo in the operator's account p99, idle", idle.of("echo").p99_ms, "ms")
    report.add("  echo in the operator's account p99, soak", busy.of("echo").p99_ms, "ms")
    report.add("  echo p99, soak / idle", busy.of("echo").p99_ms / idle.of("echo").p99_ms, "x")
    report.add(f"operator what=nodes p50, soak ({len(busy.nodes)} asked)", busy.of("nodes").p50_ms, "ms")
    report.add("operator what=nodes p99, soak", busy.of("nodes").p99_ms, "ms")
    failures = sum(busy.failures.values()) + sum(idle.failures.values())
    report.add("operator requests failed", failures, "", target="= 0", met=failures == 0)
    for reason, count in (busy.failures + idle.failures).most_common():
        print(f"  operator failure x{count}: {reason}")


def hostile_figures_of(report: Report, soaked: Soaked) -> None:
    hostile = soaked.hostile
    verdict, because = soaked.verdict
    over = verdict == "over-quota"
    report.add(f"{HOSTILE} shown over-quota to the operator", int(over), "yes=1", target="= 1", met=over)
    print(f"  {HOSTILE} is shown {verdict}: {because}")
    if "fill" in hostile:
        fill = hostile["fill"]
        report.add(f"{HOSTILE} fill: puts stored", fill["stored"], "puts")
        report.add(f"{HOSTILE} fill: write rate", fill["mb_per_second"], "MB/s")
        report.add(f"{HOSTILE} fill: puts refused", fill["refused"], "puts")
    for way, outcomes in hostile.get("listings", {}).items():
        if isinstance(outcomes, dict):
            report.add(f"{HOSTILE} listings {way}: asked", sum(outcomes.values()), "")
            print(f"  {HOSTILE} listings {way}: {outcomes}")
    if "churn" in hostile:
        churn = hostile["churn"]
        report.add(f"{HOSTILE} churn: cycles", churn["cycles"], "")
        report.add(f"{HOSTILE} churn: most connections held at once", churn["most_connections_held"], "")
        report.add(f"{HOSTILE} churn: most subscriptions asked on one", churn["most_subscriptions_held"], "")
        print(f"  {HOSTILE} churn refusals: {churn['connection_refused_why']}; {churn['subscription_refused_why']}")
    for what, outcomes in hostile.get("requests", {}).items():
        report.add(f"{HOSTILE} requests, {what}: sent", sum(outcomes.values()), "")
        print(f"  {HOSTILE} requests, {what}: {outcomes}")


def seat_figures(report: Report, soaked: Soaked) -> None:
    for name, seen in soaked.bytes.items():
        short = name.rsplit("_", 1)[1]
        report.add(f"{short} bucket bytes, peak seen (every 0.2 s)", seen.peak / MB, "MB")
        under = seen.last < seen.bound
        report.add(
            f"{short} bucket bytes at the end", seen.last / MB, "MB", target=f"< {seen.bound / MB:,.0f}", met=under
        )
    report.add("seat RSS before the soak", soaked.rss_before, "MB")
    most_at, most = max(soaked.rss, key=lambda sample: sample[1], default=(0.0, 0.0))
    report.add(f"seat RSS, most during the soak (at {most_at:g} s)", most, "MB")
    report.add("seat RSS after the soak", soaked.rss_after, "MB")
    report.add("seat peak RSS (VmHWM)", soaked.rss_peak, "MB")
    for name, seconds in soaked.cpu.items():
        report.add(f"CPU during the soak: {name}", seconds, "s")
    report.add("  of the machine's CPU during the soak (2 cores)", sum(soaked.cpu.values()), "s")
    for mark, what in SEAT_MARKS.items():
        report.add(f"seat log: {what}", soaked.seat_log[mark], "lines")
    report.add("seat's connection closed by nats-server as a slow consumer", soaked.slow_consumers, "times")


def details_of(soaked: Soaked, sizes: SoakSizes, jwt: bool) -> dict[str, Any]:
    return {
        "mode": "jwt" if jwt else "static",
        "sizes": {k: v for k, v in sizes.__dict__.items() if k != "seat"} | {"seat": dict(sizes.seat)},
        "honest": soaked.honest,
        "hostile": soaked.hostile,
        "verdict": {"node": HOSTILE, "verdict": soaked.verdict[0], "because": soaked.verdict[1]},
        "changed": soaked.checked.changed[:1000],
        "operator_failures": dict(soaked.busy.failures + soaked.idle.failures),
        "buckets": {name: seen.__dict__ for name, seen in soaked.bytes.items()},
        "seat_log": soaked.seat_log,
        "slow_consumers": soaked.slow_consumers,
        "seat_rss_every_second": soaked.rss,
    }
