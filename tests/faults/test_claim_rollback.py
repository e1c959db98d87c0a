"""A rollout claim the bus lost: nats-server's store rolled back past the node's claim (as a power
failure before its sync leaves it), on a real server killed and started again from a copy of its
store. The node, at its next renewal, finds its claim below the revision it last wrote, writes it
back once and says so in one line; the slot stays used meanwhile for every node that reads it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from provisioner_client.resolving.manifest import LoadedManifest, Manifest
from provisioner_client.rollout import RolloutGate, RolloutPlan
from provisioner_client.rollout.claims import Claims
from registry.contract import fleet
from registry.errors import BusError
from registry.wire import get_direct
from tests.helpers import OnNats, in_own_task, restartable_bus

DIGEST = "hmac-sha256:" + "1" * 64
BOUND = 20.0
LOST = "the bus lost its claim of module web"


@pytest.fixture
async def on_nats(tmp_path: Path) -> AsyncIterator[OnNats]:
    async with in_own_task(restartable_bus(tmp_path)) as running:
        yield running


def _manifest() -> Manifest:
    return Manifest.model_validate({"module": "web", "env": {"A": "1"}, "rollout": {"budget": 1}})


def _gate(on_nats: OnNats, node: str, folder: Path, **plan: Any) -> RolloutGate:
    rollout = RolloutPlan(**{"claim_ttl": timedelta(seconds=0.3), **plan})
    return RolloutGate(Claims(on_nats.bus, node, rollout.claim_ttl), folder / node, rollout)


async def _unhealthy() -> str:
    return "the health check said no"


def _renewal_due(gate: RolloutGate) -> None:
    """The node's record says its claim was never renewed: the next `prepare` renews it."""
    record = gate.state.get("web")
    assert record is not None and record.claimed
    gate.state.put("web", record.model_copy(update={"renewed_at": None}))


async def _claim_of(on_nats: OnNats, node: str) -> fleet.Claim | None:
    stored = await get_direct(on_nats.bus, fleet.FLEET, fleet.claim_key("web", node))
    return None if stored is None or stored.deleted else fleet.read_claim(stored.value)


async def test_a_failed_claim_the_bus_lost_is_written_back_once_and_said(
    on_nats: OnNats, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = tmp_path / "store-before-the-claim"
    on_nats.server.copy_store(copy)
    manifest = _manifest()
    gate = _gate(on_nats, "a", tmp_path)
    assert (await gate.admit("web", manifest, DIGEST, first=False)).claimed
    _, problem = await gate.run_under_claim("web", DIGEST, replaced=b"old", action=None, health=_unhealthy)
    assert problem == "the health check said no"
    assert (claim := await _claim_of(on_nats, "a")) is not None and claim.state == "failed"

    await on_nats.server.kill_and_roll_back(copy)
    with anyio.fail_after(BOUND):
        while True:  # the bus back on the rolled-back store: the claim is gone from it
            try:
                stored = await get_direct(on_nats.bus, fleet.FLEET, fleet.claim_key("web", "a"))
                break
            except BusError:  # reconnecting: tried again within the bound
                await anyio.sleep(0.05)
    assert stored is None, "the store went back to before the claim"

    _renewal_due(gate)
    loaded = {"web": LoadedManifest(tmp_path / "web.json", manifest)}
    with caplog.at_level(logging.WARNING, logger="provisioner_client.rollout.gate"):
        await _gate(on_nats, "a", tmp_path).prepare(loaded)
        await _gate(on_nats, "a", tmp_path).prepare(loaded)
    assert (claim := await _claim_of(on_nats, "a")) is not None and claim.state == "failed"
    said = [r.getMessage() for r in caplog.records if LOST in r.getMessage()]
    assert len(said) == 1, said
    assert "restored" in said[0]
    waiting = await _gate(on_nats, "b", tmp_path, claim_ttl=timedelta(seconds=30)).admit(
        "web", manifest, DIGEST, first=False
    )
    assert not waiting.go, "the failed claim written back still uses the module's one slot"


async def test_a_claim_the_seat_deleted_is_no_loss(
    on_nats: OnNats, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manifest = _manifest()
    gate = _gate(on_nats, "a", tmp_path)
    assert (await gate.admit("web", manifest, DIGEST, first=False)).claimed
    await gate.run_under_claim("web", DIGEST, replaced=b"old", action=None, health=_unhealthy)
    await gate.claims.remove("web")  # as the seat deletes a dead claim: a marker above the node's write
    _renewal_due(gate)
    loaded = {"web": LoadedManifest(tmp_path / "web.json", manifest)}
    with caplog.at_level(logging.WARNING, logger="provisioner_client.rollout.gate"):
        await _gate(on_nats, "a", tmp_path).prepare(loaded)
    assert (claim := await _claim_of(on_nats, "a")) is not None and claim.state == "failed", "renewed"
    assert not [r for r in caplog.records if LOST in r.getMessage()]
