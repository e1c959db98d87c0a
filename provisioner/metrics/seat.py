"""The seat's series, made fresh at each scrape (docs/monitoring.md, "Prometheus"):

- `mesh_seat_nodes{verdict}` gauge: nodes `healthy`, `stale`, `gone` and `over_quota`, as
  `what=nodes` judges them with its default stale_after (the seat's `FleetView`); all 0 until
  the view is filled.
- `mesh_seat_fleet_ready` gauge: 1 once the view has read both its buckets.
- `mesh_seat_modules_pending_by_cause{cause}` gauge: the fleet's pending modules with a reason of
  each class (`registry.contract.pending_causes`: `verb_refused`, `verb_unanswered`,
  `rollout_waiting`, `rollout_paused`, `rollout_aborted`, `rollout_unreachable`, `other`), as their
  applied records say; all 0 until the view is filled.
- `mesh_seat_bucket_bytes{bucket}`, `mesh_seat_bucket_max_bytes{bucket}` gauges: what each of the
  seat's buckets holds and may hold (its stream's state and `max_bytes`; -1: no limit).
- `mesh_seat_bucket_keys{bucket}`, `mesh_seat_bucket_max_keys{bucket}` gauges: its messages (each
  key's latest and delete markers, at a history of 1) and `max_msgs` (-1: no limit). A bucket
  whose information cannot be read has no series until it can.
- `mesh_seat_compile_lease_held` gauge: 1 while this seat holds the compile lease (the lease
  record names this host and process, renewed within its ttl); `mesh_seat_compile_lease_since_
  timestamp_seconds` gauge: since when it holds it, 0 when it does not.
- `mesh_seat_nats_connected{connection}` gauge and `mesh_seat_nats_reconnects_total{connection}`
  counter: the `data` connection (buckets, watches), the `verb` connection (requests) and, at the
  hub, the `guard` connection (the quota guard's reads and purges).

And what the seat counts as it works (`SeatWork`), when it is given:

- `mesh_seat_requests_total{what,code}` counter: the verb's answers by what was asked (`registry`,
  `needs`, `applied`, `collect`, `nodes`; `unread`: refused before that was read) and the code
  answered (`200`, `400`, `403`, `410`, `500`, `503`).
- `mesh_seat_request_duration_seconds{what}` histogram: from a request's arrival to its answer.
- `mesh_seat_requests_in_flight` gauge: requests received and not answered yet.
- `mesh_seat_listings_kept{way}` gauge: listings kept behind a cursor, `pages` (read whole, their
  later pages kept) and `streamed` (open, read a page at a time); `mesh_seat_cursor_cache_bytes`
  gauge: what they hold (a streamed one counts as the most it may hold).
- `mesh_seat_compile_runs_total{outcome}` counter: this seat's compiles of the registry, `changed`,
  `unchanged` or `failed` (the bus); `mesh_seat_compile_kinds_total{change}`: kinds `written` and
  `deleted` by them.
- `mesh_seat_rollouts_held{state}` gauge: modules whose rollout is held, `paused` or `aborted`, as
  the seat's rollout task read the fleet bucket (`provisioner.seat.rollouts`);
  `mesh_seat_rollout_claims{state}` gauge: the claims of rollout slots it read, `waiting`,
  `running`, `failed`, `expired` (not renewed within their ttl); `mesh_seat_rollout_pauses_total
  {outcome}` counter: failed claims it judged, `paused` (it wrote the hold), `already_held`,
  `not_running` (the node does not run the module: nothing paused), `failed` (the bus), `dropped`
  (more failures waiting than the seat keeps: not judged). All 0
  where the task does not run (a site's seat).

Cardinality is bounded by the seat's buckets (its own, one per provider and writing domain): no
series names a node or a key.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from provisioner.seat.registry_sync import CompileCounts
from provisioner.seat.rollouts import PAUSE_OUTCOMES, RolloutsSeen
from provisioner.settings import DEFAULT_STALE_AFTER
from provisioner.verb.nodes import Fleet, FleetView, LeaseSeen
from provisioner.verb.paging import PageCache
from provisioner.verb.stats import RequestStats
from registry.contract import PENDING_CAUSES, Bucket, buckets
from registry.errors import BusError
from registry.runtime import serve_metrics
from registry.wire import SKEW, Bus, Holder, get_stamped, seat_key

log = logging.getLogger(__name__)

NODES_AT_ONCE = 500
VERDICTS = {"healthy": "healthy", "stale": "stale", "gone": "gone", "over-quota": "over_quota"}


@dataclass(frozen=True)
class SeatWork:
    """What the seat counts as it works, read at each scrape."""

    requests: RequestStats
    compiles: CompileCounts
    cache: PageCache
    rollouts: RolloutsSeen = field(default_factory=RolloutsSeen)  # what `hold_failed_rollouts` saw


class WorkCollector(Collector):
    """`SeatWork`'s figures as series, made from its counts at each collection."""

    def __init__(self, work: SeatWork) -> None:
        self.work = work

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._listings()
        yield from self._compiles()
        yield from self._rollouts()

    def _requests(self) -> Iterator[Metric]:
        stats = self.work.requests
        answers = CounterMetricFamily("mesh_seat_requests", "the verb's answers", labels=["what", "code"])
        for (what, code), count in sorted(stats.answers.items()):
            answers.add_metric([what, code], count)
        yield answers
        durations = HistogramMetricFamily(
            "mesh_seat_request_duration_seconds", "from a request's arrival to its answer", labels=["what"]
        )
        for what, latency in stats.latency.items():
            buckets = [(_bound(bound), count) for bound, count in latency.cumulative()]
            durations.add_metric([what], buckets, latency.seconds)
        yield durations
        yield GaugeMetricFamily("mesh_seat_requests_in_flight", "requests not answered yet", stats.in_flight)

    def _listings(self) -> Iterator[Metric]:
        pages, streamed, size = self.work.cache.held()
        kept = GaugeMetricFamily("mesh_seat_listings_kept", "listings kept behind a cursor", labels=["way"])
        kept.add_metric(["pages"], pages)
        kept.add_metric(["streamed"], streamed)
        yield kept
        yield GaugeMetricFamily("mesh_seat_cursor_cache_bytes", "bytes the kept listings hold", size)

    def _compiles(self) -> Iterator[Metric]:
        counts = self.work.compiles
        runs = CounterMetricFamily("mesh_seat_compile_runs", "this seat's compiles", labels=["outcome"])
        for outcome, count in counts.runs.items():
            runs.add_metric([outcome], count)
        yield runs
        kinds = CounterMetricFamily("mesh_seat_compile_kinds", "kinds its compiles changed", labels=["change"])
        kinds.add_metric(["written"], counts.written)
        kinds.add_metric(["deleted"], counts.deleted)
        yield kinds

    def _rollouts(self) -> Iterator[Metric]:
        seen = self.work.rollouts
        held = GaugeMetricFamily("mesh_seat_rollouts_held", "modules whose rollout is held", labels=["state"])
        for state, count in seen.holds_by_state().items():
            held.add_metric([state], count)
        yield held
        claims = GaugeMetricFamily("mesh_seat_rollout_claims", "claims of rollout slots", labels=["state"])
        for state, count in seen.claims_by_state().items():
            claims.add_metric([state], count)
        yield claims
        pauses = CounterMetricFamily("mesh_seat_rollout_pauses", "failed claims judged", labels=["outcome"])
        for outcome in PAUSE_OUTCOMES:
            pauses.add_metric([outcome], seen.pauses[outcome])
        yield pauses


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class SeatMetrics:
    """The seat's series in a registry of their own; `render` reads what they need and writes them out."""

    def __init__(
        self,
        connections: Mapping[str, Bus],
        fleet: FleetView | None,
        seat_buckets: Iterable[Bucket],
        *,
        work: SeatWork | None = None,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
    ) -> None:
        self.bus = connections["data"]
        self.connections = dict(connections)
        self.fleet = fleet
        self.buckets = list(seat_buckets)
        self._fleet_count = FleetCount(stale_after)
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = anyio.Lock()
        self._reconnects_seen = dict.fromkeys(self.connections, 0)
        self._nodes = self._gauge("mesh_seat_nodes", "nodes by the seat's verdict", ["verdict"])
        self._fleet_ready = self._gauge("mesh_seat_fleet_ready", "1 once the seat's view of the fleet is filled")
        self._pending = self._gauge(
            "mesh_seat_modules_pending_by_cause", "the fleet's pending modules with a reason of this class", ["cause"]
        )
        bucket = ["bucket"]
        self._bytes = self._gauge("mesh_seat_bucket_bytes", "bytes the bucket holds", bucket)
        self._max_bytes = self._gauge("mesh_seat_bucket_max_bytes", "bytes the bucket may hold; -1: no limit", bucket)
        self._keys = self._gauge("mesh_seat_bucket_keys", "messages the bucket holds", bucket)
        self._max_keys = self._gauge("mesh_seat_bucket_max_keys", "messages the bucket may hold; -1: no limit", bucket)
        self._lease = self._gauge("mesh_seat_compile_lease_held", "1 while this seat holds the compile lease")
        self._lease_since = self._gauge(
            "mesh_seat_compile_lease_since_timestamp_seconds", "since when this seat holds the compile lease; 0: not"
        )
        connection = ["connection"]
        self._connected = self._gauge("mesh_seat_nats_connected", "1 while the connection to NATS is up", connection)
        self._reconnects = Counter(
            "mesh_seat_nats_reconnects", "times the connection was recovered", connection, registry=self.registry
        )
        for verdict in VERDICTS.values():
            self._nodes.labels(verdict)
        for cause in PENDING_CAUSES:
            self._pending.labels(cause)
        for name in self.connections:
            self._reconnects.labels(name)
        if work is not None:
            self.registry.register(WorkCollector(work))

    def _gauge(self, name: str, documentation: str, labels: Iterable[str] = ()) -> Gauge:
        return Gauge(name, documentation, list(labels), registry=self.registry)

    async def render(self) -> bytes:
        """The series as Prometheus' text format, read now (one scrape at a time)."""
        async with self._lock:
            await self.refresh()
            return generate_latest(self.registry)

    async def refresh(self) -> None:
        await self._count_nodes()
        self._tell_connections()
        if not self.bus.connected:  # a request now would wait out its timeout: the figures stand
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read_lease)
            for bucket in self.buckets:
                tg.start_soon(self._read_bucket, bucket)

    async def _count_nodes(self) -> None:
        ready = self.fleet is not None and self.fleet.ready
        self._fleet_ready.set(1 if ready else 0)
        counts = await self._fleet_count.count(self.fleet) if self.fleet is not None and ready else {}
        for verdict in VERDICTS.values():
            self._nodes.labels(verdict).set(counts.get(verdict, 0))
        for cause in PENDING_CAUSES:
            pending = self.fleet.pending_by_cause[cause] if self.fleet is not None and ready else 0
            self._pending.labels(cause).set(pending)

    def _tell_connections(self) -> None:
        for name, bus in self.connections.items():
            self._connected.labels(name).set(1 if bus.connected else 0)
            self._reconnects.labels(name).inc(bus.reconnects - self._reconnects_seen[name])
            self._reconnects_seen[name] = bus.reconnects

    async def _read_bucket(self, bucket: Bucket) -> None:
        try:
            info = await self.bus.jetstream(bucket.info_api, operation=f"look up bucket {bucket.name}")
        except BusError as err:
            log.debug("metrics: bucket %s not read: %s", bucket.name, err)
            for gauge in (self._bytes, self._max_bytes, self._keys, self._max_keys):
                _forget(gauge, bucket.name)
            return
        config: Mapping[str, Any] = info.get("config", {})
        state: Mapping[str, Any] = info.get("state", {})
        self._bytes.labels(bucket.name).set(state.get("bytes", 0))
        self._max_bytes.labels(bucket.name).set(config.get("max_bytes", -1))
        self._keys.labels(bucket.name).set(state.get("messages", 0))
        self._max_keys.labels(bucket.name).set(config.get("max_msgs", -1))

    async def _read_lease(self) -> None:
        try:
            current = await get_stamped(self.bus, buckets.LEASES, seat_key())
        except BusError as err:
            log.debug("metrics: the compile lease not read: %s", err)
            return
        holder = None
        if current is not None and not current.item.deleted:
            holder = _holder(current.item.value)
        fresh = current is not None and holder is not None and _renewed_within(current.stored_at, holder)
        since = holder.since.timestamp() if fresh and holder is not None and _is_this_process(holder) else 0.0
        self._lease.set(1 if since else 0)
        self._lease_since.set(since)


