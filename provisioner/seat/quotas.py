"""Each node's footprint in the buckets nodes write, bounded: a node over its quota, or holding the
most of a bucket that nears full, is cut back.

The needs, applied, collect and fleet buckets are shared by every node and refuse writes once full
(`discard: new`): without a bound per node, one node writing as fast as its grants let it would
fill a bucket in seconds and make every other party's write fail (in the fleet: the seat's and the
operators' holds, every other node's claims, and so every rollout). A node's keys are `<node>.>`,
in the fleet its claims `claim.*.<node>`; a hold or a gone mark is no node's. NATS has no limit per
subject prefix, so the seat keeps one.

A write costs what the stream stores for it (`registry.wire.feed.stored_size`): its subject, its
headers, its value and the store's framing. A header the node adds is counted as its value is: a
put of `{}` carrying 60 KiB of headers costs 60 KiB. (The stream bounds one put's headers and value
together by the bucket's largest value, the account one message by its payload limit; NATS has no
way to strip a header at an import.)

    watch     each bucket's writes, headers only (no values): each node's keys and bytes since it
              was last counted, an upper bound (an overwrite or a delete is not subtracted: the old
              size is not known)
    count     when that bound passes the node's quota, the node's keys there are counted exactly
              (a headers-only read of `<node>.>`, delete markers included: the bucket keeps them),
              as they stood when the count began: a node writing faster than the seat reads would
              otherwise keep its count going while the bucket filled
    cut back  when the count is over the quota, every key of the node in that bucket is purged
              (up to the last revision counted), and the node is over quota: `what=nodes` says so
              and why for `SHOWN_FOR`, the seat logs it once per episode; a record of the purge in
              the leases bucket lets each site's seat purge its mirror alike
              (`provisioner.seat.site_purges`)

Quotas alone over-commit a bucket: many nodes, each inside its own, can fill it together. So the
nodes together may hold the bucket's `max_bytes` less a reserve (`nodes_share`: a quarter is the
seat's own writes' and the room the guard needs to catch up with writers): when the bounds of a
bucket's nodes together pass that share and the stream holds more, the node with the largest bound
is counted and, if it holds more than an equal share (the nodes' share over the nodes that wrote
there), cut back as if over its quota; then the next. A node holding less than its equal share is
never cut back for the bucket's sake, whatever the others write: the largest is cut first. A node's
quota is at most the nodes' share (`ServerSettings`).

A node writing without end is purged again each time it passes its quota, so its footprint stays
within its quota and what it writes while the seat counts: the bucket never fills. Its honest
client, cut back, registers again at its next reconcile. The leases bucket needs no watch: a node
is granted its one key there (`node.<node>`), bounded by the bucket's largest value.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from provisioner.seat.site_purges import purge_upto, record_purge
from registry.command_line import timestamp
from registry.contract import Bucket, buckets, decode_token, fleet, node_token
from registry.errors import BusError, RegistryError
from registry.wire import Bus, KvItem, scoped_watch, snapshot

log = logging.getLogger(__name__)

GUARDED = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT, fleet.FLEET)
SHOWN_FOR = timedelta(hours=1)  # how long a node cut back is shown over quota
COUNTS_WAITING = 256  # nodes waiting to be counted; more wait for the next write that passes the bound
DURING_KEPT = 100_000  # writes of one node kept aside with their revisions while it is counted
RESERVE = 4  # a bucket's 1/RESERVE is kept from the nodes (`nodes_share`)


def nodes_share(bucket_bytes: int) -> int:
    """What the nodes may hold together in a bucket of `bucket_bytes`: all but the seat's reserve."""
    return bucket_bytes - bucket_bytes // RESERVE


@dataclass(frozen=True)
class Quota:
    """What one node may hold in one bucket."""

    keys: int
    bytes: int


@dataclass(frozen=True)
class Footprint:
    keys: int
    bytes: int

    def over(self, quota: Quota) -> bool:
        return self.keys > quota.keys or self.bytes > quota.bytes


