"""Key-value operations on a bucket: listing, getting, conditional writes, converging, creating.

`snapshot` reads the latest entry of every key under some subject filters through a
`registry.wire.feed.Feed`: the listing is either whole or raises; `current_snapshot` also re-reads a
listing older than the stream's leader (a replica that has just rejoined a cluster).
`get_latest` reads one key by direct get (the key is in the subject, so a node can be granted its
own keys only). `get_last_many` reads every key under some filters by one batch direct get, with
no consumer and at a cost flat in the stream's size: how `current_snapshot` reads up to
`MULTI_LAST_LIMIT` keys, and how a party without JetStream API access (a node in an account of its
own) reads a bucket granted to it whole.

Writes are plain publishes into the bucket's stream with JetStream's expected-sequence header,
so each is conditional on the revision it was compared against and two writers never silently
fight. `converge` writes only the keys whose value differs and deletes those no longer wanted.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

import anyio

from registry.contract import Bucket
from registry.errors import BusError, BusTimeout, ConvergeError, NoResponders, NotFound, PermissionDenied
from registry.wire.bus import Bus
from registry.wire.feed import Feed, KvItem, is_delete_marker
from registry.wire.nats_internals import HEADER_LINE_SIZE, STATUS_AT, header_lines, status_line
from registry.wire.no_responders import nobody_answers

log = logging.getLogger(__name__)

_EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"


async def snapshot(
    bus: Bus,
    bucket: Bucket,
    filters: Sequence[str] = (">",),
    *,
    include_deleted: bool = False,
    headers_only: bool = False,
    as_it_began: bool = False,
) -> list[KvItem]:
    """The latest entry of every key matching `filters` (relative to the bucket), in stream order.
    Deleted keys are left out unless `include_deleted` (a converge needs their revision). With
    `headers_only` the values are not read, only their sizes (`KvItem.size`). With `as_it_began`,
    only entries up to the stream's last sequence when the read began: a read follows the keys'
    writes while it lasts, so one slower than their writer never ended (the quota guard counting a
    node that wrote 60 KB headers faster than the seat read them)."""
    items: list[KvItem] = []
    done = anyio.Event()
    last = await stream_last_sequence(bus, bucket) if as_it_began else None

    def on_item(item: KvItem, pending: int) -> None:
        if last is not None and (done.is_set() or item.revision > last):
            done.set()
            return
        items.append(item)
        if pending == 0 or item.revision == last:
            done.set()

    # A key counted when the read began and removed before it was sent (the seat's quota guard
    # purging a node's keys) is never delivered: the idle heartbeat that follows ends the read.
    feed = Feed(
        bus,
        bucket,
        filters,
        on_item,
        heartbeat=1.0,
        inactive_threshold=1.0,
        headers_only=headers_only,
        on_idle=done.set,
    )
    try:
        if await feed.open() or last == 0:
            done.set()
        await _until_read(bus, feed, done, items)
    finally:
        await feed.close()
    return [item for item in items if include_deleted or not item.deleted]


async def _until_read(bus: Bus, feed: Feed, done: anyio.Event, items: list[KvItem]) -> None:
    idle_limit = bus.timeout
    while not done.is_set() and feed.broken is None:
        with anyio.move_on_after(idle_limit / 4):
            await done.wait()
        if not done.is_set() and time.monotonic() - feed.progressed_at > idle_limit:
            denial = bus.recent_denial(feed.progressed_at - idle_limit)
            if denial is not None:  # e.g. flow-control replies refused: the server holds the rest back
                raise PermissionDenied(feed.operation, denial[0], denial[1])
            raise BusError(feed.operation, f"no progress for {idle_limit:.0f} s after {len(items)} keys")
    if not done.is_set() and feed.broken is not None:
        raise BusError(feed.operation, f"{feed.broken}; retry")


async def current_snapshot(
    bus: Bus,
    bucket: Bucket,
    filters: Sequence[str] = (">",),
    *,
    include_deleted: bool = False,
    by_batch: bool = True,
    batch_only: bool = False,
    max_bytes: int | None = None,
) -> list[KvItem]:
    """The latest entry of every key matching `filters`, never older than the stream's leader when
    it began; in no particular order.

    Read by one batch direct get when at most `MULTI_LAST_LIMIT` keys match (its cost does not grow
    with the stream), else (or without direct get) by a consumer (`snapshot`); without `by_batch`
    by a consumer at once, for a listing known to be larger (the server scans every matching key
    before refusing a batch: 22 ms over 100,000 keys). Either may be
    answered by any replica of a clustered stream, and one that has just rejoined lists the keys
    as they were before it went away until it has caught up. So the last entry under each filter
    is asked of the leader (a stream message get, which only the leader answers) and a listing
    that does not reach it is read again; still behind after the bus's timeout, it raises
    `BusError` (retry). A stream of one replica has no other copy to answer from: its listing is
    read alone (the leader's floor cost one node's read a third more, 0.4 ms of 4; `replicated`).

    With `batch_only`, a listing the batch read cannot answer raises its `TooManyKeys` or
    `NoResponders` instead of being read by a consumer (a caller that streams large listings,
    `registry.wire.walk`); with `max_bytes` too, one whose values pass that many bytes raises
    `TooManyKeys`."""
    deadline = time.monotonic() + bus.timeout
    read = (
        partial(get_last_many, bus, bucket, filters, max_bytes=max_bytes)
        if batch_only
        else partial(_latest_entries, bus, bucket, filters, by_batch=by_batch)
    )
    if not await replicated(bus, bucket):  # its one server answers: no replica to be behind
        items = await read()
        return [item for item in items if include_deleted or not item.deleted]
    while True:
        floor, items = await _floor_and(bus, bucket, filters, read)
        if max((item.revision for item in items), default=0) >= floor:
            return [item for item in items if include_deleted or not item.deleted]
        if time.monotonic() > deadline:
            raise BusError(f"read {bucket.name}", f"the listing stays behind the stream's leader (at {floor}); retry")
        log.debug("listing of %s behind the stream's leader (at %d); reading it again", bucket.name, floor)


REPLICAS_TRUSTED_FOR = 5.0  # seconds a stream's replica count is taken as known
_replicas: weakref.WeakKeyDictionary[Bus, dict[str, tuple[float, int]]] = weakref.WeakKeyDictionary()


async def replicated(bus: Bus, bucket: Bucket) -> bool:
    """Whether the bucket's stream has more than one replica, from its configuration asked at
    most every `REPLICAS_TRUSTED_FOR` seconds (a stream scaled up while the seat runs is checked
    against its leader within that long). A bucket that does not exist counts as one replica."""
    now = time.monotonic()
    known = _replicas.setdefault(bus, {})
    checked = known.get(bucket.stream)
    if checked is None or now - checked[0] > REPLICAS_TRUSTED_FOR:
        config = await bucket_config(bus, bucket)
        checked = known[bucket.stream] = (now, int((config or {}).get("num_replicas", 1)))
    return checked[1] > 1


async def _floor_and(
    bus: Bus, bucket: Bucket, filters: Sequence[str], read: Callable[[], Awaitable[list[KvItem]]]
) -> tuple[int, list[KvItem]]:
    """The leader's floor and the listing, asked at once: one round trip, not two. The floor may
    then be read after the listing, and a write between them make the listing look behind: it is
    read again, as one really behind would be. A `BusError` of either is raised as itself."""
    floor: list[int | BusError] = []
    items: list[list[KvItem] | BusError] = []

    async def keep(into: list[Any], ask: Callable[[], Awaitable[Any]]) -> None:
        try:
            into.append(await ask())
        except BusError as err:
            into.append(err)

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep, floor, partial(leader_floor, bus, bucket, filters))
        tg.start_soon(keep, items, read)
    for answer in (items[0], floor[0]):  # the listing's failure first: a caller tells TooManyKeys apart
        if isinstance(answer, BusError):
            raise answer
    assert isinstance(floor[0], int) and isinstance(items[0], list)
    return floor[0], items[0]


async def _latest_entries(bus: Bus, bucket: Bucket, filters: Sequence[str], *, by_batch: bool) -> list[KvItem]:
    """Every key's latest entry (delete markers too): the batch read if the server can answer it."""
    if by_batch:
        try:
            return await get_last_many(bus, bucket, filters)
        except (TooManyKeys, NoResponders):
            pass
    return await snapshot(bus, bucket, filters, include_deleted=True)


