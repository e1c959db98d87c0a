"""`what=nodes`: each node's sign of life and applied counts, and a verdict saying how it is known.

A node's sign of life is its client's lease (`registry.wire.lease`, key `node.<node>` of the leases
bucket): renewed every third of its ttl while a client watches, deleted when a one-shot
reconcile or a stopped client releases it. The server stamps every write, delete markers
included (`Nats-Time-Stamp`), so the last renewal or release is known without the node writing
anything to needs, applied or collect. Verdicts, against `stale_after` (the request's, else
`DEFAULT_STALE_AFTER`) and the seat's clock:

    healthy   renewed within stale_after and within its ttl (+ registry.wire.lease.SKEW), or
              released within stale_after
    stale     a held lease not renewed for longer than either, or released longer ago
    gone      no lease record at all: its client never ran, or the record was purged
    over-quota  cut back by the seat for holding more than its quota in a bucket
              (`provisioner.seat.quotas`), within the last hour; said before how its lease stands

A node the seat marked gone for collections (`gone.<node>` in the fleet bucket,
`provisioner.seat.gone_marks`: every other node's collections leave its contributions out) has
its verdict's `because` end in `; forgotten by collections since <when>`, whatever its verdict,
until the mark is deleted; a node known by its mark alone is listed too.

A node removed by `mesh-provisioner remove-node` is not listed: its lease's delete marker says
`removed` (`REMOVED_LEASE`), and its applied records are deleted.

The applied counts and the latest change (the records' `changed_at`, else when the server stored
them) come from the applied bucket. The seat keeps both buckets and the fleet's gone marks in a
`FleetView` (three watches; the marks' does not hold the view's readiness back: a fleet bucket
missing or late leaves the verdicts without them), so an answer reads no bucket; until its first
fill is complete, or without a view, `read_fleet` lists them (a node asking about itself reads one
lease key, its own applied keys and its own mark).
"""

from __future__ import annotations

import bisect
import json
import logging
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus
from pydantic import ValidationError

from provisioner.errors import Unavailable
from provisioner.settings import DEFAULT_STALE_AFTER
from provisioner.verb.cursors import Continuation, CursorSeal, party_of
from provisioner.verb.pages import CursorOf, Encoded, build_pages
from provisioner.verb.paging import PageCache
from provisioner.verb.request import Asked, Query
from registry.contract import (
    PENDING_CAUSES,
    Bucket,
    HeldLease,
    JsonRefused,
    MalformedKey,
    NodeRow,
    NoLease,
    ReleasedLease,
    Verdict,
    buckets,
    encode_token,
    pending_causes,
    read_json,
    subject_matches,
)
from registry.contract import fleet as fleet_bucket
from registry.errors import BusError, ConnectionClosed, KeyShapeError, NotFound, sole_exception
from registry.wire import SKEW, Bus, Holder, KvItem, ScopedWatch, current_snapshot, get_last_many, scoped_watch

log = logging.getLogger(__name__)

NODE_ROLE = "node"
# The body of the delete marker `remove-node` leaves on a removed node's lease
# (`provisioner.commands.removal`): not released but gone from the fleet, so no longer listed.
REMOVED_LEASE = b'{"removed":"node"}'
GONE_MARKS = f"{fleet_bucket.GONE}.>"  # the fleet bucket's keys this view follows
ROWS_A_STEP = 200  # rows of `what=nodes` made between two checkpoints of the event loop


@dataclass(frozen=True, slots=True)
class LeaseSeen:
    """The latest record of a node's lease: its holder while held (None if unreadable), when
    the server stored it, and whether it is a release (a delete marker)."""

    revision: int
    stored_at: datetime
    released: bool
    holder: Holder | None = None


