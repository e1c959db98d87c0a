"""The registration load of `bench --scale` (`bench.register`) does what a node's first reconcile does."""

from __future__ import annotations

from bench.register import MODULES, NODE_KEYS, arrivals, register
from mesh_dev.local_nats import LocalNats
from registry.contract import buckets
from registry.wire import Bus, get_last_many, get_latest, node_key
from tests.helpers import serving

NODES = range(40, 43)


async def test_each_node_leaves_its_needs_and_applied_and_releases_its_lease(nats_server: LocalNats, bus: Bus) -> None:
    async with serving(nats_server.url):
        summary = await register(nats_server.url, NODES.start, len(NODES), rate=100)
    assert summary["nodes"] == len(NODES)
    for node in (f"n{n:05d}" for n in NODES):
        needs = await get_last_many(bus, buckets.NEEDS, f"{node}.>")
        applied = await get_last_many(bus, buckets.APPLIED, f"{node}.>")
        assert (len(needs), len(applied)) == (NODE_KEYS, MODULES)
        assert all(item.revision for item in needs + applied)
        lease = await get_latest(bus, buckets.LEASES, node_key(node))
        assert lease is not None and lease.deleted, "the lease is released once the node has registered"


def test_nodes_arrive_spread_over_their_count_divided_by_the_rate() -> None:
    moments = [at for _, at in arrivals(range(1000), rate=20, start=0.0)]
    assert 0 <= min(moments) < 1 and 49 < max(moments) <= 50
    assert 400 < sum(1 for at in moments if at < 25) < 600  # uniform: about half in the first half
