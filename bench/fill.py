"""`python -m bench --fill`: nodes filling the needs bucket at its default size.

A mesh of static accounts (JWT with `jwt`; the filling nodes, n2 and an operator) with the seat's defaults (buckets
of 1 GiB, quotas of 20,000 keys and 64 MiB a node and bucket). Each filler (`bench.hostile`'s fill,
a process of its own: n1, then n3, n4, ...) writes values of `value_bytes` (near the bucket's
largest unless told; in a header of each put with `in_headers`) under its own keys as fast as the
acknowledgements come back, for `seconds`; meanwhile and for `after` seconds more, n2 puts its own
need and the seat its own key every `every` seconds, and the bucket's bytes are polled every 0.2 s.
Then: how many of n2's and the seat's writes were refused (target 0) and how many of their keys the
bucket holds at the end (target: every write made), whether an operator is shown each filler over
quota, the bucket's bytes at the end against its bound, the fillers' writes stored against those
the seat purged, the peak bytes seen, and the fillers' write rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench.cases import Report
from bench.harness import ROOT
from bench.hostile import VALUE_SIZE
from bench.mesh import OPERATOR, SEAT, Access, bench_mesh, child_command, child_environment, node
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
from registry.wire import Bus, connect, snapshot

OTHER = "n2"
FILLERS = ("n1", "n3", "n4", "n5", "n6")
NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'
SEAT_KEY = "seat-check.web.config.v{}"  # the seat's own put in the needs bucket, under no node's keys
OTHER_KEY = f"{OTHER}.web.config.v{{}}"
MB = 1e6


@dataclass(frozen=True)
class FillSizes:
    seconds: float = 60.0
    after: float = 10.0  # n2 and the seat keep writing this long after n1 stopped
    every: float = 0.1
    writers: int = 8
    seat: Mapping[str, object] = field(default_factory=dict)  # the seat's settings: its defaults
    in_headers: bool = False  # the fill's bytes in a header of each put (`{}` as the value)
    fillers: int = 1  # how many nodes fill at once, each a process of its own
    value_bytes: int = VALUE_SIZE  # of each put of the fill (small: many keys)
    jwt: bool = False  # JWT accounts instead of static ones

    @property
    def filling(self) -> tuple[str, ...]:
        return FILLERS[: self.fillers]


@dataclass
class Filled:
    """What was seen: the fill's own figures, the others' writes, the bucket's bytes, what n1 held
    at the end and how the operator was shown n1."""

    hostile: dict[str, dict[str, Any]]  # by filler
    others: list[Writes]
    kept: list[int]  # of each of `others`, the keys its writes left in the bucket at the end
    peak: int
    end: int
    bound: int
    held: dict[str, tuple[int, int]]  # by filler: keys, bytes
    shown: dict[str, tuple[str, str]]  # by filler: verdict, why
    commands: dict[str, list[str]]  # by operator command: the fillers it shows on an over-quota line
    seat_log: dict[str, int]
    slow_consumers: int

    def fill(self, figure: str) -> int:
        return sum(int(hostile["fill"][figure]) for hostile in self.hostile.values())

    def fill_rate(self, figure: str) -> float:
        return sum(float(hostile["fill"][figure]) for hostile in self.hostile.values())


async def run_fill(state: Path, sizes: FillSizes) -> tuple[Report, dict[str, Any]]:
    async with bench_mesh(state, nodes=(*sizes.filling, OTHER), jwt=sizes.jwt, seat=sizes.seat) as mesh:
        access = mesh.access
        async with connect(access.options(SEAT)) as seat, connect(access.options(node(OTHER))) as other:
            poll = BucketPoll(seat, [buckets.NEEDS])
            others = [Writes(f"{OTHER} (its own need)"), Writes("the seat (its own key)")]
            hostile: dict[str, dict[str, Any]] = {}

            async def filler(name: str) -> None:
                args = [*access.argv(), "--node", name, "--seconds", str(sizes.seconds), "--acts", "fill"]
                args += ["--buckets", "needs", "--writers", str(sizes.writers), "--value-bytes", str(sizes.value_bytes)]
                args += ["--in-headers"] if sizes.in_headers else []
                hostile[name] = await child_figures("bench.hostile", args, state / f"hostile-{name}.json")

            print(f"{', '.join(sizes.filling)} filling {buckets.NEEDS.name} for {sizes.seconds:g} s", flush=True)
            async with anyio.create_task_group() as tg:
                await tg.start(poll.poll)
                for writes, bus, key in ((others[0], other, OTHER_KEY), (others[1], seat, SEAT_KEY)):
                    tg.start_soon(writes.keep_writing, bus, buckets.NEEDS, key, NEED, sizes.every)
                async with anyio.create_task_group() as fillers:
                    for name in sizes.filling:
                        fillers.start_soon(filler, name)
                await anyio.sleep(sizes.after)
                tg.cancel_scope.cancel()
            await poll.once()
            held = {name: await held_by(seat, name) for name in sizes.filling}
            kept = [await keys_of(seat, key) for key in (OTHER_KEY, SEAT_KEY)]
            end = int((await stream_state(seat, buckets.NEEDS))["state"]["bytes"])
            async with connect(access.options(OPERATOR)) as ops:
                shown = await nodes_shown(ops, patiently=True)
            commands = {" ".join(command): await over_quota_in(access, command) for command in OPERATOR_COMMANDS}
        seen = poll.seen[buckets.NEEDS.name]
        filled = Filled(
            hostile=hostile,
            others=others,
            kept=kept,
            peak=seen.peak,
            end=end,
            bound=seen.bound,
            held=held,
            shown={name: (shown[name].verdict, shown[name].because) for name in sizes.filling},
            commands={command: sorted(set(sizes.filling) & found) for command, found in commands.items()},
            seat_log=log_lines(mesh.seat_log, *SEAT_MARKS),
            slow_consumers=log_lines(mesh.server_log, SLOW_CONSUMER)[SLOW_CONSUMER],
        )
    return report_of(filled, sizes), details_of(filled)


async def held_by(seat: Bus, name: str) -> tuple[int, int]:
    """The keys `name` holds in the needs bucket and their bytes as the stream counts them (headers too)."""
    held = await snapshot(seat, buckets.NEEDS, [f"{name}.>"], headers_only=True)
    return len(held), sum(max(item.stored, 0) for item in held)


OPERATOR_COMMANDS = (("query", "nodes"), ("top", "--once"))


async def over_quota_in(access: Access, command: tuple[str, ...]) -> set[str]:
    """The nodes `mesh-provisioner <command>`, run as the operator, prints on a line saying over-quota."""
    argv = child_command("provisioner.commands.cli", *command, "--nats-url", access.url, *access.flags(OPERATOR))
    done = await anyio.run_process(argv, cwd=ROOT, env=child_environment(), check=False)
    lines = done.stdout.decode(errors="replace").splitlines()
    return {line.split()[0] for line in lines if "over-quota" in line.split()[1:2]}


async def keys_of(seat: Bus, key_of: str) -> int:
    """How many keys the needs bucket holds under the first token of `key_of` (the writer's alone)."""
    return len(await snapshot(seat, buckets.NEEDS, [f"{key_of.split('.', maxsplit=1)[0]}.>"], headers_only=True))


def report_of(filled: Filled, sizes: FillSizes) -> Report:
    report = Report()
    fillers = ", ".join(sizes.filling)
    how = f"{sizes.value_bytes:,} bytes a put{' in a header' if sizes.in_headers else ''}"
    print(f"\n{fillers} filling {buckets.NEEDS.name} (default sizes; {how}) for {sizes.seconds:g} s")
    report.add(f"{fillers}: puts stored", filled.fill("stored"), "puts")
    report.add(f"{fillers}: bytes stored", filled.fill("stored_bytes") / MB, "MB")
    report.add(f"{fillers}: write rate", filled.fill_rate("mb_per_second"), "MB/s")
    report.add(f"{fillers}: write rate (puts)", filled.fill_rate("puts_per_second"), "puts/s")
    report.add(f"{fillers}: puts refused", filled.fill("refused"), "puts")
    held_keys = sum(keys for keys, _ in filled.held.values())
    report.add(f"{fillers}: keys held at the end", held_keys, "keys")
    report.add(f"{fillers}: bytes held at the end", sum(size for _, size in filled.held.values()) / MB, "MB")
    report.add(f"{fillers}: puts stored then purged by the seat", filled.fill("stored") - held_keys, "puts")
    for writes, kept in zip(filled.others, filled.kept, strict=True):
        refused = sum(writes.refused.values())
        report.add(f"{writes.who}: writes", writes.made, "writes")
        report.add(f"{writes.who}: writes refused", refused, "writes", target="= 0", met=refused == 0)
        stored = writes.made - refused  # and a put in flight when the writer stopped, which may be stored too
        report.add(
            f"{writes.who}: keys in the bucket at the end", kept, "keys", target=f">= {stored}", met=kept >= stored
        )
        report.add(f"{writes.who}: write p99", writes.latency().p99_ms, "ms")
    over = sum(verdict == "over-quota" for verdict, _ in filled.shown.values())
    report.add(
        "fillers shown over-quota to the operator",
        over,
        "nodes",
        target=f"= {len(filled.shown)}",
        met=over == len(filled.shown),
    )
    report.add("bucket bytes, peak seen (polled every 0.2 s)", filled.peak / MB, "MB")
    under = filled.end < filled.bound
    report.add("bucket bytes at the end", filled.end / MB, "MB", target=f"< {filled.bound / MB:,.0f}", met=under)
    report.add("bucket bound (max_bytes)", filled.bound / MB, "MB")
    for mark, what in SEAT_MARKS.items():
        report.add(f"seat log: {what}", filled.seat_log[mark], "lines")
    report.add("seat's connection closed by nats-server as a slow consumer", filled.slow_consumers, "times")
    for command, named in filled.commands.items():
        met = len(named) == len(filled.shown)
        report.add(
            f"fillers on an over-quota line of {command}", len(named), "nodes", target=f"= {len(filled.shown)}", met=met
        )
    for name, (verdict, because) in filled.shown.items():
        print(f"  {name} is shown {verdict}: {because}")
    return report


def details_of(filled: Filled) -> dict[str, Any]:
    return {
        "hostile": filled.hostile,
        "others": {w.who: w.figures() | {"kept": kept} for w, kept in zip(filled.others, filled.kept, strict=True)},
        "shown": {name: {"verdict": verdict, "because": because} for name, (verdict, because) in filled.shown.items()},
        "bucket": {"peak": filled.peak, "end": filled.end, "bound": filled.bound},
        "held": {name: {"keys": keys, "bytes": size} for name, (keys, size) in filled.held.items()},
        "commands": filled.commands,
        "seat_log": filled.seat_log,
        "slow_consumers": filled.slow_consumers,
    }
