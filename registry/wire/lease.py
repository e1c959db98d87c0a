"""A lease in the bus: one holder at a time for a role (the compiling seat, a node's client).

A lease is a key of the leases bucket (`seat.compile`, `node.<node-token>`) whose value names
its holder (host, pid, since when). It is taken and renewed by conditional writes (compare and
set on the key's revision), so two claimants never both win, and it expires when its holder
stops renewing it: a claimant judges a lease by the time the server stored its last renewal
(`Nats-Time-Stamp`) against its own clock, so hosts' clocks must agree within `SKEW` (NTP).

Leases live in a bucket of their own, so that an unchanged reconcile or compile still writes
nothing to the registry, needs, applied or collect buckets; a renewal is the only write.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from registry.contract import buckets, to_json
from registry.errors import RegistryError, WrongLastSequence
from registry.wire.bus import Bus
from registry.wire.kv import Stamped, delete, get_stamped, update

log = logging.getLogger(__name__)

SKEW = timedelta(seconds=5)
MAX_TTL = timedelta(days=366)  # a longer ttl in a lease record is read as unreadable


class Holder(BaseModel):
    """Who holds a lease, as stored in it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    host: str
    pid: int
    since: datetime
    ttl_seconds: float = Field(gt=0, le=MAX_TTL.total_seconds())  # a stored record is its writer's word

    @staticmethod
    def me(ttl: timedelta) -> Holder:
        return Holder(
            id=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=os.getpid(),
            since=datetime.now(UTC),
            ttl_seconds=ttl.total_seconds(),
        )

    def describe(self) -> str:
        return f"host {self.host} pid {self.pid} since {self.since.isoformat(timespec='seconds')}"


class LeaseHeld(RegistryError):
    """Someone else holds the lease and renews it."""

    def __init__(self, key: str, holder: Holder | None, renewed_ago: timedelta) -> None:
        self.key = key
        self.holder = holder
        who = holder.describe() if holder is not None else "a holder whose record cannot be read"
        super().__init__(f"lease {key} is held by {who} (renewed {renewed_ago.total_seconds():.0f} s ago)")


class LeaseLost(RegistryError):
    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(f"lease {key} was lost: {reason}")


class Lease:
    """One claimant of the lease at `key`; `hold()` takes it (waiting while another holds it) and
    keeps it renewed until cancelled."""

    def __init__(
        self, bus: Bus, key: str, *, ttl: timedelta, holder: Holder | None = None, skew: timedelta = SKEW
    ) -> None:
        self.bus = bus
        self.key = key
        self.ttl = ttl
        self.skew = skew
        self.holder = holder or Holder.me(ttl)
        self._revision: int | None = None

    @property
    def held(self) -> bool:
        return self._revision is not None

    async def try_take(self) -> None:
        """Takes the lease if it is free, expired or ours; `LeaseHeld` names the live holder."""
        current = await get_stamped(self.bus, buckets.LEASES, self.key)
        if current is not None and not current.item.deleted:
            other = _holder_of(current)
            age = datetime.now(UTC) - current.stored_at
            if (other is None or other.id != self.holder.id) and age <= _lifetime(other, self.ttl) + self.skew:
                raise LeaseHeld(self.key, other, age)
        last = current.item.revision if current is not None else 0
        try:
            self._revision = await update(self.bus, buckets.LEASES, self.key, to_json(self.holder), last=last)
        except WrongLastSequence:
            raise LeaseHeld(self.key, None, timedelta(0)) from None  # another claimant wrote first
        log.info("lease %s taken by %s", self.key, self.holder.describe(), extra={"key": self.key})

    async def renew(self) -> None:
        if self._revision is None:
            raise LeaseLost(self.key, "not held")
        try:
            self._revision = await update(self.bus, buckets.LEASES, self.key, to_json(self.holder), last=self._revision)
        except WrongLastSequence:
            self._revision = None
            raise LeaseLost(self.key, "another claimant took it after it expired") from None

    async def release(self) -> None:
        """Gives the lease up at once (a delete marker), so the next claimant need not wait."""
        if self._revision is None:
            return
        revision, self._revision = self._revision, None
        try:
            try:
                await delete(self.bus, buckets.LEASES, self.key, last=revision)
            except WrongLastSequence:
                # A renewal cancelled in flight may have been stored all the same: the lease is
                # still ours if the record is, and is released at the revision it stands at.
                current = await get_stamped(self.bus, buckets.LEASES, self.key)
                holder = _holder_of(current) if current is not None and not current.item.deleted else None
                if current is None or holder is None or holder.id != self.holder.id:
                    return
                await delete(self.bus, buckets.LEASES, self.key, last=current.item.revision)
        except RegistryError as err:  # it expires anyway
            log.warning("lease %s not released: %s", self.key, err, extra={"key": self.key})

    async def hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Waits for the lease, reports started once held, renews it every third of its ttl until
        cancelled (then releases it); raises `LeaseLost` when a renewal finds it taken."""
        await self.wait_for_it()
        task_status.started()
        try:
            while True:
                await anyio.sleep(self.ttl.total_seconds() / 3)
                await self.renew()
        finally:
            with anyio.move_on_after(2, shield=True):
                await self.release()

    async def wait_for_it(self) -> None:
        told = False
        while True:
            try:
                await self.try_take()
            except LeaseHeld as held:
                if not told:
                    log.warning("%s; waiting for it to expire", held, extra={"key": self.key})
                    told = True
            else:
                return
            await anyio.sleep(self.ttl.total_seconds() / 3)


def _holder_of(current: Stamped) -> Holder | None:
    try:
        return Holder.model_validate_json(current.item.value)
    except ValidationError:
        return None


def _lifetime(holder: Holder | None, default: timedelta) -> timedelta:
    return timedelta(seconds=holder.ttl_seconds) if holder is not None else default


def seat_key() -> str:
    return buckets.LEASES.shape.build(role="seat", name="compile")


def node_key(node: str) -> str:
    return buckets.LEASES.shape.build(role="node", name=node)