# An applied record as the view keeps it: (revision, pending, changed_at, causes). A plain tuple of
# atoms, which the garbage collector stops tracking: 100,000 slotted objects (1,000 nodes x 100
# modules) added 10 to 25 ms to each of the seat's full collections, run with its event loop
# blocked. `causes`: a pending record's classes of reasons (`registry.contract.pending_causes`)
# joined by "+", one interned string per combination; "" when applied.
ModuleSeen = tuple[int, bool, datetime | None, str]


@dataclass(frozen=True, slots=True)
class Tally:
    applied: int
    pending: int
    changed_at: datetime | None


@dataclass(frozen=True)
class NodeReport:
    node: str
    verdict: Verdict
    because: str
    lease: LeaseSeen | None
    tally: Tally

    def forgotten_since(self, since: datetime | None) -> NodeReport:
        """The report saying the node is forgotten by collections since `since` (None: it is not)."""
        if since is None:
            return self
        return replace(self, because=f"{self.because}; forgotten by collections since {_iso(since)}")

    def row(self) -> NodeRow:
        """The report as the contract's entry of `what=nodes`."""
        changed = self.tally.changed_at
        return NodeRow(
            node=self.node,
            verdict=self.verdict,
            because=self.because,
            lease=_lease_row(self.lease),
            applied=self.tally.applied,
            pending=self.tally.pending,
            changed_at=_iso(changed) if changed is not None else None,
        )


