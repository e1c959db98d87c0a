"""`python -m bench.nodes`: what `what=nodes` costs at mesh scale.

Fills a fresh nats-server with `--nodes` leases and `--nodes` x `--modules` applied records, then
times, in this process: the one-shot listing the verb falls back to (`read_fleet`, whole and for
one node), how long the seat's kept view (`FleetView`) takes to fill and how much memory it holds,
and an answer built from it (whole fleet, one node). Prints one JSON object of figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from mesh_dev.local_nats import local_nats
from provisioner.seat.buckets import ensure_buckets
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from provisioner.verb.nodes import FleetView, answer_pages, read_fleet
from provisioner.verb.request import Query
from registry.contract import buckets
from registry.wire import BucketConfig, Bus, BusOptions, Holder, answer_of, connect, node_key, put

SEAT_SETTLE = 15.0  # seconds: 100,000 applied keys fill the view in about 4 s on the shared machine
WAIT = timedelta(seconds=60)
BUDGET = 1024 * 1024 - 32 * 1024 - 512  # a page under the default max_payload (provisioner.verb.pages.page_budget)


async def fill(bus: Bus, nodes: int, modules: int) -> None:
    holder = Holder.me(timedelta(seconds=15)).model_dump_json().encode()
    for n in range(nodes):
        await bus.publish(buckets.LEASES.subject(node_key(f"n{n:04}")), holder)
        for m in range(modules):
            value = b'{"state":"%s","digest":"hmac-sha256:0011","changed_at":"2026-01-01T00:00:00Z"}' % (
                b"pending" if m % 10 == 0 else b"applied"
            )
            if n % 50 == 49 and m == modules - 1:
                # acknowledged: nats-server drops what overflows a stream's ingest queue, silently
                # for a plain publish; the stream stores one connection's messages in order
                await put(bus, buckets.APPLIED, f"n{n:04}.m{m:03}", value)
            else:
                await bus.publish(buckets.APPLIED.subject(f"n{n:04}.m{m:03}"), value)
    await put(bus, buckets.APPLIED, "n0000.m000", b'{"state":"pending"}')


def rss_mb() -> float:
    """This process's resident memory (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await call()
    return (time.perf_counter() - started) * 1000, result


async def measure(url: str, nodes: int, modules: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"nodes": nodes, "modules_per_node": modules}
    async with connect(BusOptions(servers=(url,), name="bench-nodes", request_timeout=timedelta(seconds=60))) as bus:
        await ensure_buckets(bus, BucketConfig())
        started = time.perf_counter()
        await fill(bus, nodes, modules)
        figures["fill_s"] = round(time.perf_counter() - started, 1)
        figures["listing_whole_ms"], fleet = await timed(lambda: read_fleet(bus, None))
        figures["listing_one_node_ms"], _ = await timed(lambda: read_fleet(bus, "n0500"))
        del fleet
        gc.collect()
        rss_before = rss_mb()
        view = FleetView()
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            await tg.start(view.follow, bus)
            while not view.ready:
                await anyio.sleep(0.01)
            figures["view_fill_ms"] = (time.perf_counter() - started) * 1000
            gc.collect()
            figures["view_rss_growth_mb"] = rss_mb() - rss_before
            now = datetime.now(UTC)
            for name, query in (
                ("answer_whole_first_ms", Query(what="nodes")),  # counts every node's modules
                ("answer_whole_ms", Query(what="nodes")),  # the counts kept since
                ("answer_one_node_ms", Query(what="nodes", node="n0500")),
            ):
                started = time.perf_counter()
                pages = await answer_pages(view, query, budget=BUDGET, cursor_of=str, now=now)
                figures[name] = (time.perf_counter() - started) * 1000
                figures[name.replace("_ms", "_bytes")] = sum(len(page) for page in pages)
            tg.cancel_scope.cancel()
        figures |= await through_the_seat(bus)
    return {key: round(value, 1) if isinstance(value, float) else value for key, value in figures.items()}


async def through_the_seat(bus: Bus, asks: int = 20) -> dict[str, float]:
    """The verb's answers end to end, from a seat started now: its first (listed, the view still
    filling), then the median of `asks` once its view has had `SEAT_SETTLE` to fill."""
    figures: dict[str, float] = {}
    stop = anyio.Event()
    run = partial(
        run_server,
        bus_options=BusOptions(servers=bus.options.servers, name=buckets.SEAT),
        settings=ServerSettings(),
        stop=stop,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(run)
        figures["seat_first_answer_ms"], _ = await timed(lambda: answer_of(bus, {"what": "nodes"}, reply_wait=WAIT))
        await anyio.sleep(SEAT_SETTLE)
        for name, request in (("seat_whole", {"what": "nodes"}), ("seat_one_node", {"what": "nodes", "node": "n0500"})):
            times = [(await timed(lambda r=request: answer_of(bus, r, reply_wait=WAIT)))[0] for _ in range(asks)]
            figures[f"{name}_p50_ms"] = sorted(times)[len(times) // 2]
        stop.set()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.nodes", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--modules", type=int, default=100)
    args = parser.parse_args()

    async def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as state:
            async with local_nats(Path(state)) as server:
                return await measure(server.url, args.nodes, args.modules)

    print(json.dumps(anyio.run(run), indent=2))


if __name__ == "__main__":
    main()