async def serve_seat_metrics(
    listen: str,
    connections: Mapping[str, Bus],
    fleet: FleetView | None,
    seat_buckets: Iterable[Bucket],
    *,
    work: SeatWork | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The seat's series served at `listen` until cancelled (`serve_metrics`); started with the port."""
    metrics = SeatMetrics(connections, fleet, seat_buckets, work=work)
    await serve_metrics(listen, metrics.render, task_status=task_status)


class FleetCount:
    """The nodes of each verdict, as `what=nodes` judges them (`judge`), without making their
    reports: those took 53 to 76 ms of the event loop for 10,000 nodes at every scrape. Each lease
    record's verdict is healthy until a moment known from the record alone (its ttl, the skew
    allowed, `stale_after`), remembered while the record stays the same; the loop is let go every
    `NODES_AT_ONCE` nodes."""

    def __init__(self, stale_after: timedelta = DEFAULT_STALE_AFTER) -> None:
        self.stale_after = stale_after
        self._healthy_until: dict[str, tuple[LeaseSeen, datetime]] = {}

    async def count(self, fleet: Fleet, now: datetime | None = None) -> dict[str, int]:
        now = now or datetime.now(UTC)
        over = fleet.over_quota()
        counts = dict.fromkeys(VERDICTS.values(), 0)
        kept: dict[str, tuple[LeaseSeen, datetime]] = {}
        for done, name in enumerate(fleet.leases.keys() | fleet.modules.keys() | over.keys(), start=1):
            lease = fleet.leases.get(name)
            if name in over:
                counts["over_quota"] += 1
            elif lease is None:
                counts["gone"] += 1
            else:
                known = self._healthy_until.get(name)
                until = known[1] if known is not None and known[0] is lease else self.healthy_until(lease)
                kept[name] = (lease, until)
                counts["healthy" if now <= until else "stale"] += 1
            if done % NODES_AT_ONCE == 0:
                await anyio.lowlevel.checkpoint()
        self._healthy_until = kept
        return counts

    def healthy_until(self, lease: LeaseSeen) -> datetime:
        """The last moment `judge` says healthy of `lease`: released, within stale_after; held,
        renewed within stale_after and within its ttl and the skew allowed (when it can be read)."""
        if lease.released or lease.holder is None:
            return lease.stored_at + self.stale_after
        return lease.stored_at + min(self.stale_after, timedelta(seconds=lease.holder.ttl_seconds) + SKEW)


def _holder(value: bytes) -> Holder | None:
    try:
        return Holder.model_validate_json(value)
    except ValueError:
        return None


def _renewed_within(stored_at: datetime, holder: Holder) -> bool:
    return datetime.now(UTC) - stored_at <= timedelta(seconds=holder.ttl_seconds) + SKEW


def _is_this_process(holder: Holder) -> bool:
    """The lease names its holder's host and process, not its seat: one seat runs per process."""
    return holder.host == socket.gethostname() and holder.pid == os.getpid()


def _forget(gauge: Gauge, bucket: str) -> None:
    with contextlib.suppress(KeyError):  # never set
        gauge.remove(bucket)
