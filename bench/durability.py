"""What JetStream's `sync_interval: always` costs the mesh's writes, beside the default (a sync every
two minutes): the same KV puts, awaited one at a time and pipelined, on a server of each kind.

With the default a power failure loses up to two minutes of acknowledged writes, which the mesh
recovers (`deploy/nats-server.conf`); `always` loses none and syncs every write."""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from mesh_dev.local_nats import local_nats
from provisioner.seat.buckets import ensure_buckets
from registry.contract import buckets
from registry.wire import BucketConfig, BusOptions, connect, put

SYNCS = {"default (2m)": "", "always": 'sync_interval: "always"'}


async def put_rates(folder: Path, writes: int, in_flight: int = 64) -> dict[str, dict[str, float]]:
    """Puts per second, awaited one at a time and `in_flight` at once, for each sync setting."""
    rates = {}
    for name, jetstream in SYNCS.items():
        async with local_nats(folder / name.split()[0], jetstream=jetstream) as server:
            rates[name] = await _rates_on(server.url, writes, in_flight)
    return rates


async def _rates_on(url: str, writes: int, in_flight: int) -> dict[str, float]:
    async with connect(BusOptions(servers=(url,), name="bench")) as bus:
        await ensure_buckets(bus, BucketConfig())
        return {
            "awaited": await _rate(writes, lambda n: put(bus, buckets.NEEDS, f"n.a.k{n}", b"{}")),
            "pipelined": await _pipelined(writes, in_flight, lambda n: put(bus, buckets.NEEDS, f"n.b.k{n}", b"{}")),
        }


async def _rate(writes: int, write: object) -> float:
    started = time.perf_counter()
    for n in range(writes):
        await write(n)  # type: ignore[operator]
    return writes / (time.perf_counter() - started)


async def _pipelined(writes: int, in_flight: int, write: object) -> float:
    queue = list(range(writes))

    async def worker() -> None:
        while queue:
            await write(queue.pop())  # type: ignore[operator]

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(in_flight):
            tg.start_soon(worker)
    return writes / (time.perf_counter() - started)
