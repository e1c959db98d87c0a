"""What every measurement needs: processes to measure, fast loading of keys, and statistics."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from nats.aio.client import Client

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Latency:
    count: int
    p50_ms: float
    p99_ms: float

    @staticmethod
    def of(samples: Sequence[float]) -> Latency:
        ordered = sorted(samples)
        return Latency(len(ordered), _at(ordered, 0.50) * 1e3, _at(ordered, 0.99) * 1e3)


def _at(ordered: Sequence[float], quantile: float) -> float:
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def sequential_latency(call: Callable[[], Awaitable[object]], count: int) -> Latency:
    return Latency.of([await timed(call) for _ in range(count)])


async def throughput(call: Callable[[], Awaitable[object]], *, workers: int, per_worker: int) -> float:
    """Requests per second with `workers` concurrent requesters."""

    async def worker() -> None:
        for _ in range(per_worker):
            await call()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker)
    return workers * per_worker / (time.perf_counter() - started)


def peak_rss_mb(pid: int | str) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    return _status_mb(pid, "VmHWM")


def cpu_seconds(pid: int | str) -> float:
    """The CPU time the process has used (user and system), in seconds: what it costs, whatever
    else the shared machine runs meanwhile."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int | str) -> float:
    """The process's resident set now (VmRSS), in MB."""
    return _status_mb(pid, "VmRSS")


def _status_mb(pid: int | str, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


@asynccontextmanager
async def python_process(
    args: Sequence[str],
    *,
    ready: Callable[[], Awaitable[bool]],
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    within: float = 30,
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A Python child process of this project, until the block exits; ready when `ready()` says so
    (within `within` seconds). Its stderr goes to `log` when given, else to ours."""
    environment = dict(env) if env is not None else {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") if log is not None else contextlib.nullcontext() as stderr:
        process = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            with anyio.fail_after(within):
                while not await ready():
                    if process.poll() is not None:
                        raise RuntimeError(f"{' '.join(args)} exited with {process.returncode}")
                    await anyio.sleep(0.05)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def answers(nc: Client, subject: str, payload: bytes = b"") -> bool:
    try:
        await nc.request(subject, payload, timeout=0.5)
    except Exception:
        return False
    return True


async def load_keys(nc: Client, bucket: str, items: Sequence[tuple[str, bytes]]) -> None:
    """Writes `items` into a KV bucket quickly: plain publishes to `$KV.<bucket>.<key>` (the stream
    stores them), then waits until the stream holds them all."""
    js = nc.jetstream()
    before = (await js.stream_info(f"KV_{bucket}")).state.messages
    for index, (key, value) in enumerate(items):
        await nc.publish(f"$KV.{bucket}.{key}", value)
        if index % 5000 == 4999:
            await nc.flush()
    await nc.flush()
    with anyio.fail_after(120):
        while (await js.stream_info(f"KV_{bucket}")).state.messages < before + len(items):
            await anyio.sleep(0.05)


def write_json(path: Path, figures: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2, default=lambda o: o.__dict__) + "\n")