@dataclass(frozen=True)
class CutBack:
    """A node found over its quota in a bucket, or holding the most of a bucket past the nodes'
    share (`share`: that share), and cut back: what it held, when."""

    bucket: str
    held: Footprint
    quota: Quota
    at: datetime
    times: int = 1
    share: int | None = None

    def reason(self) -> str:
        when = timestamp(self.at)
        again = f" ({self.times} times)" if self.times > 1 else ""
        held = f"held {self.held.keys:,} keys, {_size(self.held.bytes)} in {self.bucket} at {when}"
        if self.share is None:
            beyond = f"more than its {self.quota.keys:,} keys, {_size(self.quota.bytes)}"
        else:
            beyond = f"the most of any node while the nodes held more than their {_size(self.share)} of the bucket"
        return f"over quota: {held}, {beyond}; the seat removed them{again}"


class Bound:
    """An upper bound of what one node holds in one bucket, from the writes seen since it was last
    counted. The watch may lag the bucket: a write at or below the revision last counted is already
    in that count (or purged with it) and is not added again. A write seen while the node is counted
    is kept aside with its revision; after the count only those above the revision counted are
    added, since they are still in the bucket whether or not the rest was purged."""

    def __init__(self) -> None:
        self.keys = 0
        self.bytes = 0
        self.upto = 0  # the last count's revision
        self.counting = False
        self._before = (0, 0)  # the bound when counting began, kept if the count fails
        self._during: list[tuple[int, int]] = []  # (revision, size) seen while counting
        self._during_bytes = 0

    def footprint(self) -> Footprint:
        return Footprint(self.keys, self.bytes)

    def weight(self) -> int:
        """Bytes the node may hold at most, counting or not."""
        return self.bytes + (self._before[1] + self._during_bytes if self.counting else 0)

    def add(self, revision: int, size: int) -> None:
        if revision <= self.upto:
            return
        if self.counting and len(self._during) < DURING_KEPT:
            self._during.append((revision, size))
            self._during_bytes += size
            return
        self.keys += 1  # past DURING_KEPT, a write seen while counting is taken to survive it: high, never low
        self.bytes += size

    def start_counting(self) -> None:
        self._before = (self.keys, self.bytes)
        self.keys = self.bytes = 0
        self.counting = True

    def counted(self, upto: int, left: Footprint) -> None:
        """The count's result: `left` is what remains of the node's writes up to revision `upto`."""
        after = [size for revision, size in self._during if revision > upto]
        self._end(left.keys + len(after), left.bytes + sum(after))
        self.upto = max(self.upto, upto)

    def give_up(self) -> None:
        """The count failed: what was seen before it and while it ran stays in the bound."""
        self._end(self._before[0] + len(self._during), self._before[1] + self._during_bytes)

    def _end(self, keys: int, size: int) -> None:
        self.keys += keys
        self.bytes += size
        self._during, self._during_bytes = [], 0
        self.counting = False


class Load:
    """The bounds of the nodes that wrote one bucket, and their running total. `share` is what
    they may hold together (`nodes_share`), None for a bucket with no `max_bytes`."""

    def __init__(self, share: int | None = None) -> None:
        self.share = share
        self.bounds: dict[str, Bound] = {}  # by node token
        self.total = 0
        self.relieving = False  # a node of this bucket is queued or counted for the bucket's sake
        self.written = 0  # bytes of every write seen
        self._quiet_until = 0  # `written` before which the bounds alone do not call for relief

    def calm(self) -> None:
        """The stream was found under the share although the bounds (high, never low) passed it:
        relief waits for a 64th of the share more of writes (or the stream could cross it unseen)."""
        self._quiet_until = self.written + (self.share or 0) // 64

    def bound(self, token: str) -> Bound:
        return self.bounds.setdefault(token, Bound())

    def change(self, token: str, change: Callable[[Bound], None]) -> Bound:
        """Applies `change` to the node's bound, keeping the total."""
        bound = self.bound(token)
        before = bound.weight()
        change(bound)
        moved = bound.weight() - before
        self.total += moved
        self.written += max(moved, 0)
        return bound

    def pressed(self) -> bool:
        return self.share is not None and self.total > self.share and self.written >= self._quiet_until

    def equal_share(self) -> int:
        """Each writer's part of the nodes' share: a node holding no more is never cut for the bucket."""
        return (self.share or 0) // max(len(self.bounds), 1)

    def largest(self) -> str | None:
        """The token of the node with the largest bound not being counted."""
        waiting = [(bound.weight(), token) for token, bound in self.bounds.items() if not bound.counting]
        return max(waiting)[1] if waiting else None


