"""A lease in the bus: one holder at a time for a role (the compiling seat, a node's client).

A lease is a key of the leases bucket (`seat.compile`, `node.<node-token>`) whose value names
its holder (host, pid, since when). It is taken and renewed by conditional writes (compare and
set on the key's revision), so two claimants never both win, and it expires when its holder
stops renewing it: a claimant judges a lease by the time the server stored its last renewal
(`Nats-Time-Stamp`) against its own clock, so hosts' clocks must agree within `SKEW` (NTP).

Leases live in a bucket of their own, so that an unchanged reconcile or compile still writes
nothing to the registry, needs, applied or collect buckets; a renewal is the only write.

JetStream acknowledges a write before it reaches the disk, so a server that restarts after a
power failure may hold the lease's record as it was some renewals ago: older (it looks expired to
a claimant), at a lower revision than its holder wrote last, or not at all. The holder renews at
once when its connection is recovered, and a record found below its own last revision (or gone
without a delete marker) is the stream gone back, never another claimant: it takes the lease back
there. A claimant that took over a record its holder stopped renewing keeps the lease only once
that holder had half a ttl to take it back (`confirm`): until then it has not taken it.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from registry.command_line import timestamp
from registry.contract import buckets, to_json
from registry.errors import BusError, RegistryError, WrongLastSequence
from registry.wire.bus import Bus
from registry.wire.kv import Stamped, delete, get_stamped, update

log = logging.getLogger(__name__)

SKEW = timedelta(seconds=5)
MAX_TTL = timedelta(days=366)  # a longer ttl in a lease record is read as unreadable
RETRY_FIRST = 0.25  # seconds before a take the bus left unanswered is tried again, doubling


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
        return f"host {self.host} pid {self.pid} since {timestamp(self.since)}"


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
        self._told: str | None = None  # why the lease was last not taken, once said

    @property
    def held(self) -> bool:
        return self._revision is not None

    async def try_take(self) -> None:
        """Takes the lease if it is free, expired or ours; `LeaseHeld` names the live holder.

        A claimant that wrote first is named from its record, read again; that record may also
        be this claimant's own, a take given up on and stored later: the lease is then taken
        from there."""
        try:
            overtaken = await self._take_as_found()
        except WrongLastSequence:
            try:
                overtaken = await self._take_as_found()
            except WrongLastSequence:
                raise LeaseHeld(self.key, None, timedelta(0)) from None  # written again meanwhile
        if overtaken:
            await self._confirm()
        log.info("lease %s taken by %s", self.key, self.holder.describe(), extra={"key": self.key})

    async def _take_as_found(self) -> bool:
        """Writes this claimant's record over the one found; whether that was another holder's
        that had stopped renewing (the take is then to be confirmed)."""
        current = await get_stamped(self.bus, buckets.LEASES, self.key)
        overtaken = False
        if current is not None and not current.item.deleted:
            other = _holder_of(current)
            age = datetime.now(UTC) - current.stored_at
            overtaken = other is None or other.id != self.holder.id
            if overtaken and age <= _lifetime(other, self.ttl) + self.skew:
                raise LeaseHeld(self.key, other, age)
        last = current.item.revision if current is not None else 0
        self._revision = await update(self.bus, buckets.LEASES, self.key, to_json(self.holder), last=last)
        return overtaken

    async def _confirm(self) -> None:
        """Waits half a ttl, then checks the record is still the one this claimant wrote: a holder
        still running after the bus went back renews within a third of its ttl and takes the lease
        back (`renew`), and then this claimant never held it (`LeaseHeld` names that holder)."""
        taken = self._revision
        await anyio.sleep(self.ttl.total_seconds() / 2)
        current = await get_stamped(self.bus, buckets.LEASES, self.key)
        if current is not None and current.item.revision == taken and self._is_own(current):
            return
        self._revision = None
        holder = _holder_of(current) if current is not None and not current.item.deleted else None
        raise LeaseHeld(self.key, holder, timedelta(0))

    async def renew(self) -> None:
        """Writes the record again, conditional on the revision this holder last wrote.

        A renewal the bus did not answer (a timeout, the connection away) may be stored all the
        same, later: nats-py sends what it buffered while reconnecting. The record is then this
        holder's own at a revision it never heard of, and the lease is kept and renewed from
        there. Only another holder's record, or none, is `LeaseLost`; a bus error is raised as
        itself, the lease still held (its ttl decides, and the next renewal tells)."""
        if self._revision is None:
            raise LeaseLost(self.key, "not held")
        try:
            self._revision = await update(self.bus, buckets.LEASES, self.key, to_json(self.holder), last=self._revision)
        except WrongLastSequence:
            await self._renew_from_own_record(self._revision)

    async def _renew_from_own_record(self, known: int) -> None:
        current = await get_stamped(self.bus, buckets.LEASES, self.key)
        if current is None or current.item.revision < known:
            await self._take_back(current, known)
            return
        if current.item.deleted:
            self._revision = None
            raise LeaseLost(self.key, "its record was deleted") from None
        if not self._is_own(current):
            self._revision = None
            raise LeaseLost(self.key, "another claimant took it after it expired") from None
        if current.item.revision <= known:  # a replica behind the write that refused ours
            raise BusError(f"renew lease {self.key}", f"read revision {current.item.revision}, not past {known}; retry")
        log.info(
            "lease %s: a renewal given up on was stored all the same (revision %d); kept from there",
            self.key,
            current.item.revision,
            extra={"key": self.key},
        )
        self._revision = current.item.revision
        self._revision = await update(self.bus, buckets.LEASES, self.key, to_json(self.holder), last=self._revision)

    async def _take_back(self, current: Stamped | None, known: int) -> None:
        """The record below the revision this holder wrote last (or gone, no delete marker left): the
        stream went back, a server restarted from a store that had not reached the disk. Nobody
        else wrote the lease meanwhile, or its revision would be past ours: it is taken back there,
        conditionally (a replica behind a leader that holds more refuses it: tried again)."""
        found = current.item.revision if current is not None else 0
        self._revision = await update(self.bus, buckets.LEASES, self.key, to_json(self.holder), last=found)
        log.warning(
            "lease %s: the bus held it at revision %d, below the %d this holder wrote last (its stream went "
            "back: a server restarted from a store behind the writes it had acknowledged); taken back",
            self.key,
            found,
            known,
            extra={"key": self.key},
        )

    def _is_own(self, current: Stamped) -> bool:
        """Whether a record read back is this holder's own (a write of its stored after all)."""
        holder = _holder_of(current) if not current.item.deleted else None
        return holder is not None and holder.id == self.holder.id

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
                if current is None or not self._is_own(current):
                    return
                await delete(self.bus, buckets.LEASES, self.key, last=current.item.revision)
        except RegistryError as err:  # it expires anyway
            log.warning("lease %s not released: %s", self.key, err, extra={"key": self.key})

    async def hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Waits for the lease, reports started once held, renews it every third of its ttl until
        cancelled (then releases it); raises `LeaseLost` when a renewal finds it taken.

        A renewal the bus does not answer is tried again at the next: the lease lasts a whole
        ttl, and the next renewal's conditional write tells whether another claimant took it
        meanwhile. Said once per outage, at WARNING: an outage is no loss. A lease taken already
        (`take`) is held as it is."""
        if not self.held:
            await self.wait_for_it()
        task_status.started()
        try:
            await self.keep_renewed()
        finally:
            with anyio.move_on_after(2, shield=True):
                await self.release()

    async def keep_renewed(self) -> None:
        """Renews the lease every third of its ttl until cancelled; raises `LeaseLost` when a
        renewal finds it taken. A renewal the bus does not answer is tried again at the next."""
        unanswered = False
        while True:
            await self.renewal_due()
            unanswered = await self._renewed_or_told(unanswered)

    async def renewal_due(self, asked: anyio.Event | None = None) -> None:
        """Returns a third of the ttl from now, or sooner: once the connection is recovered (a server
        that restarted may hold the lease as it was some renewals ago, and it is taken back at once)
        or when `asked` is set."""
        seen = self.bus.reconnects
        with anyio.move_on_after(self.ttl.total_seconds() / 3):
            async with anyio.create_task_group() as first:

                async def then_stop(event: Awaitable[object]) -> None:
                    await event
                    first.cancel_scope.cancel()

                first.start_soon(then_stop, self.bus.reconnected(seen))
                if asked is not None:
                    first.start_soon(then_stop, asked.wait())

    async def _renewed_or_told(self, unanswered: bool) -> bool:
        """One renewal; whether the bus left it unanswered (told when it starts and when it ends)."""
        try:
            await self.renew()
        except BusError as err:
            if not unanswered:
                log.warning("lease %s not renewed: %s; trying again", self.key, err, extra={"key": self.key})
            return True
        if unanswered:
            log.info("lease %s renewed again", self.key, extra={"key": self.key})
        return False

    async def take(self) -> bool:
        """One attempt at the lease: whether it is now this claimant's. Held by another, or the bus
        not answering (an outage; a fresh cluster's stream that does not answer direct gets yet),
        it is "not taken yet", never an error: said once, at WARNING, until the reason changes
        or the lease is taken."""
        try:
            await self.try_take()
        except LeaseHeld as held:
            self._tell("held", "%s; waiting for it to expire", held)
        except BusError as err:
            self._tell("bus", "lease %s not taken yet: %s; trying again", self.key, err)
        else:
            self._told = None
            return True
        return False

    async def wait_for_it(self, stopping: anyio.Event | None = None) -> bool:
        """Takes the lease once it is free or expired: tried every third of the ttl while another
        holds it, and sooner, with a backoff, while the bus does not answer. False when
        `stopping` was set first."""
        every = self.ttl.total_seconds() / 3
        pause = min(RETRY_FIRST, every)
        stopped = stopping or anyio.Event()
        while not stopped.is_set():
            if await self.take():
                return True
            with anyio.move_on_after(every if self._told == "held" else pause):
                await stopped.wait()
            pause = min(pause * 2, every)
        return False

    def _tell(self, reason: str, message: str, *args: object) -> None:
        if self._told != reason:
            log.warning(message, *args, extra={"key": self.key})
            self._told = reason


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
