"""Removing a node: its keys in the needs, applied and collect buckets, its lease and, with
decentralized auth, its account.

For the controller (import `remove_node`) and for an operator (`mesh-provisioner remove-node`),
connected with the seat's credentials in the data account. The node's keys are found under
`<node-token>.>`, the node's name escaped exactly as keys are, so node `a.b` removes `a=2Eb.>`
and never the keys of node `a`. Each key gets a delete marker conditional on the revision it
was listed at: never a rollup or purge (the buckets refuse rollups), and a key written again
in between is left alone with an error rather than lost.

The lease (`node.<node-token>` of the leases bucket) is the node's client's: while a client holds
it (its record renewed within its ttl and `SKEW`), removing is refused with `NodeStillHeld`,
naming the holder, unless forced: a running client writes its keys back as long as its account
lets it. The lease's record is replaced by a delete marker saying `removed` (`REMOVED_LEASE`), so
that the seat's nodes view forgets the node instead of showing it released, then stale.

With decentralized auth the node's account is deleted first (`delete_node_account`, as the
system account's user, the request signed by the operator): its connections are closed and its
credential refused before its keys go. With static accounts that is the controller's reload of
the grants issued without the node.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from provisioner.errors import ProvisionerError
from provisioner.verb.nodes import REMOVED_LEASE, ago
from registry.access import (
    SYSTEM_USER,
    Kind,
    Nkey,
    Party,
    account_key,
    creds_path,
    delete_accounts,
    operator_key,
)
from registry.contract import Bucket, buckets, under
from registry.errors import BusError, SettingsError, WrongLastSequence
from registry.wire import SKEW, Bus, BusOptions, Holder, KvItem, current_snapshot, delete, get_direct, node_key

log = logging.getLogger(__name__)

NODE_BUCKETS: tuple[Bucket, ...] = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)
# A lease whose holder cannot be read is judged by the node client's default ttl.
DEFAULT_LEASE_TTL = timedelta(seconds=15)
_FORCED_TRIES = 3  # a forced removal racing a live client's renewals


@dataclass(frozen=True)
class LiveLease:
    """A node's lease as its client holds it: who (None when its record cannot be read), and how
    long ago the server stored its last renewal."""

    holder: Holder | None
    renewed_ago: timedelta

    def describe(self) -> str:
        who = self.holder.describe() if self.holder is not None else "a client whose record cannot be read"
        ttl = f", ttl {ago(timedelta(seconds=self.holder.ttl_seconds))}" if self.holder is not None else ""
        return f"{who}, renewed {ago(self.renewed_ago)} ago{ttl}"


class NodeStillHeld(ProvisionerError):
    """A node whose client holds its lease: nothing was removed."""

    def __init__(self, node: str, lease: LiveLease) -> None:
        self.node = node
        self.lease = lease
        host = lease.holder.host if lease.holder is not None else "its machine"
        super().__init__(
            f"node {node!r} is held by its client ({lease.describe()}): nothing removed. Stop that client "
            f"first (on {host}: systemctl disable --now mesh-provisioner-client) and run this again. A client "
            "that cannot be stopped writes its keys back: revoke its account first (static accounts: issue the "
            "grants without the node and reload nats-server; decentralized: --jwt deletes it), then pass --force"
        )


@dataclass(frozen=True)
class Footprint:
    """What the buckets hold of a node: its keys by bucket, and its lease's latest record (a
    release is a delete marker; None when it was never written)."""

    node: str
    keys: dict[Bucket, list[KvItem]]
    lease: KvItem | None

    @property
    def lease_left(self) -> KvItem | None:
        """The lease's record, unless there is none to remove (none, or the marker a removal left)."""
        return self.lease if self.lease is not None and not _left_by_removal(self.lease) else None

    @property
    def empty(self) -> bool:
        return not any(self.keys.values()) and self.lease_left is None

    def live_lease(self, now: datetime) -> LiveLease | None:
        """The lease while a client holds it: renewed within its ttl and `SKEW`."""
        if self.lease is None or self.lease.deleted:
            return None
        holder = _holder_of(self.lease)
        renewed_ago = max(now - (self.lease.stored_at or now), timedelta(0))
        ttl = timedelta(seconds=holder.ttl_seconds) if holder is not None else DEFAULT_LEASE_TTL
        return LiveLease(holder, renewed_ago) if renewed_ago <= ttl + SKEW else None

    def refuse_if_held(self, *, force: bool) -> LiveLease | None:
        """The live lease, if any; `NodeStillHeld` unless `force`."""
        live = self.live_lease(datetime.now(UTC))
        if live is not None and not force:
            raise NodeStillHeld(self.node, live)
        return live


def _holder_of(item: KvItem) -> Holder | None:
    try:
        return Holder.model_validate_json(item.value)
    except ValidationError:
        return None


