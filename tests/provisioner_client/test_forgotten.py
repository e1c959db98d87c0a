"""A node's client leaves out of its collections the contributions of nodes the seat marked gone
(`provisioner_client.resolving.resolve`), on a real nats-server: the marks read under
the node's own grants (static and JWT), another node's contributions left out while marked, its
own never, and nothing left out while the marks cannot be read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mesh_dev.local_nats import LocalNats
from provisioner_client.resolving.resolve import Forgotten, Resolver, read_registry
from registry.access import Kind
from registry.contract import Placeholder, fleet, to_json
from registry.wire import Bus, KvItem, delete, put
from tests.helpers import NODE
from tests.isolation import Mesh, party

MARK = to_json(fleet.Gone(last_seen=datetime(2026, 1, 1, tzinfo=UTC), since=datetime(2026, 1, 2, tzinfo=UTC)))
ITEMS = b'{"items":["x"]}'


async def mark_gone(seat: Bus, *nodes: str) -> None:
    for node in nodes:
        await put(seat, fleet.FLEET, fleet.gone_key(node), MARK)


async def test_a_node_reads_the_marks_under_its_own_grants_and_never_leaves_itself_out(mesh: Mesh) -> None:
    async with mesh.connect(party(Kind.SEAT)) as seat, mesh.connect(party(Kind.NODE, "n1")) as n1:
        await mark_gone(seat, "n1", "n2")
        forgotten = Forgotten(n1, node="n1")
        assert await forgotten.left_out(["n1", "n2", "n3"]) == {"n2"}
        assert forgotten.unreadable is None


@pytest.mark.usefixtures("provisioned")
async def test_a_marked_nodes_contributions_are_left_out_and_come_back_with_its_mark_gone(bus: Bus) -> None:
    items = [
        KvItem("n1.shell=3Azsh=3Anormal.web", ITEMS, 1),
        KvItem("n2.shell=3Azsh=3Anormal.web", ITEMS, 2),
        KvItem("n3.shell=3Azsh=3Anormal.web", ITEMS, 3),
    ]
    await mark_gone(bus, "n1", "n2")
    kept = await Forgotten(bus, node="n1").kept(items)
    assert [item.key for item in kept] == ["n1.shell=3Azsh=3Anormal.web", "n3.shell=3Azsh=3Anormal.web"]

    revision = (await bus.jetstream(fleet.FLEET.info_api, operation="fleet info"))["state"]["last_seq"]
    await delete(bus, fleet.FLEET, fleet.gone_key("n2"), last=revision)
    assert await Forgotten(bus, node="n1").kept(items) == items  # the next reconcile reads the marks afresh


async def test_nothing_is_left_out_while_the_marks_cannot_be_read(nats_server: LocalNats, bus: Bus) -> None:
    """No seat: no fleet bucket to read."""
    forgotten = Forgotten(bus, node="n1")
    assert await forgotten.left_out(["n2"]) == set()
    assert forgotten.unreadable is not None


@pytest.mark.usefixtures("provisioned")
async def test_a_node_marked_gone_itself_still_reads_its_own_collection(bus: Bus) -> None:
    """Back before the seat's next round: its mark still stands, its own items are read all the same."""
    await mark_gone(bus, NODE)
    own = {f"{NODE}.app-plugins.web": b'{"items":["a","b"]}', f"{NODE}.app-plugins.tools": b'{"items":["c"]}'}
    registry = await read_registry(bus)
    resolver = Resolver(bus, registry, node=NODE, verb_timeout=timedelta(seconds=1), own_collect=own)
    assert await resolver.resolve("app", Placeholder("collected", "app-plugins")) == "c\na\nb"
    assert await resolver.forgotten.left_out([NODE]) == set()


async def test_no_mark_is_read_while_every_contribution_is_the_nodes_own(nats_server: LocalNats, bus: Bus) -> None:
    """No fleet bucket here: a read would fail and be said; none is made."""
    forgotten = Forgotten(bus, node="n1")
    own = [KvItem("n1.shell=3Azsh=3Anormal.web", ITEMS, 1)]
    assert await forgotten.kept(own) == own
    assert forgotten.unreadable is None