async def leader_floor(bus: Bus, bucket: Bucket, filters: Sequence[str]) -> int:
    """The highest sequence the stream's leader holds under `filters` (0: none), its filters asked
    at once: a listing answered by a replica must reach it."""
    floors = [0] * len(filters)

    async def ask(index: int, subject_filter: str) -> None:
        floors[index] = (await _leader_last(bus, bucket, subject_filter)).sequence

    async with anyio.create_task_group() as tg:
        for index, subject_filter in enumerate(filters):
            tg.start_soon(ask, index, subject_filter)
    return max(floors, default=0)


@dataclass(frozen=True, slots=True)
class LastStamp:
    """The last message under a subject filter: its stream sequence and the time the server stored
    it, as the server wrote it (0 and "": none). The time tells two messages apart that a stream
    rolled back and written again put at the same sequence."""

    sequence: int
    stored_at: str


async def last_stamp(bus: Bus, bucket: Bucket, subject_filter: str) -> LastStamp:
    """The `LastStamp` of `subject_filter`: by one direct get, or asked of the stream's leader
    (a message get) when the stream is replicated, so that a replica behind never answers it."""
    if await replicated(bus, bucket):
        return await _leader_last(bus, bucket, subject_filter)
    operation = f"last entry of {bucket.name} {subject_filter}"
    msg = await bus.request(bucket.direct_get_subject(subject_filter), operation=operation)
    status = msg.headers.get("Status")
    if status == "404":
        return LastStamp(0, "")
    if status is not None:
        raise _status_error(operation, status, msg.headers.get("Description", ""))
    return LastStamp(int(msg.headers.get("Nats-Sequence", "0")), msg.headers.get("Nats-Time-Stamp", ""))


