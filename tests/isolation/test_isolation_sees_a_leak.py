"""The isolation suite would see a read leak: on grants widened on purpose, each read
attack of `tests/isolation/test_isolation.py`, judged as that suite judges it, fails with what leaked; and its
judge lets a failed assert through while it takes the bus's refusal as the attack's end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError

from provisioner.seat.buckets import ensure_buckets
from registry.access import Kind
from registry.contract import buckets
from registry.errors import PermissionDenied
from registry.wire import BucketConfig, Bus, put
from tests.attacks import READ_ATTACKS, RequestAttack, named, nothing_comes_back, unchanged_after
from tests.helpers import in_own_task
from tests.isolation import Mesh, granting, jwt_mesh_server, mesh_server, party

N1, SEAT = party(Kind.NODE, "n1"), party(Kind.SEAT)
NEEDS = buckets.NEEDS
N2_KEY = "n2.web.config.x"
WIDER_READS = granting(
    N1,
    {"kind": "service", "subject": NEEDS.direct_get_subject("n2.>"), "why": "widened: another node's keys"},
    {"kind": "service", "subject": NEEDS.batch_get_subject, "stream_reply": True, "why": "widened: the batch get"},
    {"kind": "service", "subject": f"$JS.API.STREAM.INFO.{NEEDS.stream}", "why": "widened: stream info"},
)


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def widened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    """The mesh of the generated grants, n1's widened by `WIDER_READS`."""
    start = mesh_server if request.param == "static" else jwt_mesh_server
    async with in_own_task(start(tmp_path / "mesh", widen=WIDER_READS)) as running:
        yield running


@pytest.fixture
async def seat(widened: Mesh) -> AsyncIterator[Bus]:
    async with in_own_task(widened.connect(SEAT)) as bus:
        for node in ("n1", "n2"):
            await put(bus, NEEDS, f"{node}.web.config.x", b'{"placeholder":"${config:x}"}')
        yield bus


@pytest.fixture
async def attacker(widened: Mesh, seat: Bus) -> AsyncIterator[Client]:
    client = await widened.raw(N1)
    try:
        yield client
    finally:
        await client.close()


@pytest.mark.parametrize("attack", READ_ATTACKS, ids=named(READ_ATTACKS))
async def test_a_read_attack_of_the_suite_fails_on_a_widened_read_grant(
    seat: Bus, attacker: Client, attack: RequestAttack
) -> None:
    with pytest.raises(AssertionError, match="something came back") as failed:
        await unchanged_after(seat, partial(nothing_comes_back, seat, attacker, attack))
    assert N2_KEY in str(failed.value)  # what leaked is n2's


async def test_the_judge_takes_a_refusal_as_the_attacks_end_and_never_a_failed_assert(bus: Bus) -> None:
    await ensure_buckets(bus, BucketConfig())

    async def refused_by_nats_py() -> None:
        raise NoRespondersError

    async def refused_by_our_wire() -> None:
        raise PermissionDenied("put", "$KV.x", "denied")

    async def seen_a_leak() -> None:
        raise AssertionError("a leak")

    await unchanged_after(bus, refused_by_nats_py)
    await unchanged_after(bus, refused_by_our_wire)
    with pytest.raises(AssertionError, match="a leak"):
        await unchanged_after(bus, seen_a_leak)
