"""Removing a node's lease: refused while its client holds it, naming the holder;
forced, written over; released or expired, replaced by the `removed` marker, which the seat's
nodes view forgets; and what `remove-node --jwt` needs, checked before anything is removed.
The whole path, both account modes, is tests/deploy/test_node_lifecycle.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.commands.cli import main
from provisioner.commands.removal import NodeStillHeld, footprint, remove_footprint, remove_node
from provisioner.verb.nodes import REMOVED_LEASE, read_fleet
from registry.contract import Bucket, buckets
from registry.errors import WrongLastSequence
from registry.wire import SKEW, Bus, KvItem, Lease, LeaseLost, ask, get_direct, node_key, put, snapshot

APPLIED = b'{"state":"applied","digest":"hmac-sha256:00"}'
SEEDED: dict[Bucket, list[str]] = {
    buckets.NEEDS: ["n1.web.config.a", "n2.web.config.a"],
    buckets.APPLIED: ["n1.web", "n2.web"],
    buckets.COLLECT: ["n1.c.web", "n2.c.web"],
}


@pytest.fixture
async def seeded(server: LocalNats, bus: Bus) -> Bus:
    """Two nodes' keys, with the seat serving (its nodes view follows the buckets)."""
    for bucket, keys in SEEDED.items():
        for key in keys:
            await put(bus, bucket, key, APPLIED)
    return bus


async def taken(bus: Bus, node: str, ttl: timedelta = timedelta(seconds=10)) -> Lease:
    """The node's lease, as its client takes it."""
    lease = Lease(bus, node_key(node), ttl=ttl)
    await lease.try_take()
    return lease


async def contents(bus: Bus) -> dict[str, dict[str, KvItem]]:
    return {
        bucket.name: {item.key: item for item in await snapshot(bus, bucket)} for bucket in (*SEEDED, buckets.LEASES)
    }


async def listed(bus: Bus) -> list[str]:
    """`query nodes`: the nodes the seat's view lists."""
    return sorted(entry["node"] for entry in (await ask(bus, {"what": "nodes"}))["entries"])


async def until_listed(bus: Bus, nodes: list[str]) -> None:
    """The seat's view follows the buckets by a watch: it lists `nodes` within moments."""
    with anyio.fail_after(5):
        while await listed(bus) != nodes:
            await anyio.sleep(0.05)


async def test_a_held_lease_refuses_the_removal_naming_its_holder(seeded: Bus) -> None:
    lease = await taken(seeded, "n1")
    before = await contents(seeded)
    with pytest.raises(NodeStillHeld) as held:
        await remove_node(seeded, "n1")
    said = str(held.value)
    assert f"host {lease.holder.host} pid {lease.holder.pid} since" in said, said
    assert "nothing removed" in said and "systemctl disable --now mesh-provisioner-client" in said
    assert "--force" in said
    assert await contents(seeded) == before


async def test_forced_the_lease_is_removed_and_its_holder_loses_it(seeded: Bus) -> None:
    lease = await taken(seeded, "n1")
    removed = await remove_node(seeded, "n1", force=True)
    assert removed[buckets.LEASES.name] == ["node.n1"]
    with pytest.raises(LeaseLost):
        await lease.renew()


async def test_forced_a_renewal_since_the_lease_was_read_is_written_over(seeded: Bus) -> None:
    lease = await taken(seeded, "n1")
    found = await footprint(seeded, "n1")
    await lease.renew()
    assert (await remove_footprint(seeded, found, force=True))[buckets.LEASES.name] == ["node.n1"]
    record = await get_direct(seeded, buckets.LEASES, node_key("n1"))
    assert record is not None and record.deleted and record.value == REMOVED_LEASE


async def test_a_lease_taken_since_it_was_read_released_is_not_written_over(seeded: Bus) -> None:
    lease = await taken(seeded, "n1")
    await lease.release()
    found = await footprint(seeded, "n1")
    again = await taken(seeded, "n1")  # its client started again meanwhile
    with pytest.raises(WrongLastSequence):
        await remove_footprint(seeded, found)
    await again.renew()  # still its


async def test_a_lease_is_live_until_its_ttl_and_the_skew_have_passed(seeded: Bus) -> None:
    await taken(seeded, "n1", ttl=timedelta(seconds=2))
    found = await footprint(seeded, "n1")
    assert found.lease is not None and found.lease.stored_at is not None
    expiry = found.lease.stored_at + timedelta(seconds=2) + SKEW
    assert found.live_lease(expiry) is not None
    assert found.live_lease(expiry + timedelta(milliseconds=1)) is None


async def test_a_removed_node_is_no_longer_listed_and_listed_again_once_its_client_returns(seeded: Bus) -> None:
    lease = await taken(seeded, "n1")
    await lease.release()
    await until_listed(seeded, ["n1", "n2"])  # n1 released, n2 by its applied record

    removed = await remove_node(seeded, "n1")
    assert removed[buckets.LEASES.name] == ["node.n1"]
    await until_listed(seeded, ["n2"])
    assert [name for name in (await read_fleet(seeded, None)).leases] == []  # as a seat started now reads it
    assert await remove_node(seeded, "n1") == {}, "the marker it left is nothing to remove"

    await taken(seeded, "n1")
    await until_listed(seeded, ["n1", "n2"])


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        pytest.param(["--jwt"], "--jwt: needs --keys", id="--jwt without the seeds folder"),
        pytest.param(["--keys", "."], "--keys: applies only with --jwt", id="--keys without --jwt"),
    ],
)
def test_remove_node_takes_the_seeds_folder_with_jwt_only(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["remove-node", "n1", "--yes", *flags]) == 2
    assert says in capsys.readouterr().err


def test_remove_node_names_a_seed_the_folder_lacks_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = ["--nats-url", "nats://127.0.0.1:9", "--wait", "0.1"]
    assert main(["remove-node", "n1", "--yes", "--jwt", "--keys", str(tmp_path), *nowhere]) == 2
    assert "no account-node-n1.nk in" in capsys.readouterr().err