async def _leader_last(bus: Bus, bucket: Bucket, subject_filter: str) -> LastStamp:
    """The `LastStamp` of `subject_filter` as the stream's leader holds it (a message get, which
    only the leader answers)."""
    operation = f"last entry of {bucket.name} {subject_filter}"
    try:
        answer = await bus.jetstream(
            bucket.message_get_api, {"last_by_subj": bucket.subject(subject_filter)}, operation=operation
        )
    except NotFound:
        return LastStamp(0, "")
    return LastStamp(int(answer["message"]["seq"]), str(answer["message"].get("time", "")))


async def get_latest(bus: Bus, bucket: Bucket, key: str) -> KvItem | None:
    """The latest entry of `key`, or None when the key was never written.

    By direct get, whose subject names the key (so a node can be granted its own keys only); a
    bucket created without direct get is read through the stream's bucket-wide message get, which
    only the data account's own parties are granted."""
    try:
        return await get_direct(bus, bucket, key)
    except NoResponders:
        return await _get_without_direct(bus, bucket, key, f"get {bucket.name} {key}")


async def _get_without_direct(bus: Bus, bucket: Bucket, key: str, operation: str) -> KvItem | None:
    try:
        answer = await bus.jetstream(bucket.message_get_api, {"last_by_subj": bucket.subject(key)}, operation=operation)
    except NotFound:
        return None
    message = answer["message"]
    headers = base64.b64decode(message.get("hdrs") or b"")
    deleted = is_delete_marker(headers)
    return KvItem(key, base64.b64decode(message.get("data") or b""), int(message["seq"]), deleted)


MULTI_LAST_LIMIT = 1024  # keys a batch direct get answers at most; more is Status 413


async def get_direct(bus: Bus, bucket: Bucket, key: str) -> KvItem | None:
    """The latest entry of `key` by direct get only, or None when the key was never written.

    Unlike `get_latest` it never falls back to the stream's message get, which a node is not
    granted: `NoResponders` then means the bucket does not exist or has no direct get."""
    found = await get_stamped(bus, bucket, key)
    return found.item if found is not None else None