class Fleet:
    """Every node's latest lease record and applied records, as the two buckets hold them."""

    def __init__(self, over_quota: Callable[[], Mapping[str, str]] = dict) -> None:
        self.over_quota = over_quota  # the nodes cut back, with why (`provisioner.seat.quotas`)
        self.leases: dict[str, LeaseSeen] = {}
        self.modules: dict[str, dict[str, ModuleSeen]] = {}
        self.pending_by_cause: dict[str, int] = dict.fromkeys(PENDING_CAUSES, 0)  # as a node's textfile counts
        self.malformed = MalformedKeys()
        self.forgotten: dict[str, datetime] = {}  # nodes marked gone for collections: marked since
        self._tallies: dict[str, Tally] = {}
        self._purged_upto: dict[str, int] = {}  # node token: the applied revision its latest purge reached
        self._rows: dict[str, tuple[object, bytes]] = {}  # by node: what its row was made of, the row

    def apply_lease(self, item: KvItem) -> None:
        try:
            parts = buckets.LEASES.shape.parse(item.key)
        except KeyShapeError as err:
            self._set_malformed(buckets.LEASES, item, err.reason)
            return
        if parts["role"] != NODE_ROLE:
            return
        node = parts["name"]
        known = self.leases.get(node)
        if known is not None and item.revision < known.revision:
            return
        if item.deleted and item.value == REMOVED_LEASE:
            self.leases.pop(node, None)
        else:
            self.leases[node] = _lease_seen(item)

    def apply_gone(self, item: KvItem) -> None:
        """A gone mark of the fleet bucket (any other key of it is no concern of this view)."""
        try:
            parsed = fleet_bucket.parse_fleet_key(item.key)
        except KeyShapeError:
            return
        if parsed.kind != fleet_bucket.GONE or parsed.node is None:
            return
        mark = None if item.deleted else _gone_mark(item.value)
        if mark is None:
            self.forgotten.pop(parsed.node, None)
        else:
            self.forgotten[parsed.node] = mark.since

    def apply_applied(self, item: KvItem) -> None:
        if item.revision <= self._purged_upto.get(_token_of(buckets.APPLIED, item.key), 0):
            return  # purged before the watch brought it: no marker would ever take it away again
        try:
            parts = buckets.APPLIED.shape.parse(item.key)
        except KeyShapeError as err:
            self._set_malformed(buckets.APPLIED, item, err.reason)
            return
        node, module = parts["node"], parts["module"]
        self._tallies.pop(node, None)
        self.malformed.drop(buckets.APPLIED, item.key)
        modules = self.modules.setdefault(node, {})
        self._count_causes(modules.pop(module, None), -1)
        if item.deleted:
            if not modules:
                del self.modules[node]
            return
        try:
            seen = _module_seen(item)
        except ValueError as err:
            self.malformed.set(buckets.APPLIED, item.key, str(err))
            return
        modules[module] = seen
        self._count_causes(seen, +1)

    def _count_causes(self, seen: ModuleSeen | None, step: int) -> None:
        if seen is not None and seen[3]:
            for cause in seen[3].split("+"):
                self.pending_by_cause[cause] += step

    def forget_bucket(self, bucket: Bucket) -> None:
        """Forgets all the view held of `bucket`: its stream went back, and it is read again."""
        if bucket.name == buckets.LEASES.name:
            self.leases.clear()
        elif bucket.name == buckets.APPLIED.name:
            self.modules.clear()
            self.pending_by_cause = dict.fromkeys(PENDING_CAUSES, 0)
            self._tallies.clear()
            self._purged_upto.clear()
        else:
            self.forgotten.clear()
        self.malformed.drop_bucket(bucket)
        self._rows.clear()

    def forget_purged(self, bucket: Bucket, token: str, upto: int) -> None:
        """Forgets what the view held of a node's keys in `bucket` up to revision `upto` once they
        were purged (`provisioner.seat.quotas`): a purge leaves no delete marker, so the watch never
        sees them go, and one it brings later (it may run behind the guard) is ignored. A module
        written after `upto` stays; its keys out of shape go, as they carry no revision here."""
        if bucket.name != buckets.APPLIED.name:
            return
        self._purged_upto[token] = max(upto, self._purged_upto.get(token, 0))
        for node in [node for node in self.modules if encode_token(node) == token]:
            modules = self.modules[node]
            for module in [module for module, seen in modules.items() if seen[0] <= upto]:
                self._count_causes(modules.pop(module), -1)
            if not modules:
                del self.modules[node]
            self._tallies.pop(node, None)
        self.malformed.drop_under(bucket, token)

    def _set_malformed(self, bucket: Bucket, item: KvItem, reason: str) -> None:
        if item.deleted:
            self.malformed.drop(bucket, item.key)
        else:
            self.malformed.set(bucket, item.key, reason)

    def tally(self, node: str) -> Tally:
        found = self._tallies.get(node)
        if found is None:
            found = self._tallies[node] = _tally(self.modules.get(node, {}).values())
        return found

    def reports(self, node: str | None, *, now: datetime, stale_after: timedelta) -> list[NodeReport]:
        """One report per node known to either bucket (only `node` when given), by name."""
        over = self.over_quota()
        return [
            _report(
                name, self.leases.get(name), self.tally(name), now=now, stale_after=stale_after, over_quota=why
            ).forgotten_since(self.forgotten.get(name))
            for name, why in self._known(node, over)
        ]

    def rows(self, node: str | None, *, now: datetime, stale_after: timedelta) -> Iterator[tuple[str, bytes]]:
        """Each report of `reports` as its row's JSON, by node. A row is encoded again only when
        what it says changed: the whole fleet is answered to every operator's `what=nodes`, and
        encoding 1,000 rows each time held the seat's event loop for tens of milliseconds."""
        over = self.over_quota()
        for name, why in self._known(node, over):
            lease, tally = self.leases.get(name), self.tally(name)
            verdict, because = judge(lease, now=now, stale_after=stale_after)
            marked = self.forgotten.get(name)
            made_of = (lease, tally, verdict, because, why, marked)
            kept = self._rows.get(name)
            if kept is not None and kept[0] == made_of:
                yield name, kept[1]
                continue
            report = _report(name, lease, tally, now=now, stale_after=stale_after, over_quota=why)
            row = _compact(report.forgotten_since(marked).row())
            self._rows[name] = (made_of, row)
            yield name, row

    def _known(self, node: str | None, over: Mapping[str, str]) -> Iterator[tuple[str, str | None]]:
        """Each node known to either bucket or cut back (only `node` when given), by name, with why
        it is over quota if it is; a node no longer known loses its encoded row."""
        if node is not None:
            names: Iterable[str] = [node]
        else:
            names = sorted(set(self.leases) | set(self.modules) | set(over) | set(self.forgotten))
            for gone in self._rows.keys() - set(names):
                del self._rows[gone]
        for name in names:
            if name in self.leases or name in self.modules or name in over or name in self.forgotten:
                yield name, over.get(name)


