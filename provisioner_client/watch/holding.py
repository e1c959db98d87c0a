"""One client per node: the node's lease (`registry.wire.lease`, key `node.<node>` of the leases bucket).

A one-shot `reconcile` takes the lease or is refused at once with `NodeHeld`, naming the holder
(host, pid, since when; the CLI exits 5), keeps it renewed while it runs and releases it after.
Watch mode waits for the lease (`Lease.wait_for_it`, logging once who holds it), takes it when the holder released it
or its lease expired (`lease_ttl` without a renewal, plus `registry.wire.lease.SKEW`), and renews it
every third of `lease_ttl` for as long as it runs; a renewal that finds the lease taken sets
`lost`, and watch mode stops reconciling and waits for the lease again. `status` only reads and
needs no lease.

Leases live in their own bucket, so an unchanged reconcile still writes nothing to needs, applied
or collect: the renewal is the only write.

At a site, the renewal crosses the leaf link to the hub (`docs/sites-write-path.md`): during a cut
it is answered `NoResponders` at once (a silent link: it times out), every third of the ttl, and
the watch goes on reconciling from the site's data. Watch mode (`Renewals`) tells each outcome to
the record of waiting writes (`resolving.own`, part `lease`: since when, and the answer), which `status`
reads, and while the renewals wait it tries one before each reconcile, so that nothing is written
again before the lease is known to be still this client's. Once the link is back, the renewal on
this holder's own revision succeeds (the hub saw the lease expire, but nobody wrote it), or raises
`LeaseLost` if remove-node or another claimant did: the watch then waits for the lease as always.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import anyio

from provisioner_client.errors import NodeHeld
from provisioner_client.resolving.own import LEASE, WaitingWrites, link_down
from registry.errors import BusError
from registry.wire import Bus, Lease, LeaseHeld, LeaseLost, node_key

log = logging.getLogger(__name__)


def node_lease(bus: Bus, node: str, ttl: timedelta) -> Lease:
    return Lease(bus, node_key(node), ttl=ttl)


@asynccontextmanager
async def holding(bus: Bus, node: str, ttl: timedelta) -> AsyncIterator[Lease]:
    """The node's lease, taken now (`NodeHeld` if another client holds it) and renewed until the block ends."""
    lease = node_lease(bus, node, ttl)
    try:
        await lease.try_take()
    except LeaseHeld as held:
        raise NodeHeld(node, _holder(held)) from None
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(renew, lease, anyio.Event())
            yield lease
            tasks.cancel_scope.cancel()
    finally:
        with anyio.move_on_after(2, shield=True):
            await lease.release()


async def renew(lease: Lease, lost: anyio.Event) -> None:
    """Keeps the lease renewed (`Lease.keep_renewed`); sets `lost` and returns when another claimant took it."""
    try:
        await lease.keep_renewed()
    except LeaseLost as err:
        _lost(lease, lost, err)


def _lost(lease: Lease, lost: anyio.Event, err: LeaseLost) -> None:
    lost.set()
    log.error("%s; this client stops reconciling", err, extra={"key": lease.key})


class Renewals:
    """Watch mode's renewals of its lease: every third of the ttl and at a reconnect, as
    `Lease.keep_renewed`, each
    outcome told to `waits` (an answer saying the hub is out of reach starts or continues the
    lease's wait, a renewal stored ends it; any bus error is tried again at the next renewal, never
    ending the loop), and one at once when the watch asks (`now`): before it writes what waited for
    the hub, so that a lease removed during a cut is found lost before anything is written again."""

    def __init__(self, lease: Lease, lost: anyio.Event, waits: WaitingWrites) -> None:
        self.lease = lease
        self.lost = lost
        self.waits = waits
        self._asked = anyio.Event()
        self._answered = anyio.Event()  # set once a renewal started after the ask was tried
        self._said = False

    @property
    def waiting(self) -> bool:
        """Whether the lease's renewals wait for the hub, as last told."""
        current = self.waits.current()
        return current is not None and LEASE in current.parts

    async def run(self) -> None:
        """Renews until cancelled; sets `lost` and returns when another claimant took the lease."""
        try:
            while True:
                await self.lease.renewal_due(self._asked)
                self._asked = anyio.Event()
                answered, self._answered = self._answered, anyio.Event()
                try:
                    await self._once()
                finally:
                    answered.set()
        except LeaseLost as err:
            self.waits.done(LEASE)  # nothing of the lease waits: the watch waits for the lease again
            _lost(self.lease, self.lost, err)
        finally:
            self._answered.set()

    async def now(self) -> None:
        """A renewal tried at once; returns once it was (`lost` is set if the lease was lost)."""
        if self.lost.is_set():
            return
        answered = self._answered
        self._asked.set()
        await answered.wait()

    async def _once(self) -> None:
        try:
            await self.lease.renew()
        except LeaseLost:
            raise
        except BusError as err:
            how = link_down(err)
            if how is not None:
                self.waits.failed(LEASE, f"the lease renewal was answered {how}", detail=err.reason)
            elif not self._said:
                log.warning(
                    "lease %s not renewed: %s; trying again", self.lease.key, err, extra={"key": self.lease.key}
                )
            self._said = True
            return
        if self._said:
            log.info("lease %s renewed again", self.lease.key, extra={"key": self.lease.key})
        self._said = False
        self.waits.done(LEASE)


def _holder(held: LeaseHeld) -> str:
    return held.holder.describe() if held.holder is not None else str(held)