class QuotaGuard:
    """Watches the guarded buckets and cuts back a node over its quota, or the largest of a bucket
    past the nodes' share (see the module)."""

    def __init__(
        self,
        quota: Quota,
        *,
        guarded: Iterable[Bucket] = GUARDED,
        shown_for: timedelta = SHOWN_FOR,
        clock: Callable[[], float] = time.time,
        on_purged: Callable[[Bucket, str, int], None] = lambda bucket, token, upto: None,
    ) -> None:
        self.quota = quota
        self.on_purged = on_purged  # told the bucket, node token and last revision of each purge
        self.guarded = tuple(guarded)
        self.shown_for = shown_for
        self._clock = clock
        self._loads: dict[str, Load] = {}  # by bucket name
        self._cut: dict[str, CutBack] = {}  # by node name
        self._to_count: MemoryObjectSendStream[tuple[Bucket, str]] | None = None
        self._name = f"seat-quota-{uuid.uuid4().hex[:12]}"

    def over_quota(self, node: str) -> str | None:
        """Why `node` is shown over quota, if it was cut back within `shown_for`."""
        cut = self._cut.get(node)
        if cut is None or self._clock() - cut.at.timestamp() > self.shown_for.total_seconds():
            return None
        return cut.reason()

    def cut_back(self) -> dict[str, str]:
        """Every node shown over quota now, with why."""
        return {node: reason for node in list(self._cut) if (reason := self.over_quota(node)) is not None}

    async def guard(
        self,
        bus: Bus,
        *,
        watching: Callable[[Bucket], AbstractAsyncContextManager[Bus]] | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Watches every guarded bucket and counts what passes the bound, until cancelled; each
        bucket's watch on a connection of its own from `watching`, if given, else on `bus`. A
        watch's consumer may have 32 MiB on the way to the seat, and nats-server closes a connection
        holding more than 64 MiB as a slow consumer: three buckets filled by headers at once, watched
        on one connection, had it closed 4 times in a minute."""
        send, receive = anyio.create_memory_object_stream[tuple[Bucket, str]](COUNTS_WAITING)
        async with send, receive, anyio.create_task_group() as tasks:
            self._to_count = send
            for bucket in self.guarded:
                await self.learn_size(bus, bucket)
                tasks.start_soon(self._watch_on, watching, bus, bucket)
            tasks.start_soon(self._count_each, bus, receive)
            task_status.started()

    async def learn_size(self, bus: Bus, bucket: Bucket) -> None:
        """Reads the bucket's `max_bytes`, whence the nodes' share of it."""
        config = (await bus.jetstream(bucket.info_api, operation=f"read the size of {bucket.name}"))["config"]
        most = int(config.get("max_bytes", -1))
        self._load(bucket).share = nodes_share(most) if most > 0 else None

    def _load(self, bucket: Bucket) -> Load:
        return self._loads.setdefault(bucket.name, Load())

    async def _watch_on(
        self, watching: Callable[[Bucket], AbstractAsyncContextManager[Bus]] | None, bus: Bus, bucket: Bucket
    ) -> None:
        if watching is None:
            await self._watch(bus, bucket)
            return
        async with watching(bucket) as own:
            await self._watch(own, bucket)

    async def _watch(self, bus: Bus, bucket: Bucket) -> None:
        name = f"{self._name}-{bucket.name}"
        note = partial(self.note, bucket)
        async with scoped_watch(bus, bucket, ">", name=name, headers_only=True, on_item=note):
            await anyio.sleep_forever()

    def note(self, bucket: Bucket, item: KvItem) -> None:
        """Adds a write's cost (what the stream stores for it) to its node's bound; queues a count
        when the bound passes the quota, or the nodes' share of the bucket is passed. A delete
        counts as a key: the bucket keeps its marker, so put-and-delete under new names without end
        would otherwise fill it while the node's live keys stay few."""
        token = owner_of(bucket, item.key)
        if token is None:
            return
        load = self._load(bucket)
        bound = load.change(token, lambda bound: bound.add(item.revision, max(item.stored, 0)))
        self._count_if_over(bucket, token, bound)
        self._relieve_if_pressed(bucket)

    def _count_if_over(self, bucket: Bucket, token: str, bound: Bound) -> None:
        if bound.counting or not bound.footprint().over(self.quota):
            return
        self._queue_count(bucket, token)

    def _relieve_if_pressed(self, bucket: Bucket) -> None:
        load = self._load(bucket)
        if load.relieving or not load.pressed():
            return
        token = load.largest()
        if token is not None and self._queue_count(bucket, token):
            load.relieving = True

    def _queue_count(self, bucket: Bucket, token: str) -> bool:
        if self._to_count is None:
            return False
        try:
            self._to_count.send_nowait((bucket, token))
        except anyio.WouldBlock:
            return False  # counted at its next write once the queue has room
        self._load(bucket).change(token, Bound.start_counting)
        return True

    async def _count_each(self, bus: Bus, queued: MemoryObjectReceiveStream[tuple[Bucket, str]]) -> None:
        async for bucket, token in queued:
            load = self._load(bucket)
            try:
                await self.count(bus, bucket, token)
            except BusError as err:
                load.change(token, Bound.give_up)
                log.warning(
                    "counting node %s in %s failed (%s); counted again at its next write",
                    token,
                    bucket.name,
                    err.reason,
                )
            else:
                self._count_if_over(bucket, token, load.bound(token))  # what it wrote while it was counted
            load.relieving = False
            self._relieve_if_pressed(bucket)

    async def count(self, bus: Bus, bucket: Bucket, token: str) -> Footprint:
        """Counts the node's keys in `bucket` and cuts it back if it is over its quota, or holds
        more than its equal share of a bucket past the nodes' share; what it held."""
        load = self._load(bucket)
        if not load.bound(token).counting:
            load.change(token, Bound.start_counting)
        items = await snapshot(
            bus, bucket, [owned_by(bucket, token)], include_deleted=True, headers_only=True, as_it_began=True
        )
        held = Footprint(len(items), sum(max(item.stored, 0) for item in items))
        upto = max((item.revision for item in items), default=0)
        share = None if held.over(self.quota) else await self._share_passed(bus, bucket, held)
        if share is None and not held.over(self.quota):
            load.change(token, lambda bound: bound.counted(upto, held))
            return held
        purged = await purge_upto(bus, bucket, owned_by(bucket, token), upto)
        await record_purge(bus, bucket, token, upto)  # for the sites' mirrors (provisioner.seat.site_purges)
        self.on_purged(bucket, token, upto)
        load.change(token, lambda bound: bound.counted(upto, Footprint(0, 0)))
        self._remember(_name_of(token), bucket, held, purged, share)
        return held

    async def _share_passed(self, bus: Bus, bucket: Bucket, held: Footprint) -> int | None:
        """The nodes' share of `bucket` if the stream holds more and `held` is more than an equal
        part of it (the node is cut back for the bucket's sake), else None."""
        load = self._load(bucket)
        if load.share is None or not load.pressed() or held.bytes <= load.equal_share():
            return None
        state = (await bus.jetstream(bucket.info_api, operation=f"read the size of {bucket.name}"))["state"]
        if int(state.get("bytes", 0)) > load.share:
            return load.share
        load.calm()
        return None

    def _remember(self, node: str, bucket: Bucket, held: Footprint, purged: int, share: int | None = None) -> None:
        before = self.over_quota(node) is not None
        times = self._cut[node].times + 1 if before else 1
        at = datetime.fromtimestamp(self._clock(), UTC)
        cut = CutBack(bucket.name, held, self.quota, at, times, share)
        self._cut[node] = cut
        if before:
            log.debug("node %s cut back again in %s: %d messages purged", node, bucket.name, purged)
        else:
            log.warning("node %s %s (%d messages purged)", node, cut.reason(), purged, extra={"node": node})


def owner_of(bucket: Bucket, key: str) -> str | None:
    """The token of the node that wrote `key` of `bucket`: its first (`<node>.>`), or in the fleet
    the last of a claim (`claim.<module>.<node>`); None for a key no node writes."""
    if bucket == fleet.FLEET:
        return fleet.claim_owner(key)
    return node_token(key)


def owned_by(bucket: Bucket, token: str) -> str:
    """The filter of the keys of `bucket` the node of key token `token` writes."""
    return fleet.claims_by_token(token) if bucket == fleet.FLEET else f"{token}.>"


def _name_of(token: str) -> str:
    try:
        return decode_token(token)
    except RegistryError:
        return token


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
