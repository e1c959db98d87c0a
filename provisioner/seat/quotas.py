"""Each node's footprint in the buckets nodes write, bounded: a node over its quota is cut back.

The needs, applied, collect and fleet buckets are shared by every node and refuse writes once full
(`discard: new`): without a bound per node, one node writing as fast as its grants let it would
fill a bucket in seconds and make every other party's write fail (in the fleet: the seat's and the
operators' holds, every other node's claims, and so every rollout). A node's keys are `<node>.>`,
in the fleet its claims `claim.*.<node>`; a hold or a gone mark is no node's. NATS has no limit per subject
prefix, so the seat keeps one:

    watch     each bucket's writes, headers only (`Nats-Msg-Size`, no values): each node's keys
              and bytes since it was last counted, an upper bound (an overwrite or a delete is
              not subtracted: the old size is not known)
    count     when that bound passes the node's quota, the node's keys there are counted exactly
              (a headers-only read of `<node>.>`, delete markers included: the bucket keeps them)
    cut back  when the count is over the quota, every key of the node in that bucket is purged
              (up to the last revision counted), and the node is over quota: `what=nodes` says so
              and why for `SHOWN_FOR`, the seat logs it once per episode; a record of the purge in
              the leases bucket lets each site's seat purge its mirror alike
              (`provisioner.seat.site_purges`)

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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from provisioner.seat.site_purges import purge_upto, record_purge
from registry.contract import Bucket, buckets, decode_token, fleet, node_token
from registry.errors import BusError, RegistryError
from registry.wire import Bus, KvItem, scoped_watch, snapshot

log = logging.getLogger(__name__)

GUARDED = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT, fleet.FLEET)
SHOWN_FOR = timedelta(hours=1)  # how long a node cut back is shown over quota
COUNTS_WAITING = 256  # nodes waiting to be counted; more wait for the next write that passes the bound
DURING_KEPT = 100_000  # writes of one node kept aside with their revisions while it is counted


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
    """A node found over its quota in a bucket, and cut back: what it held, when."""

    bucket: str
    held: Footprint
    quota: Quota
    at: datetime
    times: int = 1

    def reason(self) -> str:
        when = self.at.astimezone(UTC).strftime("%H:%M:%S UTC")
        again = f" ({self.times} times)" if self.times > 1 else ""
        return (
            f"over quota: held {self.held.keys:,} keys, {_size(self.held.bytes)} in {self.bucket} at {when}, "
            f"more than its {self.quota.keys:,} keys, {_size(self.quota.bytes)}; "
            f"the seat removed them{again}"
        )


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

    def footprint(self) -> Footprint:
        return Footprint(self.keys, self.bytes)

    def add(self, revision: int, size: int) -> None:
        if revision <= self.upto:
            return
        if self.counting and len(self._during) < DURING_KEPT:
            self._during.append((revision, size))
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
        during = self._during
        self._end(self._before[0] + len(during), self._before[1] + sum(size for _, size in during))

    def _end(self, keys: int, size: int) -> None:
        self.keys += keys
        self.bytes += size
        self._during = []
        self.counting = False


class QuotaGuard:
    """Watches the guarded buckets and cuts back a node over its quota (see the module)."""

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
        self._bounds: dict[tuple[str, str], Bound] = {}  # by (bucket, node token)
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

    async def guard(self, bus: Bus, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watches every guarded bucket and counts what passes the bound, until cancelled."""
        send, receive = anyio.create_memory_object_stream[tuple[Bucket, str]](COUNTS_WAITING)
        async with send, receive, anyio.create_task_group() as tasks:
            self._to_count = send
            for bucket in self.guarded:
                tasks.start_soon(self._watch, bus, bucket)
            tasks.start_soon(self._count_each, bus, receive)
            task_status.started()

    async def _watch(self, bus: Bus, bucket: Bucket) -> None:
        name = f"{self._name}-{bucket.name}"
        note = partial(self.note, bucket)
        async with scoped_watch(bus, bucket, ">", name=name, headers_only=True, on_item=note):
            await anyio.sleep_forever()

    def note(self, bucket: Bucket, item: KvItem) -> None:
        """Adds a write to its node's bound; queues a count when the bound passes the quota. A
        delete counts as a key: the bucket keeps its marker, so put-and-delete under new names
        without end would otherwise fill it while the node's live keys stay few."""
        token = owner_of(bucket, item.key)
        if token is None:
            return
        bound = self._bounds.setdefault((bucket.name, token), Bound())
        bound.add(item.revision, max(item.size, 0))
        self._count_if_over(bucket, token, bound)

    def _count_if_over(self, bucket: Bucket, token: str, bound: Bound) -> None:
        if bound.counting or not bound.footprint().over(self.quota) or self._to_count is None:
            return
        try:
            self._to_count.send_nowait((bucket, token))
        except anyio.WouldBlock:
            return  # counted at its next write once the queue has room
        bound.start_counting()

    async def _count_each(self, bus: Bus, queued: MemoryObjectReceiveStream[tuple[Bucket, str]]) -> None:
        async for bucket, token in queued:
            bound = self._bounds.setdefault((bucket.name, token), Bound())
            try:
                await self.count(bus, bucket, token)
            except BusError as err:
                bound.give_up()
                log.warning(
                    "counting node %s in %s failed (%s); counted again at its next write",
                    token,
                    bucket.name,
                    err.reason,
                )
            else:
                self._count_if_over(bucket, token, bound)  # what it wrote while it was counted

    async def count(self, bus: Bus, bucket: Bucket, token: str) -> Footprint:
        """Counts the node's keys in `bucket` and cuts it back if it is over its quota; what it held."""
        bound = self._bounds.setdefault((bucket.name, token), Bound())
        if not bound.counting:
            bound.start_counting()
        items = await snapshot(bus, bucket, [owned_by(bucket, token)], include_deleted=True, headers_only=True)
        held = Footprint(len(items), sum(max(item.size, 0) for item in items))
        upto = max((item.revision for item in items), default=0)
        if not held.over(self.quota):
            bound.counted(upto, held)
            return held
        purged = await purge_upto(bus, bucket, owned_by(bucket, token), upto)
        await record_purge(bus, bucket, token, upto)  # for the sites' mirrors (provisioner.seat.site_purges)
        self.on_purged(bucket, token, upto)
        bound.counted(upto, Footprint(0, 0))
        self._remember(_name_of(token), bucket, held, purged)
        return held

    def _remember(self, node: str, bucket: Bucket, held: Footprint, purged: int) -> None:
        before = self.over_quota(node) is not None
        times = self._cut[node].times + 1 if before else 1
        cut = CutBack(bucket.name, held, self.quota, datetime.fromtimestamp(self._clock(), UTC), times)
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