@dataclass(frozen=True)
class Stamped:
    """An entry and when the server stored it (its clock, not ours)."""

    item: KvItem
    stored_at: datetime


async def get_stamped(bus: Bus, bucket: Bucket, key: str) -> Stamped | None:
    """`get_direct`, with the time the server stored the entry (`Nats-Time-Stamp`)."""
    operation = f"get {bucket.name} {key}"
    msg = await bus.request(bucket.direct_get_subject(key), operation=operation)
    if msg.headers.get("Status") == "404":
        return None
    item = _direct_item(operation, msg.headers, msg.data, key)
    return Stamped(item, _server_time(msg.headers.get("Nats-Time-Stamp", "")))


def _server_time(text: str) -> datetime:
    """RFC 3339 with nanoseconds, as nats-server writes it; Python reads microseconds."""
    head, _, fraction = text.rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")
    except ValueError:
        return datetime.now(UTC)


async def get_last_many(
    bus: Bus,
    bucket: Bucket,
    filters: str | Sequence[str],
    *,
    up_to_seq: int | None = None,
    max_bytes: int | None = None,
) -> list[KvItem]:
    """The latest entry (delete markers included) of every key matching `filters` (one subject
    filter or several, relative to the bucket), by one batch direct get: no consumer, so a party
    with no JetStream API besides direct gets can read it, and its cost does not grow with the
    stream. With `up_to_seq`, the entries as they were at that stream sequence.

    At most `MULTI_LAST_LIMIT` keys, and at most `max_bytes` of values when given (the server stops
    the batch past them: a reader's connection is never sent more at once, and one that takes too
    much pending is closed by nats-server as a slow consumer): more raise `TooManyKeys`;
    `BusTimeout` when the batch does not end within the bus's timeout; `NoResponders` when the
    bucket does not exist or has no direct get."""
    subject_filters = [filters] if isinstance(filters, str) else list(filters)
    batch = _Batch(bucket, f"read {bucket.name} {' '.join(subject_filters)}")
    body: dict[str, Any] = {"multi_last": [bucket.subject(f) for f in subject_filters], "batch": MULTI_LAST_LIMIT}
    if up_to_seq is not None:
        body["up_to_seq"] = up_to_seq
    if max_bytes is not None:
        body["max_bytes"] = max_bytes
    return await _batch_get(bus, batch, body)


async def _batch_get(bus: Bus, batch: _Batch, body: Mapping[str, Any]) -> list[KvItem]:
    """One batch direct get of `body`, read into `batch`: its items."""
    inbox = bus.new_inbox()
    sub = await bus.subscribe_raw(inbox, batch.on_message)
    try:
        await bus.publish(batch.bucket.batch_get_subject, json.dumps(body).encode(), reply=inbox)
        with anyio.move_on_after(bus.timeout):
            await batch.done.wait()
    finally:
        await sub.unsubscribe()
    try:
        return batch.result()
    except NoResponders as err:  # a 503: said why, as a request nobody answers is
        raise await nobody_answers(bus, batch.operation, batch.bucket.batch_get_subject) from err


async def get_latest_paged(
    bus: Bus, bucket: Bucket, subject_filter: str, *, page: int = MULTI_LAST_LIMIT
) -> list[KvItem]:
    """The latest entry (delete markers included) of every key matching `subject_filter`, however
    many: batch direct gets paging through the stream in sequence order (`next_by_subj`), `page`
    messages each. Like `get_last_many`, no consumer (a party with no JetStream API besides direct
    gets can read it), but its cost grows with the stream: for a listing past `MULTI_LAST_LIMIT`.

    With history 1 the stream holds each key's latest message once; a key written meanwhile is met
    again at its new sequence, and the later entry is kept."""
    latest: dict[str, KvItem] = {}
    operation = f"read {bucket.name} {subject_filter}"
    start = 1
    while True:
        batch = _Batch(bucket, operation, paging=True)
        items = await _batch_get(
            bus, batch, {"next_by_subj": bucket.subject(subject_filter), "seq": start, "batch": page}
        )
        for item in items:
            known = latest.get(item.key)
            if known is None or item.revision > known.revision:
                latest[item.key] = item
        if not items or not batch.pending:
            return list(latest.values())
        start = max(item.revision for item in items) + 1


