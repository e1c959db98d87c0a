"""A real Prometheus scrapes the seat's endpoint and a node's textfile through a real node_exporter,
and finds a node that stopped stale within the lease's thresholds and its scrapes."""

from __future__ import annotations

import json
import shutil
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from mesh_dev.local_nats import LocalNats
from provisioner_client.metrics import NodeMetrics
from registry.wire import SKEW, Bus, Lease, node_key
from tests.helpers import serving

SCRAPE = 1  # seconds between scrapes
NODE_TTL = timedelta(seconds=5)
BOUND = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def program(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is missing: install Debian's prometheus and prometheus-node-exporter (scripts/test does as root)"
        )
    return found


@asynccontextmanager
async def running(command: Sequence[str], log: Path) -> AsyncIterator[Process]:
    """`command` running for the block, its output in `log` (read when a test fails)."""
    with log.open("wb") as output:
        async with running_into(command, output.fileno()) as process:
            yield process


@asynccontextmanager
async def running_into(command: Sequence[str], output: int) -> AsyncIterator[Process]:
    async with await anyio.open_process(command, stdout=output, stderr=output) as process:
        try:
            yield process
        finally:
            process.terminate()
            with anyio.move_on_after(5, shield=True):
                await process.wait()
            if process.returncode is None:
                process.kill()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 -- a loopback URL the test made
            return answer.status, answer.read()
    except OSError:
        return 0, b""


class PrometheusApi:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    async def ready(self) -> None:
        await self._until(lambda: get(f"{self.base}/-/ready")[0] == 200, "Prometheus ready")

    def value(self, query: str) -> float | None:
        status, body = get(f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
        if status != 200:
            return None
        result = json.loads(body)["data"]["result"]
        return float(result[0]["value"][1]) if len(result) == 1 else None

    async def until(self, query: str, expected: float) -> float:
        """Waits until `query` has one sample of `expected`; the seconds it took."""
        started = time.monotonic()
        await self._until(lambda: self.value(query) == expected, f"{query} == {expected}")
        return time.monotonic() - started

    async def _until(self, check: Callable[[], bool], what: str) -> None:
        with anyio.fail_after(BOUND, reason=f"not within {BOUND} s: {what}"):
            while not await anyio.to_thread.run_sync(check):
                await anyio.sleep(0.2)


def scrape_config(seat: int, exporter: int) -> str:
    return f"""
global:
  scrape_interval: {SCRAPE}s
  evaluation_interval: {SCRAPE}s
scrape_configs:
  - job_name: mesh-seat
    static_configs: [{{targets: ["127.0.0.1:{seat}"]}}]
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{exporter}"]}}]
"""


async def test_prometheus_finds_a_stopped_node_stale_within_the_thresholds(
    nats_server: LocalNats, bus: Bus, tmp_path: Path
) -> None:
    seat, exporter, prometheus = free_port(), free_port(), free_port()
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    config = tmp_path / "prometheus.yml"
    config.write_text(scrape_config(seat, exporter))
    node_exporter = [
        program("prometheus-node-exporter"),
        f"--web.listen-address=127.0.0.1:{exporter}",
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile}",
    ]
    server = [
        program("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prometheus}",
    ]
    api = PrometheusApi(prometheus)
    async with (
        serving(nats_server.url, metrics_listen=str(seat)),
        running(node_exporter, tmp_path / "node_exporter.log"),
        running(server, tmp_path / "prometheus.log"),
    ):
        await api.ready()
        await api.until('up{job="mesh-seat"}', 1)
        lease = Lease(bus, node_key("n1"), ttl=NODE_TTL)
        await lease.try_take()  # then the node stops at once: its lease is never renewed, never released
        stopped = time.monotonic()
        NodeMetrics("n1", textfile, connected=lambda: True).lease(held=True)
        await api.until('mesh_node_info{job="node", node="n1"}', 1)
        await api.until('mesh_node_lease_held{job="node"}', 1)
        await api.until('mesh_seat_nodes{job="mesh-seat", verdict="healthy"}', 1)
        await api.until('mesh_seat_nodes{job="mesh-seat", verdict="stale"}', 1)
        took = time.monotonic() - stopped
        assert api.value('mesh_seat_nodes{job="mesh-seat", verdict="healthy"}') == 0
    thresholds = (NODE_TTL + SKEW).total_seconds()
    assert thresholds - 0.5 < took < thresholds + 3 * SCRAPE + 2  # the lease's ttl, the skew allowed, a few scrapes
