"""A node's rollout claim lost by the bus (a server's store rolled back to an earlier prefix by a
power failure before its sync): the node writes it back once, as it restores its other own keys,
with one line saying what was lost and restored. Judged by the fleet bucket on a real nats-server
killed and started again from a copy of its store."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from provisioner_client.resolving.manifest import LoadedManifest, Manifest
from provisioner_client.rollout import RolloutGate, RolloutPlan
from provisioner_client.rollout.gate import Claims
from registry.contract import fleet
from registry.errors import BusError
from registry.wire import BucketConfig, Bus, KvItem, create_bucket, get_direct
from tests.helpers import RestartableNats, restartable_bus

BOUND = 20.0
DIGEST_1 = "hmac-sha256:" + "1" * 64
MANIFEST = Manifest.model_validate({"module": "web", "env": {"A": "1"}, "rollout": {"budget": 1}})


@asynccontextmanager
async def fleet_on(tmp_path: Path) -> AsyncIterator[tuple[RestartableNats, Bus]]:
    async with restartable_bus(tmp_path, with_buckets=False) as on:
        await create_bucket(on.bus, fleet.FLEET, BucketConfig(), live=True)
        yield on.server, on.bus


def gate_of(bus: Bus, node: str, folder: Path) -> RolloutGate:
    plan = RolloutPlan(claim_ttl=timedelta(seconds=30))
    return RolloutGate(Claims(bus, node, plan.claim_ttl), folder / node, plan)


async def claim_of(bus: Bus, node: str) -> KvItem | None:
    with anyio.fail_after(BOUND):
        while True:
            try:
                return await get_direct(bus, fleet.FLEET, fleet.claim_key("web", node))
            except BusError:
                await anyio.sleep(0.05)  # the server not answering yet after its restart; deadline above


@pytest.mark.parametrize("lost", ["gone", "older"])
async def test_a_claim_the_bus_lost_is_written_back_once_saying_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, lost: str
) -> None:
    async with fleet_on(tmp_path) as (server, bus):
        copy = tmp_path / "store-copy"
        if lost == "gone":
            server.copy_store(copy)  # before the claim: the rollback loses it whole
        first = await gate_of(bus, "a", tmp_path).admit("web", MANIFEST, DIGEST_1, first=False)
        assert first.go and first.claimed
        gate = gate_of(bus, "a", tmp_path)
        if lost == "older":
            server.copy_store(copy)  # the waiting claim kept, a renewal of it as running lost
            await gate._renew("web", gate.state.modules["web"], "running", force=True)
        remembered = gate.state.modules["web"].revision
        await server.kill_and_roll_back(copy)
        before = await claim_of(bus, "a")
        assert (before.revision if before is not None else 0) < remembered, "the bus lost the node's last write"

        with caplog.at_level(logging.WARNING):
            await _prepare_until_written(bus, tmp_path)
            restored = await claim_of(bus, "a")
            assert restored is not None and not restored.deleted
            claim = fleet.read_claim(restored.value)
            assert claim is not None and claim.state == "running", "admitted before the loss: running again"
            await gate_of(bus, "a", tmp_path).prepare({"web": LoadedManifest(tmp_path / "web.json", MANIFEST)})
            again = await claim_of(bus, "a")
        assert again is not None and again.revision == restored.revision, "written back once"
        said = [r.getMessage() for r in caplog.records if "the bus lost writes" in r.getMessage()]
        assert said == [
            f"node a: the bus lost writes of its claim of module web (their stamp went back from {remembered} to "
            f"{before.revision if before is not None else 0}); restored: its running claim of module web written again"
        ]
        # another node still waits for the slot it holds
        assert not (await gate_of(bus, "b", tmp_path).admit("web", MANIFEST, DIGEST_1, first=False)).go


async def _prepare_until_written(bus: Bus, folder: Path) -> None:
    """The gate's prepare, as each reconcile runs it, until the node's claim stands at the revision
    it remembers: a write the server, just back, did not answer waits for the next one; bounded."""
    loaded = {"web": LoadedManifest(folder / "web.json", MANIFEST)}
    with anyio.fail_after(BOUND):
        while True:
            gate = gate_of(bus, "a", folder)
            await gate.prepare(loaded)
            found = await claim_of(bus, "a")
            if found is not None and found.revision >= gate.state.modules["web"].revision:
                return
            await anyio.sleep(0.05)  # the next reconcile's retry; deadline above
