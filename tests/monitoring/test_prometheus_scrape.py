"""A real Prometheus scrapes the seat's endpoint and a node's textfile through a real node_exporter,
and finds a node that stopped stale within the lease's thresholds and its scrapes."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from mesh_dev.local_nats import LocalNats
from provisioner_client.metrics import NodeMetrics
from registry.wire import SKEW, Bus, Lease, node_key
from tests.helpers import serving
from tests.prometheus import free_port, program, prometheus, running

SCRAPE = 1  # seconds between scrapes
NODE_TTL = timedelta(seconds=5)


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


@pytest.mark.slow
async def test_prometheus_finds_a_stopped_node_stale_within_the_thresholds(
    nats_server: LocalNats, bus: Bus, tmp_path: Path
) -> None:
    seat, exporter = free_port(), free_port()
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    node_exporter = [
        program("prometheus-node-exporter"),
        f"--web.listen-address=127.0.0.1:{exporter}",
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile}",
    ]
    async with (
        serving(nats_server.url, metrics_listen=str(seat)),
        running(node_exporter, tmp_path / "node_exporter.log"),
        prometheus(tmp_path, scrape_config(seat, exporter)) as api,
    ):
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
    # never before the lease's ttl and the skew allowed; after them, within a few scrapes (and a
    # loaded machine's delays)
    assert thresholds - 0.5 < took < thresholds + 3 * SCRAPE + 10