class MalformedKeys:
    """The keys out of shape the fleet's buckets hold, each with why, encoded once as the answer
    carries them and kept in order, overall and by the node token they fall under: a node writing
    thousands of keys out of shape had them all sorted, filtered and encoded again for every
    `what=nodes`, also its own, and writing on meanwhile it made every cached order stale."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], bytes] = {}  # (bucket, key): the entry as answered
        self._order: list[tuple[str, str]] = []  # every (bucket, key), sorted
        self._by_token: dict[str, list[tuple[str, str]]] = {}  # token: its (bucket, key)s, sorted

    def __len__(self) -> int:
        return len(self._entries)

    def set(self, bucket: Bucket, key: str, reason: str) -> None:
        at = (bucket.name, key)
        if at not in self._entries:
            bisect.insort(self._order, at)
            bisect.insort(self._by_token.setdefault(_token_of(bucket, key), []), at)
        self._entries[at] = _compact(MalformedKey(key=key, bucket=bucket.name, reason=reason))

    def drop_bucket(self, bucket: Bucket) -> None:
        for _bucket, key in [at for at in self._order if at[0] == bucket.name]:
            self.drop(bucket, key)

    def drop(self, bucket: Bucket, key: str) -> None:
        at = (bucket.name, key)
        if self._entries.pop(at, None) is None:
            return
        _remove(self._order, at)
        token = _token_of(bucket, key)
        _remove(self._by_token[token], at)
        if not self._by_token[token]:
            del self._by_token[token]

    def drop_under(self, bucket: Bucket, token: str) -> None:
        """Forgets the keys of `bucket` under the node token `token`."""
        for at in [at for at in self._by_token.get(token, ()) if at[0] == bucket.name]:
            self.drop(bucket, at[1])

    def under(self, node: str | None) -> list[bytes]:
        """The entries by bucket and key; narrowed, those under the node's own keys."""
        entries = self._entries
        if node is None:
            return [entries[at] for at in self._order]
        wanted = {
            buckets.LEASES.name: _under_filters(buckets.LEASES, role=NODE_ROLE, name=node),
            buckets.APPLIED.name: _under_filters(buckets.APPLIED, node=node),
        }
        found = self._by_token.get(encode_token(node), ())
        return [entries[at] for at in found if wanted[at[0]](at[1])]


def _remove(ordered: list[tuple[str, str]], at: tuple[str, str]) -> None:
    del ordered[bisect.bisect_left(ordered, at)]


def _token_of(bucket: Bucket, key: str) -> str:
    """The node token a key of the fleet's buckets falls under: an applied key's first
    (`<node>.<module>`), a lease's second (`node.<name>`)."""
    tokens = key.split(".", 2)
    if bucket.name == buckets.LEASES.name:
        return tokens[1] if len(tokens) > 1 else ""
    return tokens[0]


def _under_filters(bucket: Bucket, **narrow: str) -> Callable[[str], bool]:
    filters = bucket.shape.filters(**narrow)
    head = filters[0]
    if filters == [head, f"{head}.>"] and "*" not in head:  # a key of a name or under it: in C
        under = f"{head}."
        return lambda key: key == head or key.startswith(under)
    return lambda key: any(subject_matches(f, key) for f in filters)


def _lease_seen(item: KvItem) -> LeaseSeen:
    stored_at = item.stored_at or datetime.now(UTC)
    if item.deleted:
        return LeaseSeen(item.revision, stored_at, released=True)
    try:
        holder: Holder | None = _usable(Holder.model_validate_json(item.value))
    except ValidationError:
        holder = None
    return LeaseSeen(item.revision, stored_at, released=False, holder=holder)


