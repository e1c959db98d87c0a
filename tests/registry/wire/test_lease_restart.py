"""Leases across a NATS restart, on a real nats-server stopped and started again
on the same port and store, or paused.

A renewal sent while NATS was away waited in nats-py's reconnect buffer and timed out; it was
still stored once the connection was back, moving the record's revision, and the next renewal
found the lease "lost". A renewal the server is slow to acknowledge does the same (the bus no
longer sends a write while the connection is away: `tests/registry/wire/test_late_writes.py`).
The holder then finds its own record at a revision it never heard of: it keeps the lease from
there, says nothing at ERROR, and only another holder's record (or none) makes the lease lost."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.seat.buckets import ensure_buckets
from registry.contract import Bucket, buckets
from registry.errors import BusError, BusTimeout
from registry.wire import (
    BucketConfig,
    Bus,
    Holder,
    Lease,
    LeaseHeld,
    LeaseLost,
    delete,
    get_direct,
    node_key,
    update,
)
from registry.wire import lease as lease_module
from registry.wire.kv import Stamped, get_stamped
from tests.helpers import OnNats, in_own_task, restartable_bus
from tests.stalls import impatient_bus, paused

TTL = timedelta(seconds=30)  # never expires during a test: only the revision is at stake
NO_SKEW = timedelta(0)
BOUND = 20.0
KEY = node_key("a.b")


@pytest.fixture
async def on_nats(tmp_path: Path) -> AsyncIterator[OnNats]:
    async with in_own_task(restartable_bus(tmp_path)) as running:
        yield running


def claimant(bus: Bus, host: str, ttl: timedelta = TTL) -> Lease:
    holder = Holder.me(ttl).model_copy(update={"host": host})
    return Lease(bus, KEY, ttl=ttl, holder=holder, skew=NO_SKEW)


async def revision(bus: Bus) -> int:
    found = await get_direct(bus, buckets.LEASES, KEY)
    assert found is not None
    return found.revision


async def renewal_given_up_then_stored(server: LocalNats, bus: Bus, lease: Lease) -> None:
    """A renewal the server is too slow to acknowledge: it times out, and is stored once the
    server answers again (as nats-py's reconnect buffer sent one after an outage)."""
    before = await revision(bus)
    async with paused(server, bus):
        with pytest.raises(BusTimeout):
            await lease.renew()
    with anyio.move_on_after(5):  # the server answers a flush before its stream has stored what it took
        while await revision(bus) == before:
            await anyio.sleep(0.01)
    assert await revision(bus) == before + 1, "the renewal was not stored: nothing reproduced"


async def test_a_renewal_given_up_on_and_stored_after_keeps_the_lease(
    nats_server: LocalNats, caplog: pytest.LogCaptureFixture
) -> None:
    async with impatient_bus(nats_server) as bus:
        await ensure_buckets(bus, BucketConfig())
        holder = claimant(bus, "host-1")
        await holder.try_take()
        with caplog.at_level(logging.INFO):
            await renewal_given_up_then_stored(nats_server, bus, holder)
            await holder.renew()  # finds its own record at the revision it never heard of
            await holder.renew()  # and goes on from the revision it wrote
        assert holder.held
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        with pytest.raises(LeaseHeld, match="held by host host-1"):
            await claimant(bus, "host-2").try_take()


async def test_another_claimant_after_a_renewal_given_up_on_still_makes_the_lease_lost(
    nats_server: LocalNats,
) -> None:
    async with impatient_bus(nats_server) as bus:
        await ensure_buckets(bus, BucketConfig())
        holder = claimant(bus, "host-1")
        await holder.try_take()
        await renewal_given_up_then_stored(nats_server, bus, holder)
        theirs = claimant(bus, "host-2").holder.model_dump_json().encode()
        await update(bus, buckets.LEASES, KEY, theirs, last=await revision(bus))
        with pytest.raises(LeaseLost, match="another claimant"):
            await holder.renew()
        assert not holder.held


async def test_a_record_deleted_under_the_holder_makes_the_lease_lost(on_nats: OnNats) -> None:
    holder = claimant(on_nats.bus, "host-1")
    await holder.try_take()
    await delete(on_nats.bus, buckets.LEASES, KEY, last=await revision(on_nats.bus))
    with pytest.raises(LeaseLost, match="deleted"):
        await holder.renew()


async def test_holding_rides_out_a_restart_without_an_error_and_keeps_the_lease(
    on_nats: OnNats, caplog: pytest.LogCaptureFixture
) -> None:
    """`hold()` (the seat's compile lease) across a restart that outlasts a renewal: no ERROR, no
    loss, and the lease is still this holder's afterwards."""
    ttl = timedelta(seconds=1.5)
    holder = claimant(on_nats.bus, "host-1", ttl)
    seen = on_nats.bus.reconnects
    with caplog.at_level(logging.INFO):
        async with anyio.create_task_group() as tg:
            await tg.start(holder.hold)
            await on_nats.server.stop()
            await anyio.sleep(ttl.total_seconds())  # the outage itself: renewals fall into it
            await on_nats.server.start()
            with anyio.fail_after(BOUND):
                await on_nats.bus.reconnected(seen)
            await anyio.sleep(ttl.total_seconds())  # renewals after it
            assert holder.held
            with pytest.raises(LeaseHeld, match="held by host host-1"):
                await claimant(on_nats.bus, "host-2", ttl).try_take()
            tg.cancel_scope.cancel()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_waiting_for_a_lease_rides_out_a_bus_that_does_not_answer(
    on_nats: OnNats, caplog: pytest.LogCaptureFixture
) -> None:
    """A take the bus does not answer is "not taken yet": said once, tried again, taken once NATS is back."""
    holder = claimant(on_nats.bus, "host-1", timedelta(seconds=1.5))
    await on_nats.server.stop()
    with caplog.at_level(logging.INFO, logger="registry.wire.lease"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.wait_for_it)
            await anyio.sleep(2)  # the outage itself: several attempts fall into it
            await on_nats.server.start()
            with anyio.fail_after(BOUND):
                while not holder.held:
                    await anyio.sleep(0.05)  # polling the lease, deadline above
    not_yet = [r for r in caplog.records if "not taken yet" in r.getMessage()]
    assert len(not_yet) == 1 and not_yet[0].levelno == logging.WARNING
    with pytest.raises(LeaseHeld, match="held by host host-1"):
        await claimant(on_nats.bus, "host-2").try_take()


async def test_a_replica_behind_answering_after_a_conflict_is_a_bus_error_not_a_loss(
    nats_server: LocalNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a cluster a direct get may be answered by a replica that has not caught up: after the
    conflict it shows the holder's record at the revision the holder knows, older than the write
    that refused the renewal. That says nothing about who holds the lease: retried, never lost."""
    async with impatient_bus(nats_server) as bus:
        await ensure_buckets(bus, BucketConfig())
        holder = claimant(bus, "host-1")
        await holder.try_take()
        behind = await get_stamped(bus, buckets.LEASES, KEY)  # the record as a replica behind still has it
        await renewal_given_up_then_stored(nats_server, bus, holder)
        answers = [behind]

        async def from_a_replica_behind_once(bus: Bus, bucket: Bucket, key: str) -> Stamped | None:
            return answers.pop() if answers else await get_stamped(bus, bucket, key)

        monkeypatch.setattr(lease_module, "get_stamped", from_a_replica_behind_once)
        with pytest.raises(BusError, match="retry") as raised:
            await holder.renew()
        assert not isinstance(raised.value, LeaseLost) and holder.held
        await holder.renew()  # the next renewal reads the record as it is
        assert holder.held


async def rolled_back_under(on_nats: OnNats, holder: Lease, tmp_path: Path, renewals: int) -> int:
    """The store copied, `renewals` more renewals acknowledged, then the server killed and started
    again from the copy: the record's revision the stream went back to."""
    copy = tmp_path / "store-copy"
    on_nats.server.copy_store(copy)
    at_copy = await revision(on_nats.bus)
    with anyio.fail_after(BOUND):
        while await revision(on_nats.bus) < at_copy + renewals:
            await anyio.sleep(0.05)  # polling the renewals, deadline above
    await on_nats.server.kill_and_roll_back(copy)
    return at_copy


async def test_a_holder_takes_its_lease_back_at_once_after_the_stream_went_back_and_nobody_else_gets_it(
    on_nats: OnNats, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A power failure rolls the store back past renewals the server had acknowledged: the record
    is the holder's, older than its ttl, at a revision below the holder's last. A claimant trying
    from the moment the server is back is refused every time; the holder takes the lease back."""
    ttl = timedelta(seconds=1.5)
    holder, other = claimant(on_nats.bus, "host-1", ttl), claimant(on_nats.bus, "host-2", ttl)
    refused = 0
    with caplog.at_level(logging.INFO, logger="registry.wire.lease"):
        async with anyio.create_task_group() as tg:
            await tg.start(holder.hold)
            went_back_to = await rolled_back_under(on_nats, holder, tmp_path, renewals=4)
            with anyio.fail_after(BOUND):
                while True:
                    try:
                        await other.try_take()
                    except LeaseHeld:
                        refused += 1
                    except BusError:
                        continue  # the stream not answering yet after the restart
                    else:
                        pytest.fail("a second claimant took the lease while its holder runs")
                    found = await get_stamped(on_nats.bus, buckets.LEASES, KEY)
                    back = found is not None and found.item.revision > went_back_to and b"host-1" in found.item.value
                    if back and holder.held and refused >= 3:
                        break
            tg.cancel_scope.cancel()
    assert any("taken back" in r.getMessage() for r in caplog.records), "the premise: the stream went back"