class TooManyKeys(BusError):
    """A batch direct get matched more than `MULTI_LAST_LIMIT` keys (the server's 413)."""


class _Batch:
    """The messages of one batch direct get, until its end (`Status: 204`) or another status.

    Read raw from nats-py's parser (`Bus.subscribe_raw`): a batch is up to a thousand messages of
    seven header lines each, and nats-py's own path per message (a `Msg`, its headers parsed, a
    queue, a task switch) was a third of the seat's time answering one node's 100 keys."""

    def __init__(self, bucket: Bucket, operation: str, *, paging: bool = False) -> None:
        self.bucket = bucket
        self.operation = operation
        self.paging = paging  # a page of a longer read: what is left pending is the next page's
        self.items: list[KvItem] = []
        self.failure: BusError | None = None
        self.pending = 0
        self.done = anyio.Event()

    async def on_message(self, subject: bytes, reply: bytes, data: bytes, block: bytes | None) -> None:
        if self.done.is_set():
            return
        if block is not None and block[STATUS_AT : STATUS_AT + 1] == b" ":  # `NATS/1.0 204 EOB`
            status, description = status_line(block)
            self.pending = _pending(block)
            if status not in ("204", "404"):
                self.failure = _status_error(self.operation, status, description)
            elif self.pending and not self.paging:
                self.failure = TooManyKeys(self.operation, "more than one batch read carries: its bytes ran out")
            self.done.set()
            return
        self._add(header_lines(block[HEADER_LINE_SIZE:]) if block is not None else {}, data)

    def _add(self, headers: Mapping[str, str], data: bytes) -> None:
        try:
            key = self.bucket.key_of(headers["Nats-Subject"])
            self.items.append(_direct_item(self.operation, headers, data, key))
        except (KeyError, BusError) as err:
            self.failure = err if isinstance(err, BusError) else BusError(self.operation, "an answer without its key")
            self.done.set()

    def result(self) -> list[KvItem]:
        if self.failure is not None:
            raise self.failure
        if not self.done.is_set():
            raise BusTimeout(self.operation, f"the batch did not end in time ({len(self.items)} keys read)")
        return self.items


def _pending(block: bytes) -> int:
    """How many messages a batch's end says it left unsent (its `max_bytes` or `batch` reached)."""
    pending = header_lines(block.partition(b"\r\n")[2]).get("Nats-Num-Pending", "0")
    return int(pending) if pending.isdigit() else 0


def _status_error(operation: str, status: str, description: str) -> BusError:
    if status == "503":
        return NoResponders(operation, "nobody answers: the bucket does not exist or has no direct get")
    if status == "413":
        return TooManyKeys(operation, f"too many keys: a batch read answers at most {MULTI_LAST_LIMIT}")
    return BusError(operation, f"status {status} {description}".strip())


def _direct_item(operation: str, headers: Mapping[str, str], data: bytes, key: str) -> KvItem:
    """A direct get's answer as an entry of `key`; another status than none raises `BusError`."""
    status = headers.get("Status")
    if status is not None:
        raise _status_error(operation, status, headers.get("Description", ""))
    deleted = is_delete_marker(headers)
    stored_at = _server_time(headers["Nats-Time-Stamp"]) if "Nats-Time-Stamp" in headers else None
    return KvItem(key, data, int(headers.get("Nats-Sequence", "0")), deleted, stored_at)


async def purge(bus: Bus, bucket: Bucket, subject_filter: str) -> int:
    """Removes every entry of the keys matching `subject_filter` (relative to the bucket), history
    and delete markers included, leaving no trace; how many messages went. Not sent while the
    connection is away, as a write is not (`Bus.store`): nats-py would send it once back, purging
    whatever the keys hold by then."""
    body = {"filter": bucket.subject(subject_filter)}
    answer = await bus.jetstream(bucket.purge_api, body, operation=f"purge {bucket.name} {subject_filter}", change=True)
    return int(answer.get("purged", 0))