def _usable(holder: Holder) -> Holder | None:
    """`holder` if it can be shown: a node writes its own lease, and a `since` out of range in UTC
    would fail every answer (`Holder` itself bounds the ttl)."""
    return holder if _in_utc(holder.since) is not None else None


def _gone_mark(value: bytes) -> fleet_bucket.Gone | None:
    try:
        return fleet_bucket.Gone.model_validate_json(value)
    except ValidationError:
        return None


def _module_seen(item: KvItem) -> ModuleSeen:
    """The state and change time of an applied record, read tolerantly (fields it does not know
    are ignored); `ValueError` saying why when it has no state."""
    try:
        value = read_json(item.value, max_bytes=len(item.value))
    except JsonRefused as err:
        raise ValueError(f"the value {err.reason.removeprefix('it ')}") from None
    if not isinstance(value, dict) or value.get("state") not in ("applied", "pending"):
        raise ValueError("the value has no state applied or pending")
    changed = _parsed_time(value.get("changed_at")) or item.stored_at
    pending = value["state"] == "pending"
    return (item.revision, pending, changed, _causes_of(value.get("reasons")) if pending else "")


_CAUSES_SEEN: dict[frozenset[str], str] = {}


def _causes_of(reasons: object) -> str:
    """A pending record's classes of reasons as `ModuleSeen` keeps them; reasons out of shape are
    none (the client writes a list of strings)."""
    said = reasons if isinstance(reasons, list) else []
    causes = pending_causes(reason for reason in said if isinstance(reason, str))
    joined = _CAUSES_SEEN.get(causes)
    if joined is None:  # at most 2^3 combinations
        joined = _CAUSES_SEEN[causes] = sys.intern("+".join(sorted(causes)))
    return joined


def _parsed_time(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return _in_utc(parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC))


def _in_utc(moment: datetime) -> datetime | None:
    """`moment` in UTC; None when it falls outside the years a datetime holds (0001-01-01T00:00+05:00)."""
    try:
        return moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


def _tally(modules: Iterable[ModuleSeen]) -> Tally:
    applied = pending = 0
    latest: datetime | None = None
    for _, is_pending, changed_at, _ in modules:
        pending += is_pending
        applied += not is_pending
        if changed_at is not None and (latest is None or changed_at > latest):
            latest = changed_at
    return Tally(applied, pending, latest)


def _report(
    node: str, lease: LeaseSeen | None, tally: Tally, *, now: datetime, stale_after: timedelta, over_quota: str | None
) -> NodeReport:
    verdict, because = judge(lease, now=now, stale_after=stale_after)
    if over_quota is not None:
        return NodeReport(node, "over-quota", f"{over_quota}; {because}", lease, tally)
    return NodeReport(node, verdict, because, lease, tally)


def judge(lease: LeaseSeen | None, *, now: datetime, stale_after: timedelta) -> tuple[Verdict, str]:
    """The verdict on a node from its lease record, and how it is known."""
    if lease is None:
        return "gone", "no lease record: its client never ran, or the record was removed"
    age = max(now - lease.stored_at, timedelta(0))
    if lease.released:
        if age <= stale_after:
            return "healthy", f"lease released {ago(age)} ago"
        return "stale", f"lease released {ago(age)} ago, no sign of life since (stale after {_span(stale_after)})"
    ttl = timedelta(seconds=lease.holder.ttl_seconds) if lease.holder is not None else None
    told = f"ttl {ago(ttl)}" if ttl is not None else "holder unreadable"
    if ttl is not None and age > ttl + SKEW:
        return "stale", f"no renewal for {ago(age)}: its lease expired ({told})"
    if age > stale_after:
        return "stale", f"no renewal for {ago(age)} ({told}, stale after {_span(stale_after)})"
    return "healthy", f"lease renewed {ago(age)} ago ({told})"


