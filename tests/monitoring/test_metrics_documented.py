"""Every series the seat and a node export is in deploy/prometheus/README.md's list, with its type
and labels, and the list names nothing they do not export: the docs cannot drift."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry

from mesh_dev.local_nats import LocalNats
from provisioner.metrics import SeatMetrics, SeatWork
from provisioner.seat.buckets import seat_buckets
from provisioner.seat.registry_sync import CompileCounts
from provisioner.verb.paging import PageCache
from provisioner.verb.stats import RequestStats
from provisioner_client.metrics import NodeMetrics
from registry.wire import Bus
from tests.helpers import serving
from tests.prometheus import documented

Series = dict[str, tuple[str, frozenset[str]]]


def exported(registries: Iterable[CollectorRegistry]) -> Series:
    """Each series by its sample name, as the text format types it (an info is a gauge there)."""
    return {
        sample.name: ("gauge" if family.type == "info" else family.type, frozenset(sample.labels))
        for registry in registries
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


async def test_the_readme_lists_every_series_with_its_type_and_labels(
    nats_server: LocalNats, bus: Bus, tmp_path: Path
) -> None:
    node = NodeMetrics("n1", tmp_path)
    async with serving(nats_server.url):
        work = SeatWork(RequestStats(), CompileCounts(), PageCache())
        work.requests.answered("needs", "200", 0.01)
        seat = SeatMetrics({"data": bus, "verb": bus}, None, seat_buckets(), work=work)
        await seat.refresh()  # the buckets' and the connections' series exist once read
        series = exported([node.registry, seat.registry])
    assert len(series) >= 20
    assert series == documented()
