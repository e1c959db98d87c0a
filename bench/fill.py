"""`python -m bench --fill`: a node filling the needs bucket at its default size.

A mesh of static accounts (nodes n1 and n2, an operator) with the seat's defaults (buckets of
1 GiB, quotas of 20,000 keys and 64 MiB a node and bucket). n1 (`bench.hostile`'s fill, a process
of its own) writes values near the bucket's largest under its own keys as fast as the
acknowledgements come back, for `seconds`; meanwhile and for `after` seconds more, n2 puts its own
need and the seat its own key every `every` seconds, and the bucket's bytes are polled every 0.2 s.
Then: how many of n2's and the seat's writes were refused (target 0), whether an operator is
shown n1 over quota, the bucket's bytes at the end against its bound, n1's writes stored against
those the seat purged, the peak bytes seen, and n1's write rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench.cases import Report
from bench.mesh import OPERATOR, SEAT, bench_mesh, node
from bench.observe import (
    SEAT_MARKS,
    SLOW_CONSUMER,
    BucketPoll,
    Writes,
    child_figures,
    log_lines,
    nodes_shown,
    stream_state,
)
from registry.contract import buckets
from registry.wire import connect, snapshot

FILLER, OTHER = "n1", "n2"
NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'
SEAT_KEY = "seat-check.web.config.v{}"  # the seat's own put in the needs bucket, under no node's keys
MB = 1e6


@dataclass(frozen=True)
class FillSizes:
    seconds: float = 60.0
    after: float = 10.0  # n2 and the seat keep writing this long after n1 stopped
    every: float = 0.1
    writers: int = 8
    seat: Mapping[str, object] = field(default_factory=dict)  # the seat's settings: its defaults
    in_headers: bool = False  # the fill's bytes in a header of each put (`{}` as the value)


@dataclass
class Filled:
    """What was seen: the fill's own figures, the others' writes, the bucket's bytes, what n1 held
    at the end and how the operator was shown n1."""

    hostile: dict[str, Any]
    others: list[Writes]
    peak: int
    end: int
    bound: int
    held_keys: int
    held_bytes: int
    verdict: str
    because: str
    seat_log: dict[str, int]
    slow_consumers: int


async def run_fill(state: Path, sizes: FillSizes) -> tuple[Report, dict[str, Any]]:
    async with bench_mesh(state, nodes=(FILLER, OTHER), seat=sizes.seat) as mesh:
        access = mesh.access
        async with connect(access.options(SEAT)) as seat, connect(access.options(node(OTHER))) as other:
            poll = BucketPoll(seat, [buckets.NEEDS])
            others = [Writes(f"{OTHER} (its own need)"), Writes("the seat (its own key)")]
            args = [*access.argv(), "--node", FILLER, "--seconds", str(sizes.seconds)]
            args += ["--acts", "fill", "--buckets", "needs", "--writers", str(sizes.writers)]
            args += ["--in-headers"] if sizes.in_headers else []
            print(f"{FILLER} filling {buckets.NEEDS.name} for {sizes.seconds:g} s; {OTHER} and the seat writing")
            async with anyio.create_task_group() as tg:
                await tg.start(poll.poll)
                for writes, bus, key in ((others[0], other, "n2.web.config.v{}"), (others[1], seat, SEAT_KEY)):
                    tg.start_soon(writes.keep_writing, bus, buckets.NEEDS, key, NEED, sizes.every)
                hostile = await child_figures("bench.hostile", args, state / "hostile.json")
                await anyio.sleep(sizes.after)
                tg.cancel_scope.cancel()
            await poll.once()
            held = await snapshot(seat, buckets.NEEDS, [f"{FILLER}.>"], headers_only=True)
            end = int((await stream_state(seat, buckets.NEEDS))["state"]["bytes"])
            async with connect(access.options(OPERATOR)) as ops:
                shown = (await nodes_shown(ops, patiently=True))[FILLER]
        seen = poll.seen[buckets.NEEDS.name]
        filled = Filled(
            hostile=hostile,
            others=others,
            peak=seen.peak,
            end=end,
            bound=seen.bound,
            held_keys=len(held),
            held_bytes=sum(max(item.stored, 0) for item in held),  # as the stream counts them, headers too
            verdict=shown.verdict,
            because=shown.because,
            seat_log=log_lines(mesh.seat_log, *SEAT_MARKS),
            slow_consumers=log_lines(mesh.server_log, SLOW_CONSUMER)[SLOW_CONSUMER],
        )
    return report_of(filled, sizes), details_of(filled)


def report_of(filled: Filled, sizes: FillSizes) -> Report:
    report = Report()
    fill = filled.hostile["fill"]
    print(f"\n{FILLER} filling {buckets.NEEDS.name} (default sizes) for {sizes.seconds:g} s")
    report.add(f"{FILLER}: puts stored", fill["stored"], "puts")
    report.add(f"{FILLER}: bytes stored", fill["stored_bytes"] / MB, "MB")
    report.add(f"{FILLER}: write rate", fill["mb_per_second"], "MB/s")
    report.add(f"{FILLER}: write rate (puts)", fill["puts_per_second"], "puts/s")
    report.add(f"{FILLER}: puts refused", fill["refused"], "puts")
    report.add(f"{FILLER}: keys held at the end", filled.held_keys, "keys")
    report.add(f"{FILLER}: bytes held at the end", filled.held_bytes / MB, "MB")
    report.add(f"{FILLER}: puts stored then purged by the seat", fill["stored"] - filled.held_keys, "puts")
    for writes in filled.others:
        refused = sum(writes.refused.values())
        report.add(f"{writes.who}: writes", writes.made, "writes")
        report.add(f"{writes.who}: writes refused", refused, "writes", target="= 0", met=refused == 0)
        report.add(f"{writes.who}: write p99", writes.latency().p99_ms, "ms")
    over = filled.verdict == "over-quota"
    report.add(f"{FILLER} shown over-quota to the operator", int(over), "yes=1", target="= 1", met=over)
    report.add("bucket bytes, peak seen (polled every 0.2 s)", filled.peak / MB, "MB")
    under = filled.end < filled.bound
    report.add("bucket bytes at the end", filled.end / MB, "MB", target=f"< {filled.bound / MB:,.0f}", met=under)
    report.add("bucket bound (max_bytes)", filled.bound / MB, "MB")
    for mark, what in SEAT_MARKS.items():
        report.add(f"seat log: {what}", filled.seat_log[mark], "lines")
    report.add("seat's connection closed by nats-server as a slow consumer", filled.slow_consumers, "times")
    print(f"  {FILLER} is shown {filled.verdict}: {filled.because}")
    return report


def details_of(filled: Filled) -> dict[str, Any]:
    return {
        "hostile": filled.hostile,
        "others": {w.who: w.figures() for w in filled.others},
        "verdict": {"node": FILLER, "verdict": filled.verdict, "because": filled.because},
        "bucket": {"peak": filled.peak, "end": filled.end, "bound": filled.bound},
        "held": {"keys": filled.held_keys, "bytes": filled.held_bytes},
        "seat_log": filled.seat_log,
        "slow_consumers": filled.slow_consumers,
    }