def ago(span: timedelta) -> str:
    """A duration as a person reads it at a glance: `12 s`, `10 min`, `5 h`, `3 d`."""
    seconds = int(span.total_seconds())
    for unit, size, up_to in (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 172800)):
        if seconds < up_to:
            return f"{seconds // size} {unit}"
    return f"{seconds // 86400} d"


def _span(span: timedelta) -> str:
    """A threshold as given: `0.5 s` stays `0.5 s`; long ones read as `ago` does."""
    seconds = span.total_seconds()
    return f"{seconds:g} s" if seconds < 120 else ago(span)


def _lease_row(lease: LeaseSeen | None) -> HeldLease | ReleasedLease | NoLease:
    if lease is None:
        return NoLease(state="none")
    if lease.released:
        return ReleasedLease(state="released", released_at=_iso(lease.stored_at))
    holder = lease.holder
    if holder is None:
        return HeldLease(state="held", renewed_at=_iso(lease.stored_at))
    renewed_at, since = _iso(lease.stored_at), _iso(holder.since)
    return HeldLease(
        state="held",
        renewed_at=renewed_at,
        host=holder.host,
        pid=holder.pid,
        since=since,
        ttl_seconds=holder.ttl_seconds,
    )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stale_after_of(query: Query) -> timedelta:
    return timedelta(seconds=query.stale_after) if query.stale_after is not None else DEFAULT_STALE_AFTER


async def answer_pages(fleet: Fleet, query: Query, *, budget: int, cursor_of: CursorOf, now: datetime) -> list[bytes]:
    """The pages of the `what=nodes` answer (entries by node, then the keys out of shape), its rows
    made `ROWS_A_STEP` at a time, others answered in between: the whole fleet's rows in one step
    held every other request of the seat for tens of milliseconds, an operator's `what=registry`
    among them."""
    encoded = Encoded([], [])
    rows = fleet.rows(query.node, now=now, stale_after=stale_after_of(query))
    for count, (node, piece) in enumerate(rows, 1):
        if count % ROWS_A_STEP == 0:
            await anyio.lowlevel.checkpoint()
        if len(piece) <= budget:
            encoded.entries.append(piece)
        else:  # a holder record of a page's size: said, not sent
            reason = f"the report is {len(piece)} bytes, more than one answer message carries ({budget})"
            key = buckets.LEASES.shape.build(role=NODE_ROLE, name=node)
            encoded.malformed.append(_compact(MalformedKey(key=key, bucket=buckets.LEASES.name, reason=reason)))
    encoded.malformed.extend(fleet.malformed.under(query.node))
    return build_pages("nodes", encoded, budget=budget, cursor_of=cursor_of)


async def first_page(fleet: Fleet, asked: Asked, cache: PageCache, budget: int) -> bytes:
    """The first page of the answer; the pages after it are kept by this seat under a cursor for
    the asker (any other seat answers it 410: the listing is started again)."""
    listing_id = cache.new_listing_id()
    begun = Continuation(listing_id, 1, asked.query.given(), party_of(asked.party))
    cursor_of = partial(_kept_cursor, cache.seal, begun)
    budget -= cache.seal.room(begun)
    pages = await answer_pages(fleet, asked.query, budget=budget, cursor_of=cursor_of, now=datetime.now(UTC))
    if len(pages) > 1:
        cache.keep(listing_id, pages[1:], asked.party)
    return pages[0]


def _kept_cursor(seal: CursorSeal, begun: Continuation, page: int) -> str:
    return seal.seal(replace(begun, page=page))


def _compact(row: NodeRow | MalformedKey) -> bytes:
    """`row` as the seat writes it (the contract's `page_json` does pages the same way)."""
    return json.dumps(row.model_dump(), ensure_ascii=False, separators=(",", ":")).encode()