async def update(bus: Bus, bucket: Bucket, key: str, value: bytes, *, last: int) -> int:
    """Writes `value` if `key` is still at revision `last` (0: never written); the new revision.
    Raises `WrongLastSequence` when another writer got there first."""
    headers = {_EXPECTED_LAST: str(last)}
    return await bus.store(bucket.subject(key), value, headers=headers, operation=f"write {bucket.name} {key}")


async def put(bus: Bus, bucket: Bucket, key: str, value: bytes) -> int:
    """Writes `value` whatever `key` holds; the new revision. For stand-ins and tests: the
    programs write conditionally (`update`)."""
    return await bus.store(bucket.subject(key), value, headers={}, operation=f"write {bucket.name} {key}")


async def delete(bus: Bus, bucket: Bucket, key: str, *, last: int | None, note: bytes = b"") -> int:
    """Deletes `key` (a delete marker, carrying `note` as its body) if it is still at revision `last`;
    whatever it holds with None (for a key no revision of which is valid)."""
    headers = {"KV-Operation": "DEL"} | ({} if last is None else {_EXPECTED_LAST: str(last)})
    return await bus.store(bucket.subject(key), note, headers=headers, operation=f"delete {bucket.name} {key}")


@dataclass
class Changes:
    """What a converge did, key by key."""

    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.written or self.deleted)

    def summary(self) -> str:
        return f"{len(self.written)} written, {len(self.deleted)} deleted"


async def converge(
    bus: Bus, bucket: Bucket, current: Sequence[KvItem], desired: Mapping[str, bytes], *, in_flight: int = 1
) -> Changes:
    """Makes the keys of `current` (a snapshot with deletions) hold exactly `desired`.

    Writes only where the value differs and deletes what `desired` no longer has; a failure
    raises `ConvergeError` saying what had already been done. `in_flight` writes at once (see
    `run_steps`); 1, the default, writes one at a time in order."""
    changes = Changes()
    await run_steps(bucket, converge_steps(bus, bucket, current, desired), changes, in_flight=in_flight)
    return changes


@dataclass(frozen=True)
class Step:
    """One conditional write of a converge: `run` writes it, and returns False when it found
    nothing to change after all (it is then not counted)."""

    key: str
    kind: Literal["written", "deleted"]
    run: Callable[[], Awaitable[object]]


def converge_steps(bus: Bus, bucket: Bucket, current: Sequence[KvItem], desired: Mapping[str, bytes]) -> list[Step]:
    """The writes and deletes that make `current` hold exactly `desired`, each conditional on the
    revision it was compared against."""
    latest = {item.key: item for item in current}
    steps = []
    for key, value in desired.items():
        item = latest.get(key)
        if item is None or item.deleted or item.value != value:
            last = item.revision if item else 0
            steps.append(Step(key, "written", partial(update, bus, bucket, key, value, last=last)))
    for key, item in latest.items():
        if key not in desired and not item.deleted:
            steps.append(Step(key, "deleted", partial(delete, bus, bucket, key, last=item.revision)))
    return steps


async def run_steps(bucket: Bucket, steps: Sequence[Step], changes: Changes, *, in_flight: int = 1) -> None:
    """Runs `steps`, at most `in_flight` at once, recording each in `changes` once acknowledged.

    Pipelined, a bucket's writes cost about one round trip per `in_flight` keys instead of one
    each; the order between them is then not kept (order between buckets is the caller's). The
    first failure starts no further step, waits for those in flight and raises `ConvergeError`
    naming its key and what had already been done."""
    failures: list[tuple[str, BusError]] = []
    queue = list(reversed(steps))

    async def worker() -> None:
        while queue and not failures:
            step = queue.pop()
            try:
                if await step.run() is not False:
                    getattr(changes, step.kind).append(step.key)
            except BusError as err:
                failures.append((step.key, err))

    if in_flight <= 1:
        await worker()
    else:
        async with anyio.create_task_group() as tasks:
            for _ in range(min(in_flight, len(queue))):
                tasks.start_soon(worker)
    if failures:
        key, err = failures[0]
        raise ConvergeError(bucket.name, key, err.reason, changes.summary()) from err


