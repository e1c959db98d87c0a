"""The seat's rollout series: held rollouts and claims by state, failed claims judged by
outcome, as the rollout task read the fleet bucket on a real nats-server, in the endpoint's text."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mesh_dev.local_nats import LocalNats
from provisioner.metrics import SeatMetrics, SeatWork
from provisioner.seat.registry_sync import CompileCounts
from provisioner.seat.rollouts import Placement, RolloutsSeen, hold_failed_rollouts
from provisioner.verb.paging import PageCache
from provisioner.verb.stats import RequestStats
from registry.contract import buckets, fleet
from registry.wire import Bus, get_latest, put
from tests.helpers import in_own_task, serving, until

WITHIN = 20.0  # a bound to fail, not a speed


def claim(state: str, *, since: datetime | None = None, ttl: float = 60) -> bytes:
    moment = (since or datetime.now(UTC)).isoformat()
    return json.dumps({"state": state, "change": "c1", "since": moment, "ttl_seconds": ttl}).encode()


@asynccontextmanager
async def following(bus: Bus, placement: Placement) -> AsyncIterator[RolloutsSeen]:
    seen = RolloutsSeen()
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(hold_failed_rollouts, bus, placement=placement, seen=seen))
        yield seen
        tasks.cancel_scope.cancel()


@pytest.fixture
async def quiet_seat(nats_server: LocalNats) -> AsyncIterator[LocalNats]:
    """The seat serving, told not to pause rollouts itself: the test's own rollout task does."""
    async with in_own_task(serving(nats_server.url, pause_on_failure=False)):
        yield nats_server


@pytest.fixture
async def seen(quiet_seat: LocalNats, bus: Bus) -> AsyncIterator[RolloutsSeen]:
    """The rollout task on the seat's bucket, placement saying n1, n2 and n3 run web: their claims
    count; n4's is deleted by the seat, its needs of web its own word for a module placement holds."""
    placement = Placement.of_catalogue()
    assert placement.bucket is not None
    for node in ("n1", "n2", "n3"):
        await put(bus, placement.bucket, f"{node}.web", b"{}")
    await put(bus, buckets.NEEDS, "n4.web.config.x", b'{"placeholder":"${config:x}","used_in":["X"]}')
    async with in_own_task(following(bus, placement)) as running:
        yield running


async def test_held_rollouts_and_claims_by_state_and_pauses_by_outcome(bus: Bus, seen: RolloutsSeen) -> None:
    await put(bus, fleet.FLEET, fleet.claim_key("web", "n2"), claim("waiting"))
    await put(bus, fleet.FLEET, fleet.claim_key("web", "n3"), claim("running", ttl=1))  # its ttl past below
    await put(bus, fleet.FLEET, fleet.claim_key("web", "n4"), claim("failed"))  # n4 does not run web
    await put(bus, fleet.FLEET, fleet.claim_key("web", "n1"), claim("failed"))
    aborted = fleet.Hold(state="aborted", since=datetime.now(UTC), by="ops")
    await put(bus, fleet.FLEET, fleet.hold_key("api"), aborted.model_dump_json().encode())
    # The web hold's pause is counted once its write is acknowledged, which can come before the
    # rollout watch brings the hold itself: the hold is waited for as the watch brings it.
    with anyio.fail_after(WITHIN):
        while sum(seen.pauses.values()) < 2 or "api" not in seen.holds or seen.holds.get("web") != "paused":
            await anyio.sleep(0.05)
    assert await get_latest(bus, fleet.FLEET, fleet.hold_key("web")) is not None
    later = datetime.now(UTC) + timedelta(seconds=10)  # n3's claim expired, by its ttl and the skew allowed
    left = {"waiting": 1, "running": 0, "failed": 1, "expired": 1}  # n4's claim deleted: it does not run web
    assert await until(lambda: seen.claims_by_state(later) == left, WITHIN), seen.claims_by_state(later)

    work = SeatWork(RequestStats(), CompileCounts(), PageCache(), rollouts=seen)
    text = (await SeatMetrics({"data": bus, "verb": bus}, None, [], work=work).render()).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("mesh_seat_rollouts_held", (("state", "paused"),))] == 1
    assert samples[("mesh_seat_rollouts_held", (("state", "aborted"),))] == 1
    claims = {state: samples[("mesh_seat_rollout_claims", (("state", state),))] for state in ("waiting", "failed")}
    assert claims == {"waiting": 1, "failed": 1}
    pauses = {o: samples[("mesh_seat_rollout_pauses_total", (("outcome", o),))] for o in ("paused", "not_running")}
    assert pauses == {"paused": 1, "not_running": 1}