async def fleet_of(bus: Bus, view: FleetView | None, node: str | None, whole_listings: anyio.CapacityLimiter) -> Fleet:
    """The fleet to answer from when the view is not ready: one node's is listed at once (a few
    keys); the whole fleet is the view once it is filled, if within the bus's timeout (a seat just
    started fills it in seconds; listing it besides would read the buckets twice), else listed."""
    if node is not None:
        return await read_fleet(bus, node, view.over_quota if view is not None else dict)
    if view is not None:
        with anyio.move_on_after(bus.timeout):
            await view.filled.wait()
        if view.ready:
            return view
    async with whole_listings:
        return await read_fleet(bus, None, view.over_quota if view is not None else dict)


async def read_fleet(bus: Bus, node: str | None, over_quota: Callable[[], Mapping[str, str]] = dict) -> Fleet:
    """The fleet as the buckets hold it now, listed (narrowed to `node` when given)."""
    fleet = Fleet(over_quota)
    lease_filters = buckets.LEASES.shape.filters(role=NODE_ROLE, name=node) if node else [">"]
    applied_filters = buckets.APPLIED.shape.filters(node=node)
    try:
        async with anyio.create_task_group() as tg:
            leases = _Listed(bus, buckets.LEASES, lease_filters, by_batch=True)
            applied = _Listed(bus, buckets.APPLIED, applied_filters, by_batch=node is not None)
            tg.start_soon(leases.read)
            tg.start_soon(applied.read)
    except* BusError as group:
        err = sole_exception(group)
        raise Unavailable(f"reading the leases and applied buckets failed, retry: {err}") from None
    for item in leases:
        fleet.apply_lease(item)
    for item in applied:
        fleet.apply_applied(item)
    for item in await _gone_marks(bus, node):
        fleet.apply_gone(item)
    return fleet


async def _gone_marks(bus: Bus, node: str | None) -> list[KvItem]:
    """The fleet's gone marks (only `node`'s when given); none when the fleet bucket cannot be read:
    the verdicts are then told without them, as before the marks existed."""
    try:
        return await get_last_many(
            bus, fleet_bucket.FLEET, fleet_bucket.gone_key(node) if node is not None else GONE_MARKS
        )
    except BusError as err:
        log.debug("nodes: gone marks not read (%s); verdicts told without them", err)
        return []


@dataclass
class _Listed:
    bus: Bus
    bucket: Bucket
    filters: list[str]
    by_batch: bool
    items: list[KvItem] | None = None

    async def read(self) -> None:
        self.items = await current_snapshot(
            self.bus, self.bucket, self.filters, include_deleted=True, by_batch=self.by_batch
        )

    def __iter__(self) -> Iterator[KvItem]:
        return iter(self.items or ())


