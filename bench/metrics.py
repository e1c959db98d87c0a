"""What scraping the seat's Prometheus endpoint costs it under verb load: the `metrics` part of
`python -m bench` ("scrape cost"); `python -m bench.metrics` runs it alone, with its sizes as options.

The seat runs in its own process with `--metrics-listen`, on a nats-server of its own (the other
parts' seat would share the requests). Its fleet: `nodes` nodes (1,000 by default), each holding
a lease and with `modules` modules' applied records, as `bench.register` leaves a node; the seat's
view of them is counted by verdict at every scrape (`mesh_seat_nodes`), and the measurement starts
once a scrape shows them all. First, the seat's CPU a scrape with nothing else to do. Then rounds
of `what=registry` from 50 requesters (the bench's verb load) alternate without and with a scraper
in a process of its own asking `/metrics` every `every` seconds (its first ask as the round
starts), in ABBA order, so that a noisy moment and the second round of a pair (slower, whichever
it is: a scraper asking once a round still showed 12 % in AB order) hit both sides alike. Shown:
each side's median throughput and the seat's own CPU a request over its rounds (from /proc: what
the scrapes cost the seat, whatever else the machine runs), throughput with scraping against
without (target: at least 0.95, under 5 % lost; beside it, the median of each pair's, a round
against the other side's round next to it), and what the scrapes' CPU alone would take of the
seat's under load (a figure the machine's noise moves less)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import nats
from anyio.abc import Process
from nats.aio.client import Client

from bench.cases import Report, ask_registry
from bench.harness import answers, load_keys, median, python_process, throughput
from bench.register import MODULES, applied_of
from mesh_dev.local_nats import local_nats
from registry.contract import buckets
from registry.wire import Holder

PART = "metrics"
TARGET = 0.95  # throughput scraping / without: under 5 % lost
NODES_SERIES = "mesh_seat_nodes{"


@dataclass(frozen=True)
class MetricsSizes:
    nodes: int = 1000
    modules: int = MODULES  # applied records a node
    rounds: int = 15  # on each side
    workers: int = 50
    per_worker: int = 300
    every: float = 1.0  # seconds between scrapes
    scrapes: int = 100  # asked one after the other, for the CPU of one

    @staticmethod
    def quick() -> MetricsSizes:
        return MetricsSizes(rounds=3, per_worker=100, scrapes=20)

    @property
    def requests(self) -> int:
        return self.workers * self.per_worker


@dataclass(frozen=True)
class Side:
    """One side's rounds: requests a second, and the seat's CPU seconds, in each."""

    rates: list[float]
    cpus: list[float]
    requests_a_round: int

    @property
    def rate(self) -> float:
        return median(self.rates)

    @property
    def cpu(self) -> float:
        """The seat's CPU seconds a request over all the side's rounds: /proc counts in ticks of
        10 ms, a few dozen a round, too coarse for one round's figure."""
        return sum(self.cpus) / (len(self.cpus) * self.requests_a_round)


@dataclass(frozen=True)
class Measured:
    alone: float  # the seat's CPU seconds a scrape, with nothing else to do
    quiet: Side
    scraped: Side
    scrapes_made: int


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """The user and system CPU `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def fill_fleet(nc: Client, sizes: MetricsSizes) -> None:
    """`sizes.nodes` nodes, each holding a lease (an hour's: healthy throughout) and with
    `sizes.modules` modules' applied records."""
    holder = Holder.me(timedelta(hours=1)).model_dump_json().encode()
    names = [f"n{node:05d}" for node in range(sizes.nodes)]
    leases = [(buckets.LEASES.shape.build(role="node", name=name), holder) for name in names]
    await load_keys(nc, buckets.LEASES.name, leases)
    applied = [item for name in names for item in list(applied_of(name).items())[: sizes.modules]]
    await load_keys(nc, buckets.APPLIED.name, applied)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url) as answer:  # noqa: S310 -- the seat's loopback endpoint
        text: str = answer.read().decode()
        return text


def nodes_counted(text: str) -> int:
    """The nodes a scrape counts, over every verdict."""
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(NODES_SERIES)))


async def whole_fleet_counted(url: str, nodes: int, within: float = 60) -> None:
    """Waits until a scrape counts the `nodes` nodes: the seat's view has followed them all."""
    counted = -1
    with anyio.move_on_after(within):
        while (counted := nodes_counted(await anyio.to_thread.run_sync(scrape, url))) != nodes:
            await anyio.sleep(0.2)
        return
    raise RuntimeError(f"the seat's scrape counted {counted} nodes ({NODES_SERIES}...}}), not {nodes}")


async def cpu_a_scrape(url: str, seat: int, scrapes: int) -> float:
    """The seat's CPU seconds a scrape, asked one after the other with nothing else to do."""

    def scrape_all() -> None:
        for _ in range(scrapes):
            scrape(url)

    started = cpu_seconds(seat)
    await anyio.to_thread.run_sync(scrape_all)
    return (cpu_seconds(seat) - started) / scrapes


# Asks `url` every `every` seconds while on, the first at once. Its stdin turns it on (b"1") and
# off (b"0"): bytes queue where signals would merge, and a turn ends a wait between scrapes (the
# second round of a pair scraped had been left waiting out the first's). Writes b"r" once ready
# (Python started, imports done), then b"s" a scrape, flushed, so that the scrapes made can be
# counted; ends when its stdin closes.
SCRAPER = """
import os, select, sys, time, urllib.request
url, every = sys.argv[1], float(sys.argv[2])
scraping, due = False, 0.0
sys.stdout.write("r")
sys.stdout.flush()
while True:
    wait = max(0.0, due - time.monotonic()) if scraping else None
    if select.select([0], [], [], wait)[0]:
        turned = os.read(0, 64)
        if not turned:
            break
        scraping, due = turned.endswith(b"1"), time.monotonic()
        continue
    urllib.request.urlopen(url).read()
    sys.stdout.write("s")
    sys.stdout.flush()
    due = time.monotonic() + every
"""


