"""The node's stamps under the generated grants (static and JWT accounts): a node learns the latest
revision under its own keys by one direct get of `<node>.>`, which its existing grant allows, and
learns nothing of another node's keys that way; a reconcile with nothing changed then lists none
of its keys. No new grant: the direct get of the node's own `<node>.>` was already imported."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nats.errors import NoRespondersError

from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.resolving.scope import NodeScope
from registry.access import Kind
from registry.contract import buckets
from registry.errors import BusError
from registry.wire import Bus, get_direct, put
from tests.helpers import in_own_task
from tests.isolation import NODE, Domains, Mesh, party

N1, N2, SEAT = party(Kind.NODE, "n1"), party(Kind.NODE, "n2"), party(Kind.SEAT)
A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'


async def test_a_node_on_its_own_account_reconciles_again_without_listing_its_keys(
    mesh: Mesh, domains: Domains, node_plan: ClientPlan
) -> None:
    async with mesh.connect(party(Kind.NODE, NODE)) as node:
        first = await reconcile(node, node_plan)
        assert first.ok, first.summary()
        again = await reconcile(node, node_plan)
        assert again.ok and again.listed == set() and not any(again.writes.values())
        assert node.recent_denial(0) is None


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    async with in_own_task(mesh.connect(SEAT)) as bus:
        for node in ("n1", "n2"):
            await put(bus, buckets.NEEDS, f"{node}.web.config.x", A_NEED)
        await put(bus, buckets.NEEDS, "n2.web.config.y", A_NEED)  # n2's latest entry is past n1's
        yield bus


async def test_a_nodes_stamp_is_its_own_latest_revision_and_another_nodes_is_not_answered(
    mesh: Mesh, seat: Bus
) -> None:
    own = await get_direct(seat, buckets.NEEDS, "n1.web.config.x")
    assert own is not None
    async with mesh.connect(N1) as n1:
        stamp = await NodeScope("n1").stamp(n1, buckets.NEEDS)
        assert stamp == own.revision
        assert stamp < await NodeScope("n2").stamp(seat, buckets.NEEDS)
        with pytest.raises(BusError):
            await NodeScope("n2").stamp(n1, buckets.NEEDS)


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.API.DIRECT.GET.KV_mesh-provisioner_needs.$KV.mesh-provisioner_needs.>",
        "$JS.API.DIRECT.GET.KV_mesh-provisioner_needs.$KV.mesh-provisioner_needs.*.web.config.x",
        "$JS.API.DIRECT.GET.KV_mesh-provisioner_needs.$KV.mesh-provisioner_needs.n2.>",
        "$JS.API.DIRECT.GET.KV_mesh-provisioner_applied.$KV.mesh-provisioner_applied.>",
    ],
    ids=["the whole bucket", "any node's key by a wildcard", "another node's keys", "every applied record"],
)
async def test_a_wildcard_direct_get_beyond_the_nodes_own_keys_is_not_answered(
    mesh: Mesh, seat: Bus, subject: str
) -> None:
    attacker = await mesh.raw(N1)
    try:
        with pytest.raises(NoRespondersError):
            await attacker.request(subject, b"", timeout=2)
    finally:
        await attacker.close()
