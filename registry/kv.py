"""Reading a bucket's current keys through a server-side filter, and converging keys to a target.

`snapshot` creates a named ephemeral push consumer whose filter is in the create subject
(`$JS.API.CONSUMER.CREATE.KV_<b>.<name>.$KV.<b>.<filter>`), so a node's user can be granted a
listing of its own keys only. The consumer is flow-controlled and checked for gaps: a listing
either is whole or raises.

`converge` writes only the keys whose value differs and deletes those no longer wanted, each
write conditional on the revision it was compared against, so two writers never silently fight.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
from nats.aio.msg import Msg
from nats.js import api
from nats.js.kv import KeyValue
from nats.nuid import NUID

from registry.bus import Bus, BusError, PermissionDenied

log = logging.getLogger(__name__)

_KV_OPERATION = "KV-Operation"
_REMOVED = ("DEL", "PURGE")
_nuid = NUID()


@dataclass(frozen=True, slots=True)
class KvItem:
    key: str
    value: bytes
    revision: int
    deleted: bool = False


@dataclass
class _Listing:
    prefix_length: int
    items: list[KvItem] = field(default_factory=list)
    consumer_seq: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)
    progressed_at: float = field(default_factory=time.monotonic)
    error: str | None = None


async def snapshot(
    bus: Bus, bucket: str, filters: Sequence[str] = (">",), *, include_deleted: bool = False
) -> list[KvItem]:
    """The latest entry of every key matching `filters`, in stream order. Deleted keys are left
    out unless `include_deleted` (a converge needs their revision to write over them)."""
    operation = f"list {bucket} {' '.join(filters)}"
    listing = _Listing(prefix_length=len(f"$KV.{bucket}."))
    inbox = bus.nc.new_inbox()
    with bus.translate_errors(operation):

        async def on_message(msg: Msg) -> None:
            await _receive(bus, listing, msg)

        sub = await bus.nc.subscribe(inbox, cb=on_message)
        try:
            info = await bus.js.add_consumer(f"KV_{bucket}", config=_listing_config(bucket, filters, inbox))
            if info.num_pending == 0 and (info.delivered is None or info.delivered.consumer_seq == 0):
                listing.done.set()
            await _wait(bus, listing, operation)
        finally:
            await sub.unsubscribe()
    return [item for item in listing.items if include_deleted or not item.deleted]


def _listing_config(bucket: str, filters: Sequence[str], inbox: str) -> api.ConsumerConfig:
    subjects = [f"$KV.{bucket}.{f}" for f in filters]
    return api.ConsumerConfig(
        name=_nuid.next().decode(),
        deliver_subject=inbox,
        deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=api.AckPolicy.NONE,
        filter_subject=subjects[0] if len(subjects) == 1 else None,
        filter_subjects=subjects if len(subjects) > 1 else None,
        flow_control=True,
        idle_heartbeat=1.0,
        inactive_threshold=1.0,  # counts from when nobody listens: a listing leaves no consumer behind for long
        mem_storage=True,
        num_replicas=1,
    )


async def _wait(bus: Bus, listing: _Listing, operation: str) -> None:
    idle_limit = bus.options.request_timeout.total_seconds()
    while not listing.done.is_set():
        with anyio.move_on_after(idle_limit / 4):
            await listing.done.wait()
        if time.monotonic() - listing.progressed_at > idle_limit:
            denial = bus.recent_denial(listing.progressed_at - idle_limit)
            if denial is not None:  # e.g. flow-control replies refused: the server holds the rest back
                raise PermissionDenied(operation, denial)
            raise BusError(operation, f"no progress for {idle_limit:.0f} s after {len(listing.items)} keys")
    if listing.error is not None:
        raise BusError(operation, listing.error)


async def _receive(bus: Bus, listing: _Listing, msg: Msg) -> None:
    headers = msg.headers
    if headers and headers.get("Status") == "100":
        # Heartbeats keep coming while flow control is stalled: only keys count as progress.
        await _answer_control(bus, msg)
        return
    listing.progressed_at = time.monotonic()
    if listing.done.is_set():
        return
    stream_seq, consumer_seq, pending = ack_metadata(msg.reply)
    if consumer_seq != listing.consumer_seq + 1:
        listing.error = f"messages were lost (consumer sequence {listing.consumer_seq} then {consumer_seq}); retry"
        listing.done.set()
        return
    listing.consumer_seq = consumer_seq
    deleted = headers is not None and headers.get(_KV_OPERATION) in _REMOVED
    listing.items.append(KvItem(msg.subject[listing.prefix_length :], msg.data, stream_seq, deleted))
    if pending == 0:
        listing.done.set()


async def _answer_control(bus: Bus, msg: Msg) -> None:
    """Flow-control requests want an empty reply; a heartbeat may name a stalled flow control."""
    reply = msg.reply or (msg.headers or {}).get("Nats-Consumer-Stalled")
    if reply:
        await bus.nc.publish(reply)


def ack_metadata(reply: str) -> tuple[int, int, int]:
    """Stream sequence, consumer sequence and pending count from a JetStream ack subject."""
    tokens = reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[6]), int(tokens[8])
    # $JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>.<token>
    return int(tokens[7]), int(tokens[8]), int(tokens[10])


async def get_latest(bus: Bus, bucket: str, key: str) -> KvItem | None:
    """The latest entry of `key` by direct get (the key is in the subject, so a node's user can be
    granted its own keys only), or None when the key was never written. Raises `BusError`; a
    bucket created without `direct=True` has no responder (`nats.errors.NoRespondersError`)."""
    subject = f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{key}"
    with bus.translate_errors(f"get {bucket} {key}"):
        msg = await bus.nc.request(subject, b"", timeout=bus.options.request_timeout.total_seconds())
    headers = msg.headers or {}
    status = headers.get("Status")
    if status == "404":
        return None
    if status is not None:
        raise BusError(f"get {bucket} {key}", f"status {status} {headers.get('Description', '')}".strip())
    deleted = headers.get(_KV_OPERATION) in _REMOVED
    return KvItem(key, msg.data, int(headers.get("Nats-Sequence", "0")), deleted)


@dataclass
class Changes:
    """What a converge did, key by key."""

    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.written or self.deleted)

    def summary(self) -> str:
        return f"{len(self.written)} written, {len(self.deleted)} deleted"


class ConvergeError(BusError):
    """A converge failed part-way; `done` says what had already been written or deleted."""

    def __init__(self, bucket: str, key: str, reason: str, done: Changes) -> None:
        self.bucket = bucket
        self.key = key
        self.done = done
        super().__init__(f"converge {bucket}", f"key {key!r}: {reason} (already done: {done.summary()})")


async def converge(
    bus: Bus, kv: KeyValue, bucket: str, current: Sequence[KvItem], desired: Mapping[str, bytes]
) -> Changes:
    """Makes the keys of `current` (a snapshot with deletions) hold exactly `desired`.

    Writes only where the value differs and deletes what `desired` no longer has.
    """
    latest = {item.key: item for item in current}
    changes = Changes()
    for key, value in desired.items():
        item = latest.get(key)
        if item is not None and not item.deleted and item.value == value:
            continue
        await _step(bus, bucket, key, changes, kv.update(key, value, last=item.revision if item else 0))
        changes.written.append(key)
    for key, item in latest.items():
        if key not in desired and not item.deleted:
            await _step(bus, bucket, key, changes, kv.delete(key, last=item.revision, validate_keys=False))
            changes.deleted.append(key)
    return changes


async def _step(bus: Bus, bucket: str, key: str, done: Changes, write: Awaitable[object]) -> None:
    try:
        with bus.translate_errors(f"write {bucket} {key}"):
            await write
    except BusError as err:
        raise ConvergeError(bucket, key, err.reason, done) from err