async def a_round(nc: Client, seat: int, sizes: MetricsSizes, scraper: Process | None) -> tuple[float, float]:
    """Requests a second, and the seat's CPU seconds, for one round; `scraper` (started
    once, for the whole run: starting a process costs the machine too) scrapes during it."""
    started = cpu_seconds(seat)
    if scraper is not None:
        await switch(scraper, on=True)
    rate = await throughput(partial(ask_registry, nc), workers=sizes.workers, per_worker=sizes.per_worker)
    if scraper is not None:
        await switch(scraper, on=False)
    return rate, cpu_seconds(seat) - started


async def switch(scraper: Process, *, on: bool) -> None:
    assert scraper.stdin is not None
    await scraper.stdin.send(b"1" if on else b"0")


async def abba(nc: Client, seat: int, sizes: MetricsSizes, url: str) -> tuple[Side, Side, int]:
    """The rounds without and with scraping, in ABBA order, and the scrapes made."""
    quiet, scraped = Side([], [], sizes.requests), Side([], [], sizes.requests)
    async with await anyio.open_process([sys.executable, "-c", SCRAPER, url, str(sizes.every)]) as scraper:
        assert scraper.stdin is not None and scraper.stdout is not None
        with anyio.fail_after(30):
            assert await scraper.stdout.receive(1) == b"r"
        for turn in range(sizes.rounds):  # ABBA: the second round of a pair runs slower
            for side in (quiet, scraped) if turn % 2 == 0 else (scraped, quiet):
                rate, cpu = await a_round(nc, seat, sizes, scraper if side is scraped else None)
                side.rates.append(rate)
                side.cpus.append(cpu)
        await scraper.stdin.aclose()
        made = sum([chunk.count(b"s") async for chunk in scraper.stdout])
    return quiet, scraped, made


async def scrape_cost(state: Path, report: Report, sizes: MetricsSizes) -> None:
    """The part: its own nats-server under `state`, its own seat, its figures added to `report`."""
    print(f"scrape cost: the seat's /metrics scraped every {sizes.every:g} s under what=registry load")
    async with local_nats(state / "nats") as server:
        port = free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        nc = await nats.connect(server.url, name="bench-metrics")
        serve = ["-m", "provisioner.commands.cli", "serve", "--nats-url", server.url, "--metrics-listen", str(port)]
        try:
            async with python_process(serve, ready=lambda: answers(nc, "$SRV.PING.mesh-provisioner")) as seat:
                await fill_fleet(nc, sizes)
                await whole_fleet_counted(url, sizes.nodes)
                alone = await cpu_a_scrape(url, seat.pid, sizes.scrapes)
                await a_round(nc, seat.pid, sizes, None)  # warm
                measured = Measured(alone, *await abba(nc, seat.pid, sizes, url))
        finally:
            await nc.close()
    add_figures(report, sizes, measured)


def add_figures(report: Report, sizes: MetricsSizes, measured: Measured) -> None:
    alone, quiet, scraped = measured.alone, measured.quiet, measured.scraped
    of = f"{sizes.workers} requesters, median of {sizes.rounds}"
    every = f"every {sizes.every:g} s"
    report.add(f"scrape cost: fleet counted at each scrape ({sizes.modules} modules a node)", sizes.nodes, "nodes")
    report.add("scrape cost: seat CPU a scrape, alone", alone * 1e3, "ms")
    report.add(f"scrape cost: throughput without scraping ({of})", quiet.rate, "req/s")
    report.add(f"scrape cost: throughput scraping {every} ({of})", scraped.rate, "req/s")
    ratio = scraped.rate / quiet.rate
    report.add("scrape cost: throughput scraping / without", ratio, "x", target=f">= {TARGET:g}", met=ratio >= TARGET)
    paired = median([s / q for s, q in zip(scraped.rates, quiet.rates, strict=True)])
    report.add(f"scrape cost: throughput scraping / without, median of the {sizes.rounds} pairs", paired, "x")
    report.add("scrape cost: seat CPU a request, without scraping", quiet.cpu * 1e6, "us")
    report.add(f"scrape cost: seat CPU a request, scraping {every}", scraped.cpu * 1e6, "us")
    report.add("scrape cost: seat CPU a request, scraping / without", scraped.cpu / quiet.cpu, "x")
    busy = alone / sizes.every / (quiet.cpu * quiet.rate)  # the seat's CPU a second under load
    report.add(f"scrape cost: CPU of a scrape {every} / seat's CPU under load", busy * 100, "%")
    report.add(f"scrape cost: scrapes made in the {sizes.rounds} scraped rounds", measured.scrapes_made, "scrapes")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__)
    defaults = MetricsSizes()
    parser.add_argument("--nodes", type=int, default=defaults.nodes, help="nodes in the fleet (default 1,000)")
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="rounds on each side (default 15)")
    parser.add_argument("--every", type=float, default=defaults.every, help="seconds between scrapes (default 1)")
    args = parser.parse_args()
    sizes = MetricsSizes(nodes=args.nodes, rounds=args.rounds, every=args.every)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="mesh-bench-metrics-") as state:
        anyio.run(scrape_cost, Path(state), report, sizes)
    print(report.table())


if __name__ == "__main__":
    main()