async def node_keys(bus: Bus, node: str) -> dict[Bucket, list[KvItem]]:
    """The current keys of `node` in each bucket keyed by node (malformed keys under it too)."""
    return {bucket: await current_snapshot(bus, bucket, [under(node)]) for bucket in NODE_BUCKETS}


async def footprint(bus: Bus, node: str) -> Footprint:
    return Footprint(node, await node_keys(bus, node), await get_direct(bus, buckets.LEASES, node_key(node)))


async def remove_keys(bus: Bus, found: dict[Bucket, list[KvItem]]) -> dict[str, list[str]]:
    """Deletes each key of `found` at the revision it was listed at; the keys removed, by bucket."""
    removed: dict[str, list[str]] = {}
    for bucket, items in found.items():
        for item in sorted(items, key=lambda item: item.key):
            await delete(bus, bucket, item.key, last=item.revision)
            log.info("removed %s %s", bucket.name, item.key, extra={"bucket": bucket.name, "key": item.key})
            removed.setdefault(bucket.name, []).append(item.key)
    return removed


async def remove_lease(bus: Bus, node: str, lease: KvItem | None, *, force: bool) -> bool:
    """Leaves the `removed` marker on the node's lease at the revision `lease` (its record to
    remove, if any) was read at; whether there was one. Forced, a live client's renewal in between
    is read and written over."""
    key = node_key(node)
    for _ in range(_FORCED_TRIES):
        if lease is None:
            return False
        try:
            await delete(bus, buckets.LEASES, key, last=lease.revision, note=REMOVED_LEASE)
        except WrongLastSequence:
            if not force:
                raise
            lease = Footprint(node, {}, await get_direct(bus, buckets.LEASES, key)).lease_left
            continue
        log.info("removed lease %s", key, extra={"bucket": buckets.LEASES.name, "key": key})
        return True
    raise BusError(f"remove lease {key}", f"its client renewed it {_FORCED_TRIES} times meanwhile; stop it first")


def _left_by_removal(lease: KvItem) -> bool:
    """Whether a lease record is the marker a removal left: nothing more to remove."""
    return lease.deleted and lease.value == REMOVED_LEASE


async def remove_footprint(bus: Bus, found: Footprint, *, force: bool = False) -> dict[str, list[str]]:
    """Removes what `found` lists: the keys, then the lease (so that the node stays listed until
    its keys are gone); what was removed, by bucket. `NodeStillHeld` while its client holds the
    lease, unless `force`."""
    found.refuse_if_held(force=force)
    removed = await remove_keys(bus, found.keys)
    if await remove_lease(bus, found.node, found.lease_left, force=force):
        removed[buckets.LEASES.name] = [node_key(found.node)]
    return removed


async def remove_node(bus: Bus, node: str, *, force: bool = False) -> dict[str, list[str]]:
    """Removes every key of `node` from needs, applied and collect, and its lease; what was
    removed, by bucket (empty when there was nothing to remove). Raises `NodeStillHeld` while its
    client holds its lease, unless `force` (revoke its account first, or it writes its keys
    back), and `registry.errors.BusError`, e.g. `WrongLastSequence` when the node wrote a key
    again meanwhile: run it again once its client is stopped."""
    return await remove_footprint(bus, await footprint(bus, node), force=force)


@dataclass(frozen=True)
class AccountRemoval:
    """What deleting a node's account takes (decentralized auth), read from the seeds folder
    `grants --jwt` kept before anything is removed: the account's public key, the operator's key
    that signs the request, and the system account's user that sends it."""

    node: str
    account: str
    operator: Nkey
    system_creds: Path

    @staticmethod
    def of(keys: Path, node: str) -> AccountRemoval:
        """`SettingsError` naming the file of `keys` that is missing."""
        label = Party(kind=Kind.NODE, name=node).label
        system_creds = creds_path(keys, SYSTEM_USER)
        try:
            account = account_key(keys, label).public_key
            operator = operator_key(keys)
            system_creds.stat()
        except OSError as err:
            missing = Path(err.filename or "").name
            raise SettingsError("--keys", f"no {missing} in {keys}: give the seeds `grants --jwt` kept") from None
        return AccountRemoval(node, account, operator, system_creds)

    def options(self, seat: BusOptions) -> BusOptions:
        """The seat's servers, as the system account's user."""
        others = {"nkey_seed": None, "user": None, "password": None, "token": None}
        return seat.model_copy(update={"creds": self.system_creds, "name": f"{seat.name}-system", **others})


async def delete_node_account(system: Bus, removal: AccountRemoval) -> str:
    """Deletes the node's account from nats-server's resolver, as the system account's user
    (`system`), signed by the operator; what the server answered. Its connections are closed and
    its credential refused; issue the grants without it, or a restart preloads it."""
    answer = await delete_accounts(system, removal.operator, [removal.account])
    log.info("deleted the account of node %s: %s", removal.node, answer, extra={"node": removal.node})
    return answer