class FleetView(Fleet):
    """The fleet kept in memory by two watches (leases, applied), so `what=nodes` reads no bucket.

    Ready once each watch has delivered up to where its stream stood when the watch began. The
    watches' consumers are named per seat and purpose, and deleted when the seat stops (as
    `provisioner.verb.registry_view.RegistryView` does)."""

    def __init__(self, over_quota: Callable[[], Mapping[str, str]] = dict) -> None:
        super().__init__(over_quota)
        seat = uuid.uuid4().hex[:8]
        self.consumer_names = {
            buckets.LEASES.name: f"seat-leases-{seat}",
            buckets.APPLIED.name: f"seat-applied-{seat}",
            fleet_bucket.FLEET.name: f"seat-gone-{seat}",
        }
        self._filled: set[str] = set()
        self._check = timedelta(seconds=30)
        self._refilling: dict[str, int] = {}  # a bucket whose stream went back: the sequence it is read up to
        self._watches: list[ScopedWatch] = []
        self.filled = anyio.Event()

    @property
    def ready(self) -> bool:
        """Filled, no bucket read again, and the leases' and applied watches current
        (`ScopedWatch.current`: after a reconnect, not before the stream was checked for going
        back); the gone marks' watch is not waited for, as the filling is not."""
        return self.filled.is_set() and not self._refilling and all(watch.current for watch in self._watches)

    async def follow(
        self,
        bus: Bus,
        *,
        check: timedelta = timedelta(seconds=30),
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Reports started at once (answers are listed until the view is filled), then follows
        both buckets until cancelled; a stream that went back (looked at every `check`) is read
        again, and answers are listed meanwhile."""
        self._check = check
        task_status.started()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow, bus, buckets.LEASES, self.apply_lease)
            tg.start_soon(self._follow, bus, buckets.APPLIED, self.apply_applied)
            tg.start_soon(self._follow, bus, fleet_bucket.FLEET, self.apply_gone)

    async def _follow(self, bus: Bus, bucket: Bucket, apply: Callable[[KvItem], None]) -> None:
        try:
            await self._watch(bus, bucket, apply)
        except Exception:
            # A connection closed for good ends the seat (`provisioner.seat.server`), which says so
            # once; a watch starting just then fails its start (RuntimeError), and is no news.
            if not bus.closed.is_set():
                raise
            log.info("nodes view: the connection is closed; %s is no longer followed", bucket.name)

    async def _watch(self, bus: Bus, bucket: Bucket, apply: Callable[[KvItem], None]) -> None:
        name = self.consumer_names[bucket.name]
        if bucket.name == fleet_bucket.FLEET.name:  # the marks alone, and the view's readiness not waiting for them
            gone = partial(scoped_watch, on_item=apply, on_reset=self._gone_reset, check=self._check)
            async with gone(bus, bucket, GONE_MARKS, name=name):
                await anyio.sleep_forever()
        floor = await _last_sequence(bus, bucket)
        if floor == 0:
            self._mark_filled(bucket)

        def applied(item: KvItem) -> None:
            apply(item)
            if item.revision >= floor and bucket.name not in self._filled:
                self._mark_filled(bucket)
                log.info("nodes view: %s read up to sequence %d", bucket.name, item.revision)
            if item.revision >= self._refilling.get(bucket.name, item.revision + 1):
                del self._refilling[bucket.name]
                log.info("nodes view: %s read again up to sequence %d", bucket.name, item.revision)

        def reset(last: int) -> None:
            self.forget_bucket(bucket)
            if last > 0:
                self._refilling[bucket.name] = last  # answered by listing the buckets until then

        # Each entry is applied as the watch reads it, none held: a watch delivers a bucket's keys
        # in one burst, and a node flooding the applied bucket with 64 KiB values made held entries
        # hundreds of MB of the seat (a held 4,096 at a time filled the view in 28 s, not 4).
        async with scoped_watch(
            bus, bucket, ">", name=name, on_item=applied, on_reset=reset, check=self._check
        ) as watch:
            await self._kept_while(watch)

    async def _kept_while(self, watch: ScopedWatch) -> None:
        """Counts `watch` in the view's readiness until cancelled."""
        self._watches.append(watch)
        try:
            await anyio.sleep_forever()
        finally:
            self._watches.remove(watch)

    def _gone_reset(self, last: int) -> None:
        self.forget_bucket(fleet_bucket.FLEET)

    def _mark_filled(self, bucket: Bucket) -> None:
        self._filled.add(bucket.name)
        if len(self._filled) == 2:
            self.filled.set()


async def _last_sequence(bus: Bus, bucket: Bucket) -> int:
    """The stream's last sequence now (0: empty or missing), retried while the bus is away."""
    while True:
        try:
            info = await bus.jetstream(bucket.info_api, operation=f"look up bucket {bucket.name}")
        except NotFound:
            return 0
        except ConnectionClosed:
            raise
        except BusError as err:
            log.warning("nodes view: %s; retrying in 1 s", err)
            await anyio.sleep(1)
            continue
        return int(info.get("state", {}).get("last_seq", 0))
