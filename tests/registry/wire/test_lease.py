"""Leases in the bus: one holder at a time, a refusal that names the holder, expiry, release."""

from __future__ import annotations

import json
from datetime import timedelta

import anyio
import pytest

from provisioner.seat.buckets import ensure_buckets
from registry.contract import Bucket, buckets
from registry.wire import BucketConfig, Bus, Holder, Lease, LeaseHeld, LeaseLost, get_direct, node_key, put, update
from registry.wire import lease as lease_module
from registry.wire.kv import Stamped, get_stamped

SHORT = timedelta(seconds=1)
NO_SKEW = timedelta(0)


@pytest.fixture
async def leases(bus: Bus) -> Bus:
    await ensure_buckets(bus, BucketConfig())
    return bus


def claimant(bus: Bus, host: str, ttl: timedelta = SHORT) -> Lease:
    holder = Holder.me(ttl).model_copy(update={"host": host})
    return Lease(bus, node_key("a.b"), ttl=ttl, holder=holder, skew=NO_SKEW)


async def test_a_second_claimant_is_refused_naming_the_first(leases: Bus) -> None:
    first, second = claimant(leases, "host-1"), claimant(leases, "host-2")
    await first.try_take()
    with pytest.raises(LeaseHeld, match=r"held by host host-1 pid \d+ since"):
        await second.try_take()
    stored = await get_direct(leases, buckets.LEASES, "node.a=2Eb")
    assert stored is not None and b"host-1" in stored.value


async def test_a_released_lease_is_taken_at_once_and_an_expired_one_after_its_ttl(leases: Bus) -> None:
    first, second, third = claimant(leases, "host-1"), claimant(leases, "host-2"), claimant(leases, "host-3")
    await first.try_take()
    await first.release()
    await second.try_take()  # released: no wait
    with anyio.fail_after(10):
        while True:
            try:
                await third.try_take()  # second never renews: it expires after its ttl
                break
            except LeaseHeld:
                await anyio.sleep(0.2)
    with pytest.raises(LeaseLost):
        await second.renew()


async def test_holding_renews_so_the_lease_never_expires_while_held(leases: Bus) -> None:
    """The second claimant allows 2 s of skew (a busy machine may renew late), and checks for 4 s:
    longer than ttl and skew together, so only renewals keep the lease held."""
    first, second = claimant(leases, "host-1"), claimant(leases, "host-2")
    second = Lease(leases, node_key("a.b"), ttl=SHORT, holder=second.holder, skew=timedelta(seconds=2))
    async with anyio.create_task_group() as tg:
        await tg.start(first.hold)
        for _ in range(8):
            await anyio.sleep(SHORT.total_seconds() / 2)
            with pytest.raises(LeaseHeld):
                await second.try_take()
        tg.cancel_scope.cancel()
    await second.try_take()  # released on cancel


@pytest.mark.parametrize("ttl", [1e20, -1.0, "NaN"], ids=["beyond any timedelta", "negative", "not a number"])
async def test_a_record_whose_ttl_cannot_be_judged_is_a_holder_unknown_not_a_crash(leases: Bus, ttl: object) -> None:
    record = json.loads(Holder.me(SHORT).model_dump_json()) | {"ttl_seconds": ttl}
    await put(leases, buckets.LEASES, node_key("a.b"), json.dumps(record).encode())
    with pytest.raises(LeaseHeld, match="a holder whose record cannot be read"):
        await claimant(leases, "host-2").try_take()


async def test_a_renewal_stored_but_never_heard_of_still_lets_the_release_free_the_lease(leases: Bus) -> None:
    """A renewal cancelled in flight may reach the server all the same: the release then finds a
    newer revision of its own record, and frees it rather than leaving it to expire."""
    first = claimant(leases, "host-1")
    await first.try_take()
    current = await get_direct(leases, buckets.LEASES, node_key("a.b"))
    assert current is not None
    await update(leases, buckets.LEASES, node_key("a.b"), current.value, last=current.revision)  # the lost renewal
    await first.release()
    await claimant(leases, "host-2").try_take()  # free at once, not after the ttl


async def test_a_release_never_frees_a_lease_another_claimant_holds_now(leases: Bus) -> None:
    first, second = claimant(leases, "host-1"), claimant(leases, "host-2")
    await first.try_take()
    current = await get_direct(leases, buckets.LEASES, node_key("a.b"))
    assert current is not None
    theirs = json.loads(current.value) | {"id": "someone-else"}
    await update(leases, buckets.LEASES, node_key("a.b"), json.dumps(theirs).encode(), last=current.revision)
    await first.release()
    with pytest.raises(LeaseHeld):
        await second.try_take()


async def test_a_claimant_that_wrote_first_is_named_not_taken_for_an_unreadable_record(
    leases: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two claimants read a free lease at once; the one whose conditional write loses names the
    winner from its record (it said "a holder whose record cannot be read")."""
    first, second = claimant(leases, "host-1"), claimant(leases, "host-2")
    raced: list[bool] = []

    async def read_then_lose_the_race(bus: Bus, bucket: Bucket, key: str) -> Stamped | None:
        found = await get_stamped(bus, bucket, key)
        if not raced:
            raced.append(True)
            await first.try_take()  # writes between the second claimant's read and its write
        return found

    monkeypatch.setattr(lease_module, "get_stamped", read_then_lose_the_race)
    with pytest.raises(LeaseHeld, match=r"held by host host-1 pid \d+ since"):
        await second.try_take()
    assert raced and not second.held
