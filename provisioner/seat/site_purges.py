"""The hub's quota purges, followed by each site's copies.

The quota guard (`provisioner.seat.quotas`) cuts a node back by purging its keys from a bucket at
the hub. A purge is no message: a site's mirror of the bucket never sees it, keeps the purged keys
and the node's stamp there, and the node's honest client, reading at its site, never registers
again (`docs/sites-write-path.md`). Purging the site's mirror from the hub would need the link to
carry `$JS.<site>.API` (and the site to be up when it happens). Instead the hub leaves a record
that its mirrors carry, and each site's seat purges the same messages from its own copy:

    at the hub   the guard purges `<node>.>` of the bucket up to the last revision it counted
                 (`seq`: the node's writes after the count stay, and are counted next), then puts
                 `purge-<bucket>.<node>` in the leases bucket: {"upto"}
    at a site    the seat follows `purge-<bucket>.*` keys of its leases mirror and purges its mirror
                 of the bucket, the node's keys the record's key names (`<node>.>`, never a filter
                 the value would say), up to the same sequence: a mirror keeps the hub's
                 sequences, so exactly the messages the hub purged go, never a later write

The record is one key per node and bucket (the last purge's: a purge up to a sequence covers those
before it), readable by the data account alone (a node is granted its own lease only). A site
whose link is cut purges when the record arrives, after the link is back; a site seat started
later applies every record at its start (a purge done already purges nothing).

The two mirrors (leases and the bucket) follow the hub each on its own: a message of the node's
that was already on its way across the link when the hub purged may reach the site's mirror after
the record. So each record is applied again `AGAIN_AFTER` later, when what was in flight has
landed (what the hub purged is no longer there to be sent).
"""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ConfigDict, ValidationError

from registry.contract import Bucket, buckets, decode_token, encode_token, fleet
from registry.errors import BusError, KeyShapeError
from registry.wire import Bus, KvItem, put, scoped_watch

log = logging.getLogger(__name__)

PREFIX = "purge-"  # the leases' role of a purge record: `purge-<bucket>`
AGAIN_AFTER = 10.0  # seconds after a record arrived that it is applied again


class PurgeRecord(BaseModel):
    """The last revision of a node's keys the hub purged (the bucket and node: the record's key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    upto: int


def record_key(bucket: Bucket, token: str) -> str:
    """The leases key of the purge record of node `token` (a key token) in `bucket`."""
    return buckets.LEASES.shape.build(role=f"{PREFIX}{bucket.name}", name=decode_token(token))


def purged_filter(bucket: Bucket, key: str) -> str:
    """The node's keys of `bucket` a purge record's key names (`<node token>.>`, in the fleet its
    claims `claim.*.<node token>`); `KeyShapeError` when out of shape."""
    token = encode_token(buckets.LEASES.shape.parse(key)["name"])
    return fleet.claims_by_token(token) if bucket == fleet.FLEET else f"{token}.>"


async def purge_upto(bus: Bus, bucket: Bucket, subject_filter: str, upto: int) -> int:
    """Purges the entries of the keys matching `subject_filter` up to revision `upto`; how many."""
    body = {"filter": bucket.subject(subject_filter), "seq": upto + 1}
    operation = f"purge {bucket.name} {subject_filter} up to {upto}"
    answer = await bus.jetstream(bucket.purge_api, body, operation=operation, change=True)
    return int(answer.get("purged", 0))


async def record_purge(bus: Bus, bucket: Bucket, token: str, upto: int) -> None:
    """The hub's record of a purge of node `token`'s keys of `bucket` up to `upto`, for the sites."""
    record = PurgeRecord(upto=upto)
    await put(bus, buckets.LEASES, record_key(bucket, token), record.model_dump_json().encode())


async def follow_purges(
    bus: Bus,
    copied: tuple[Bucket, ...],
    *,
    again_after: float = AGAIN_AFTER,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """At a site: applies each purge record of the buckets `copied` (mirrored here) to the site's
    mirror, those standing at start first, then each new one, and each once more `again_after`
    seconds later, until cancelled."""
    async with anyio.create_task_group() as tasks:
        for bucket in copied:
            tasks.start_soon(_follow, bus, bucket, again_after)
        task_status.started()


async def _follow(bus: Bus, bucket: Bucket, again_after: float) -> None:
    async with (
        anyio.create_task_group() as later,
        scoped_watch(bus, buckets.LEASES, f"{encode_token(PREFIX + bucket.name)}.>") as records,
    ):
        async for item in records:
            await _apply(bus, bucket, item)
            later.start_soon(_apply_later, bus, bucket, item, again_after)


async def _apply_later(bus: Bus, bucket: Bucket, item: KvItem, delay: float) -> None:
    await anyio.sleep(delay)
    await _apply(bus, bucket, item)


async def _apply(bus: Bus, bucket: Bucket, item: KvItem) -> None:
    if item.deleted:
        return
    try:
        record = PurgeRecord.model_validate_json(item.value)
        subject_filter = purged_filter(bucket, item.key)
    except (ValidationError, KeyShapeError):
        log.warning("purge record %s is not one the hub's seat writes; ignored", item.key)
        return
    try:
        purged = await purge_upto(bus, bucket, subject_filter, record.upto)
    except BusError as err:
        reason = err.reason
        log.warning(
            "the hub's purge of %s in %s not applied here (%s); at the seat's next start",
            subject_filter,
            bucket.name,
            reason,
        )
        return
    if purged:
        log.info(
            "site copy %s: the hub's quota purge of %s up to %d applied (%d messages)",
            bucket.stream,
            subject_filter,
            record.upto,
            purged,
            extra={"bucket": bucket.name},
        )
