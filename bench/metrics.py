"""`python -m bench.metrics`: what scraping the seat's Prometheus endpoint costs it under verb load.

The seat runs in its own process with `--metrics-listen`, its fleet holding `--nodes` nodes' leases.
Rounds of `what=registry` from 50 requesters (the bench's verb load) alternate without and with a
scraper in a process of its own asking `/metrics` every `--every` seconds, in ABBA order, so that
a noisy moment and the second round of a pair (slower, whichever it is: `--every 1000` scrapes
once and still showed 12 % in AB order) hit both sides alike. First, the seat's CPU a scrape with
nothing else to do. Prints, for each side, the median throughput and the seat's own CPU a
request (from /proc: what the scrapes cost the seat, whatever else the machine runs), and the
relative costs."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import urllib.request
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import nats
from anyio.abc import Process
from nats.aio.client import Client

from bench.cases import ask_registry
from bench.harness import answers, median, python_process, throughput
from mesh_dev.local_nats import local_nats
from registry.contract import buckets
from registry.wire import Holder

WORKERS, PER_WORKER = 50, 300


def free_port() -> int:
    import socket  # noqa: PLC0415 -- only here

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """The user and system CPU `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def hold_leases(nc: Client, nodes: int) -> None:
    kv = await nc.jetstream().key_value(buckets.LEASES.name)
    holder = Holder.me(timedelta(hours=1)).model_dump_json().encode()
    for node in range(nodes):
        await kv.put(f"node.n{node:05d}", holder)


SCRAPER = """
import signal, sys, time, urllib.request
url, every, scraping = sys.argv[1], float(sys.argv[2]), False
def toggle(*_):
    global scraping
    scraping = not scraping
signal.signal(signal.SIGUSR1, toggle)
while True:
    if scraping:
        urllib.request.urlopen(url).read()
        time.sleep(every)
    else:
        signal.pause()
"""


async def cpu_a_scrape(url: str, seat: int, scrapes: int = 100) -> float:
    """The seat's CPU seconds a scrape, asked one after the other with nothing else to do."""

    def scrape_all() -> None:
        for _ in range(scrapes):
            urllib.request.urlopen(url).read()  # noqa: S310 -- the seat's loopback endpoint

    started = cpu_seconds(seat)
    await anyio.to_thread.run_sync(scrape_all)
    return (cpu_seconds(seat) - started) / scrapes


async def a_round(nc: Client, seat: int, scraper: Process | None) -> tuple[float, float]:
    """Requests a second, and the seat's CPU seconds a request, for one round; `scraper` (started
    once, for the whole run: starting a process costs the machine too) scrapes during it."""
    started = cpu_seconds(seat)
    if scraper is not None:
        scraper.send_signal(signal.SIGUSR1)
    rate = await throughput(partial(ask_registry, nc), workers=WORKERS, per_worker=PER_WORKER)
    if scraper is not None:
        scraper.send_signal(signal.SIGUSR1)
    return rate, (cpu_seconds(seat) - started) / (WORKERS * PER_WORKER)


async def measure(nodes: int, rounds: int, every: float) -> None:
    with tempfile.TemporaryDirectory() as state:
        async with local_nats(Path(state)) as server:
            port = free_port()
            url = f"http://127.0.0.1:{port}/metrics"
            nc = await nats.connect(server.url)
            serve = ["-m", "provisioner.commands.cli", "serve", "--nats-url", server.url, "--metrics-listen", str(port)]
            try:
                async with python_process(serve, ready=lambda: answers(nc, "$SRV.PING.mesh-provisioner")) as seat:
                    await hold_leases(nc, nodes)
                    idle = await cpu_a_scrape(url, seat.pid)
                    print(f"the seat's CPU a scrape, without load: {idle * 1000:.1f} ms ({nodes} nodes)")
                    await a_round(nc, seat.pid, None)  # warm
                    quiet, scraped = [], []
                    async with await anyio.open_process([sys.executable, "-c", SCRAPER, url, str(every)]) as scraper:
                        for turn in range(rounds):  # ABBA: the second round of a pair runs slower
                            for side in ("quiet", "scraped") if turn % 2 == 0 else ("scraped", "quiet"):
                                if side == "quiet":
                                    quiet.append(await a_round(nc, seat.pid, None))
                                else:
                                    scraped.append(await a_round(nc, seat.pid, scraper))
                        scraper.terminate()
            finally:
                await nc.close()
    report(quiet, scraped, every)


def report(quiet: list[tuple[float, float]], scraped: list[tuple[float, float]], every: float) -> None:
    rate_q, rate_s = median([r for r, _ in quiet]), median([r for r, _ in scraped])
    cpu_q, cpu_s = median([c for _, c in quiet]), median([c for _, c in scraped])
    print(f"without scraping: {rate_q:,.0f} req/s, the seat's CPU {cpu_q * 1e6:.1f} us a request")
    print(f"scraping every {every:g} s: {rate_s:,.0f} req/s, the seat's CPU {cpu_s * 1e6:.1f} us a request")
    lost, more = 100 * (rate_q - rate_s) / rate_q, 100 * (cpu_s - cpu_q) / cpu_q
    print(f"throughput {lost:+.1f} % lost; the seat's CPU a request {more:+.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000, help="nodes holding a lease (default 1000)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds on each side (default 15)")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between scrapes (default 1)")
    args = parser.parse_args()
    anyio.run(measure, args.nodes, args.rounds, args.every)


if __name__ == "__main__":
    main()