@dataclass(frozen=True)
class BucketConfig:
    """What the seat asks of a bucket it creates. Rollup headers are always refused (a party's own
    put with `Nats-Rollup: all` would wipe every key) and deletion of the stream is denied; the
    limits bound what one party can fill a shared bucket with."""

    history: int = 1
    replicas: int = 1
    storage: Literal["file", "memory"] = "file"
    direct: bool = True
    max_value_size: int = 64 * 1024
    max_bytes: int = 1024**3


async def stream_last_sequence(bus: Bus, bucket: Bucket) -> int:
    """The last sequence the bucket's stream holds now (0: none); it only grows, unless the stream
    went back (a server restarted from a store behind the writes it had acknowledged)."""
    try:
        info = await bus.jetstream(bucket.info_api, operation=f"look up bucket {bucket.name}")
    except NotFound:
        return 0
    return int(info.get("state", {}).get("last_seq", 0))


async def bucket_config(bus: Bus, bucket: Bucket) -> dict[str, Any] | None:
    """The stream configuration of `bucket`, or None when it does not exist."""
    try:
        info = await bus.jetstream(bucket.info_api, operation=f"look up bucket {bucket.name}")
    except NotFound:
        return None
    config: dict[str, Any] = info["config"]
    return config


async def create_bucket(bus: Bus, bucket: Bucket, config: BucketConfig, *, live: bool = False) -> None:
    """Creates `bucket` as nats-py's `create_key_value` would, but refusing rollups, with the
    limits of `config`, and, when some party follows it `live`, republishing its writes
    (`republish_of`); the same config again succeeds."""
    stream = {
        "name": bucket.stream,
        "subjects": [bucket.subject(">")],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": config.max_bytes,
        "max_age": 0,
        "max_msgs_per_subject": config.history,
        "max_msg_size": config.max_value_size,
        "storage": config.storage,
        "discard": "new",
        "num_replicas": config.replicas,
        "duplicate_window": 120_000_000_000,
        "allow_direct": config.direct,
        "allow_rollup_hdrs": False,
        "allow_msg_ttl": True,
        "deny_delete": True,
        **({"republish": republish_of(bucket)} if live else {}),
    }
    await bus.jetstream(bucket.create_api, stream, operation=f"create bucket {bucket.name}")


def republish_of(bucket: Bucket) -> dict[str, str]:
    """What a bucket's stream republishes: each write it stores, headers and value, under
    `$KVR.<bucket>.<key>`, where the parties' live updates are imported from. A put that reached
    the data account through a service import (a node's, a provider's, a writer's) is passed on to
    no stream import of its own subject; republished by the stream, it is, whoever wrote it.
    Republishing costs nats-server a message per write: a bucket nobody follows live has none."""
    return {"src": bucket.subject(">"), "dest": bucket.live_subject(">")}


async def converge_republish(bus: Bus, bucket: Bucket, existing: Mapping[str, Any], *, live: bool) -> bool:
    """Makes the stream of an existing bucket (`existing`, its configuration) republish its writes
    when some party follows it `live`, and republish nothing when none does, as `create_bucket`
    makes it; False, and nothing sent, when it already does."""
    wanted = republish_of(bucket) if live else None
    if _republished(existing) == wanted:
        return False
    config = {name: value for name, value in existing.items() if name != "republish"}
    if wanted is not None:
        config["republish"] = wanted
    operation = f"{'republish' if live else 'stop republishing'} the writes of bucket {bucket.name}"
    await bus.jetstream(bucket.update_api, config, operation=operation)
    return True


def _republished(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a stream's configuration republishes, as `republish_of` says it (None: nothing)."""
    current = config.get("republish")
    if not current:
        return None
    found = {"src": current.get("src"), "dest": current.get("dest")}
    return {**found, "headers_only": True} if current.get("headers_only") else found
