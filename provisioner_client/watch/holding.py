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
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import anyio

from provisioner_client.errors import NodeHeld
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
        lost.set()
        log.error("%s; this client stops reconciling", err, extra={"key": lease.key})  # noqa: TRY400 -- an expected refusal, no traceback


def _holder(held: LeaseHeld) -> str:
    return held.holder.describe() if held.holder is not None else str(held)
