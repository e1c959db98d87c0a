"""What the multi-party benchmarks (`--fill`, `--soak`) see from outside the parties: the buckets'
bytes polled, writes made at a steady pace and how they were answered, what an operator is shown
of the nodes, a process's CPU and memory, the seat's log, and the figures a child process wrote."""

from __future__ import annotations

import json
import os
import resource
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from bench.harness import ROOT, Latency, rss_mb
from bench.mesh import child_command, child_environment
from registry.contract import Bucket, NodeRow
from registry.errors import BusError
from registry.wire import Bus, answer_of, answer_patiently, put

REASON_CHARS = 160


async def stream_state(bus: Bus, bucket: Bucket) -> dict[str, Any]:
    info = await bus.jetstream(bucket.info_api, operation=f"info of {bucket.name}")
    return dict(info)


@dataclass
class Bytes:
    """A bucket's bytes: its bound (`max_bytes`), the most seen, the latest."""

    bound: int
    peak: int = 0
    last: int = 0


class BucketPoll:
    """Each bucket's bytes as STREAM.INFO tells them, every `every` seconds, until cancelled."""

    def __init__(self, seat: Bus, watched: Sequence[Bucket], every: float = 0.2) -> None:
        self.seat = seat
        self.watched = watched
        self.every = every
        self.seen: dict[str, Bytes] = {}

    async def poll(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        for bucket in self.watched:
            info = await stream_state(self.seat, bucket)
            self.seen[bucket.name] = Bytes(int(info["config"]["max_bytes"]))
        task_status.started()
        while True:
            await self.once()
            await anyio.sleep(self.every)

    async def once(self) -> None:
        for bucket in self.watched:
            try:
                info = await stream_state(self.seat, bucket)
            except BusError:
                continue  # one missed poll; the next is 0.2 s away
            seen = self.seen[bucket.name]
            seen.last = int(info["state"]["bytes"])
            seen.peak = max(seen.peak, seen.last)


@dataclass
class Writes:
    """A party's writes at a steady pace: how many, which were refused and why, how long each took."""

    who: str
    made: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)

    async def keep_writing(self, bus: Bus, bucket: Bucket, key_of: str, value: bytes, every: float) -> None:
        """Puts `key_of.format(n)` for n = 0, 1, ... every `every` seconds, until cancelled."""
        number = 0
        next_at = anyio.current_time()
        while True:
            await anyio.sleep_until(next_at)
            next_at += every
            started = time.perf_counter()
            try:
                await put(bus, bucket, key_of.format(number), value)
                self.seconds.append(time.perf_counter() - started)
            except BusError as err:
                self.refused[err.reason[:REASON_CHARS]] += 1
            self.made += 1
            number += 1

    def latency(self) -> Latency:
        return Latency.of(self.seconds or [0.0])

    def figures(self) -> dict[str, Any]:
        return {"made": self.made, "refused": dict(self.refused), "p99_ms": self.latency().p99_ms}


async def nodes_shown(ops: Bus, *, patiently: bool = False) -> dict[str, NodeRow]:
    """Each node as `what=nodes` shows it to the party `ops`; `patiently` as `query nodes` asks
    (again, within a minute, while the seat does not answer or is busy), else once."""
    request = {"what": "nodes"}
    if patiently:
        answer = await answer_patiently(ops, request, within=timedelta(seconds=60))
    else:
        answer = await answer_of(ops, request, reply_wait=timedelta(seconds=60))
    return {row.node: row for row in answer.entries if isinstance(row, NodeRow)}


def cpu_seconds(pid: int) -> float:
    """The CPU time the process has used so far, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """The CPU time this process has used so far, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuUse:
    """The CPU time processes used from `start()` to `stop()`, by name."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = pids
        self.used: dict[str, float] = {}

    def start(self) -> None:
        self.used = {name: -cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> None:
        self.used = {name: used + cpu_seconds(self.pids[name]) for name, used in self.used.items()}


class RssSeries:
    """A process's resident memory every `every` seconds, until cancelled: (seconds since the start, MB)."""

    def __init__(self, pid: int, every: float = 1.0) -> None:
        self.pid = pid
        self.every = every
        self.samples: list[tuple[float, float]] = []

    async def poll(self) -> None:
        start = anyio.current_time()
        while True:
            self.samples.append((round(anyio.current_time() - start, 1), rss_mb(self.pid)))
            await anyio.sleep(self.every)


SEAT_MARKS = {
    "over quota": "over-quota warnings",
    "counted again at its next write": "quota counts that failed",
    "nats connection lost": "its connection lost",
    "ERROR": "errors",
    "Traceback": "tracebacks",
}
SLOW_CONSUMER = "Slow Consumer Detected"


def log_lines(log: Path, *marks: str) -> dict[str, int]:
    """How many lines of `log` hold each of `marks`."""
    counts = dict.fromkeys(marks, 0)
    with log.open(errors="replace") as lines:
        for line in lines:
            for mark in marks:
                counts[mark] += mark in line
    return counts


async def child_figures(module: str, args: Sequence[str], out: Path) -> dict[str, Any]:
    """Runs `python -m module args --out OUT` to its end; the JSON it wrote to OUT."""
    command = child_command(module, *args, "--out", str(out))
    await anyio.run_process(command, cwd=ROOT, env=child_environment(), stdout=None, stderr=None, check=True)
    figures: dict[str, Any] = json.loads(await anyio.Path(out).read_text())
    return figures
