"""Gone marks: which nodes every collection forgets, kept by the seat in the fleet bucket.

A node's client takes its lease (`node.<node>` of the leases bucket) and renews it while it runs;
a one-shot or a stopped client releases it (a delete marker). The server stamps both, so the seat
knows when each node last showed a sign of life by the server's clock, never the node's; it judges
that moment against its own clock, which the mesh takes to agree with the server's within
`registry.wire.SKEW` (a held lease is given that much more). Every `every`:

    read      the node leases (delete markers included) and the fleet's `gone.>` marks; the
              collect bucket's keys (headers only: which nodes contribute, no value) once every
              quarter of `forget_after` at most (`CONTRIBUTORS_READ_EVERY`): they matter only to
              nodes with no lease record, whose marks wait `forget_after` anyway, and reading
              them was nine tenths of a round (1,000 nodes of 10 contributions each: 326 ms of
              the headers against 31 ms of the leases and 1 ms of the marks)
    judge     a node is gone once its lease was last renewed or released longer than
              `forget_after` ago (a held lease counts as renewed until its ttl and
              `registry.wire.SKEW` run out, whatever `forget_after` says); a node with
              contributions but no lease record at all (a purged or lost leases bucket) is gone
              once this seat has seen it so for `forget_after`: the seat's own sighting, so a
              restart delays forgetting and never hastens it, and a mark standing for it stays
              (a restarted or second seat, whose sighting is younger, never un-forgets it); a
              node removed by `remove-node` (its lease's `removed` marker) is marked no more:
              its contributions are deleted
    converge  `gone.<node>` (`Gone`: last seen, marked since) written for each gone node,
              deleted for each node back; each write conditional on the revision read, and
              only where something changes: an unchanged fleet costs no write

A mark is deleted at the first round after the node renews or takes its lease again (within
`every`); its clients read the marks at each reconcile and leave that node's contributions out of
their collections until then (`provisioner_client.resolving.resolve.Forgotten`). A round the bus fails is
said and tried again at the next. Run by the hub's seat alone: a site's seat has the hub's fleet
mirrored, and writes nothing at the hub.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError

from provisioner.verb.nodes import NODE_ROLE, REMOVED_LEASE
from registry.contract import buckets, decode_token, fleet, node_token, to_json
from registry.errors import BusError, KeyShapeError, NoResponders, RegistryError, TokenError
from registry.wire import SKEW, Bus, Changes, Holder, KvItem, converge, current_snapshot, snapshot

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
CONTRIBUTORS_READ_EVERY = 0.25  # of forget_after: how stale the contributing nodes may be


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Sighting:
    """A node's last sign of life as its lease record shows it: when the server stored it, and
    how long it stands without a renewal (0 for a release; a held lease's ttl and the skew)."""

    stored_at: datetime
    stands_for: timedelta


async def keep_gone_marks(
    bus: Bus,
    *,
    forget_after: timedelta,
    every: timedelta,
    clock: Clock = utc_now,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Keeps the fleet's gone marks every `every` until cancelled; reports started after the first
    round (which the bus may fail: said, and tried again)."""
    marks = GoneMarks(forget_after=forget_after, clock=clock)
    await marks.round(bus)
    task_status.started()
    while True:
        await anyio.sleep(every.total_seconds())
        await marks.round(bus)


class GoneMarks:
    """The seat's judgement of which nodes are gone, and the converge of their marks."""

    def __init__(self, *, forget_after: timedelta, clock: Clock = utc_now) -> None:
        self.forget_after = forget_after
        self.clock = clock
        self._unleased_since: dict[str, datetime] = {}  # nodes contributing without a lease record: first seen
        self._contributors: tuple[datetime, set[str]] | None = None  # when read, and who

    async def round(self, bus: Bus) -> Changes | None:
        """One round, its failure said (None) rather than raised."""
        try:
            changes = await self.converge(bus)
        except (BusError, RegistryError) as err:
            log.warning("gone marks not kept this round: %s; trying again in the next", err)
            return None
        if changes:
            log.info("gone marks: %s (%s)", changes.summary(), _named(changes), extra={"bucket": fleet.FLEET.name})
        return changes

    async def converge(self, bus: Bus) -> Changes:
        """Reads the leases, contributions and marks, and writes the marks that differ."""
        leases = await current_snapshot(
            bus, buckets.LEASES, buckets.LEASES.shape.filters(role=NODE_ROLE), include_deleted=True
        )
        contributors = await self.contributors(bus)
        marks = await _marks(bus)
        desired = self.desired(_sightings(leases), contributors, marks, now=self.clock())
        return await converge(bus, fleet.FLEET, list(marks.values()), desired)

    async def contributors(self, bus: Bus) -> set[str]:
        """The nodes contributing to collections, read again once a quarter of `forget_after` old."""
        now = self.clock()
        if self._contributors is None or now - self._contributors[0] >= self.forget_after * CONTRIBUTORS_READ_EVERY:
            self._contributors = (now, await _contributors(bus))
        return self._contributors[1]

    def desired(
        self,
        sightings: Mapping[str, Sighting | None],
        contributors: Iterable[str],
        marks: Mapping[str, KvItem],
        *,
        now: datetime,
    ) -> dict[str, bytes]:
        """Each gone node's mark by key: a mark standing unchanged is kept as its bytes are.
        `sightings`: each node's lease (None: removed by `remove-node`)."""
        desired: dict[str, bytes] = {}
        for node, last_seen in self._gone(sightings, contributors, marks, now):
            key = fleet.gone_key(node)
            kept = marks.get(key)
            desired[key] = _mark(kept, last_seen, now)
        return desired

    def _gone(
        self,
        sightings: Mapping[str, Sighting | None],
        contributors: Iterable[str],
        marks: Mapping[str, KvItem],
        now: datetime,
    ) -> Iterable[tuple[str, datetime | None]]:
        """Each gone node and when it was last seen (None: never, by its lease). A node without a
        lease record that stands marked stays so: this seat's own sighting of it may be younger
        than the mark (the seat restarted, or another seat wrote it), and would delete it."""
        for node, sighting in sightings.items():
            if sighting is not None and now - sighting.stored_at > max(self.forget_after, sighting.stands_for):
                yield node, sighting.stored_at
        unleased = {node for node in contributors if node not in sightings}
        self._unleased_since = {node: self._unleased_since.get(node, now) for node in unleased}
        for node, since in self._unleased_since.items():
            standing = _standing(marks.get(fleet.gone_key(node)))
            if standing is not None:
                yield node, standing.last_seen
            elif now - since > self.forget_after:
                yield node, None


def _mark(kept: KvItem | None, last_seen: datetime | None, now: datetime) -> bytes:
    """A node's mark: the one standing when it says the same last sighting, else a new one."""
    if kept is not None and not kept.deleted:
        standing = _read_gone(kept.value)
        if standing is not None and standing.last_seen == last_seen:
            return kept.value
    return to_json(fleet.Gone(last_seen=last_seen, since=now))


def _standing(kept: KvItem | None) -> fleet.Gone | None:
    return None if kept is None or kept.deleted else _read_gone(kept.value)


def _read_gone(value: bytes) -> fleet.Gone | None:
    try:
        return fleet.Gone.model_validate_json(value)
    except ValidationError:
        return None


def _sightings(leases: Iterable[KvItem]) -> dict[str, Sighting | None]:
    """Each node's latest lease record as a sighting (None: removed)."""
    found: dict[str, Sighting | None] = {}
    for item in leases:
        try:
            node = buckets.LEASES.shape.parse(item.key)["name"]
        except KeyShapeError:
            continue
        found[node] = None if item.deleted and item.value == REMOVED_LEASE else _sighting(item)
    return found


def _sighting(item: KvItem) -> Sighting:
    stored_at = item.stored_at or utc_now()
    if item.deleted:
        return Sighting(stored_at, timedelta(0))
    try:
        ttl = timedelta(seconds=Holder.model_validate_json(item.value).ttl_seconds)
    except ValidationError:
        ttl = timedelta(0)  # a holder unreadable: `forget_after` alone decides
    return Sighting(stored_at, ttl + SKEW)


async def _contributors(bus: Bus) -> set[str]:
    """The nodes holding a key in the collect bucket, from its keys alone (headers only)."""
    nodes: set[str] = set()
    for item in await snapshot(bus, buckets.COLLECT, headers_only=True):
        try:
            nodes.add(decode_token(node_token(item.key)))
        except TokenError:
            continue
    return nodes


async def _marks(bus: Bus) -> dict[str, KvItem]:
    """The fleet's gone marks by key (delete markers too: a converge writes over them), those of
    a key out of shape left alone."""
    try:
        items = await current_snapshot(bus, fleet.FLEET, [f"{fleet.GONE}.>"], include_deleted=True)
    except NoResponders as err:
        raise BusError("read the fleet's gone marks", f"{err.reason}: is the fleet bucket made?") from err
    return {item.key: item for item in items if _is_mark(item.key)}


def _is_mark(key: str) -> bool:
    try:
        return fleet.parse_fleet_key(key).kind == fleet.GONE
    except KeyShapeError:
        return False


def _named(changes: Changes) -> str:
    written = ", ".join(changes.written[:10])
    deleted = ", ".join(changes.deleted[:10])
    return f"marked {written or 'none'}; back {deleted or 'none'}"
