"""Watch mode: reconcile at start and again whenever something it depends on changes.

- The registry and every bucket a reconcile read from are followed by plain subscriptions on
  `$KV.<bucket>.<filter>`, no consumer (a node has no JetStream API): one per bucket, over the
  node's own `<node>.>` where the keys read lie under it, else over the bucket; only changes of
  the keys read wake the loop. In a node's own account those subjects reach it through stream
  imports of where each bucket's stream republishes its writes (`$KVR.<bucket>.`), onto
  `$KV.<bucket>.`: every write, whoever wrote it (the seat, a writer, a provider); on a
  single-account development bus the subscriptions see the writes themselves.
  Either way delivery is at-most-once: after the connection is recovered, and once a new
  subscription is in place, the loop reconciles again ("resync") instead of trusting it saw all.
- The fleet bucket is followed live where its stream republishes it (`$KVR.<fleet>.>`,
  `provisioner_client.watch.fleet`): a hold of a module it declares, a freed or failed slot of a
  module it waits on, a node forgotten or back, each pull a reconcile; what nothing announces (a
  claim to renew, a splay ending) the rollout alarm does, at the time the last reconcile asked for.
- Manifests are polled (name, inode, mtime, size of each `*.json`): they are replaced atomically,
  and a watch on a path stops seeing a file once it is renamed over.
- Every `rollback_check` (30 s) the bus is asked, cheaply, whether it went back below what the
  node remembers writing (`provisioner_client.watch.rollback`), the connection seen to drop or not:
  found so, the loop reconciles, and the reconcile writes back what was lost.
- Verb-answered values (secrets) are re-asked on a refresh interval; the env file changes only
  when the digest of what it would hold differs.
- The env files the client wrote for applied modules are looked at every `drift_poll` (1 s,
  `provisioner_client.watch.drift`): one edited, re-moded or removed by hand is put back from what is
  applied (that module's values alone, written only if they render the applied digest; otherwise
  a full reconcile), and logged as drift put back, naming the file and module, never the content.
  The poll runs while a reconcile rewrites files: each file is judged against what the client last
  wrote into it, which the reconcile tells the drift watch at the moment it writes, so the
  client's own writes are never taken for drift.

All of it runs only while this client holds the node's lease (`provisioner_client.watch.holding`): a
second watch client for the node waits, logging once who holds it, and takes over only when the
first released it or its lease expired.

Any change wakes the loop; it waits out a short debounce, then runs one full reconcile (cheap when
nothing changed: zero writes), or only puts the drifted files back when nothing else changed. A
reconcile that fails because the bus is away, or whose writes a bucket refused (full), is retried
with exponential backoff. Writes that wait for the hub (a site's link cut: answered `NoResponders`
or timed out, `provisioner_client.resolving.own`) are retried every `waiting_retry` (1 s)
instead: the node's connection to its site's server stays up, so nothing else tells the client
that the link is back, and the writes must follow within seconds of it. A `stop` event ends the
loop after the reconcile in progress (its change action included); cancelling the task group it
runs in stops it at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
from anyio.abc import TaskGroup, TaskStatus

from provisioner_client.errors import ClientError
from provisioner_client.metrics import NodeMetrics
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.resolving.manifest import manifest_files
from provisioner_client.resolving.own import WaitingWrites, link_down
from provisioner_client.resolving.resolve import Source
from provisioner_client.watch.drift import DriftWatch, put_back
from provisioner_client.watch.fleet import FleetInterest, RolloutAlarm, follow_fleet
from provisioner_client.watch.holding import Renewals, node_lease
from provisioner_client.watch.rollback import check_for_rollback
from registry.contract import AppliedValue, Bucket, buckets, subject_matches, under
from registry.errors import BusError, ConnectionClosed
from registry.runtime import event, log_context
from registry.wire import Bus, Message

log = logging.getLogger(__name__)

AFTER_RECONNECT = (
    "a reconnect: the server may have restarted from a store behind the writes it acknowledged, and "
    "been written to since, holding other content at the sequences remembered"
)


@dataclass(frozen=True)
class WatchTiming:
    debounce: timedelta = timedelta(seconds=0.5)
    refresh: timedelta = timedelta(minutes=5)
    poll: timedelta = timedelta(seconds=2)
    backoff_max: timedelta = timedelta(seconds=30)
    drift_poll: timedelta = timedelta(seconds=1)
    waiting_retry: timedelta = timedelta(seconds=1)  # the backoff's cap while writes wait for the hub
    rollback_check: timedelta = timedelta(seconds=30)  # how often the bus is asked whether it went back


@dataclass(frozen=True)
class Wake:
    """Why the loop woke: the reasons, and the modules whose env file drifted (and how)."""

    reasons: frozenset[str]
    drifted: Mapping[str, str]

    def described(self) -> str:
        return ", ".join(sorted(self.reasons | {f"drift of module {m}" for m in self.drifted}))


class Trigger:
    """Wakes the loop; remembers why, for the log, and which files drifted, to put them back."""

    def __init__(self) -> None:
        self._reasons: set[str] = set()
        self._drifted: dict[str, str] = {}
        self._event = anyio.Event()
        # Reconnects counted, the count when the last wake began and the count a reconcile that
        # succeeded began at: the memory vouches for nothing until one begun after a reconnect succeeds.
        self._reconnects = self._woken_at = self._trusted_at = 0

    def reconnected(self) -> None:
        self._reconnects += 1
        self.pull("resync after reconnect")

    @property
    def distrust(self) -> str | None:
        """Why the reconcile of this wake must not trust the memory, if it must not."""
        return AFTER_RECONNECT if self._woken_at > self._trusted_at else None

    def trusted(self) -> None:
        """The reconcile of this wake succeeded."""
        self._trusted_at = self._woken_at

    def pull(self, reason: str) -> None:
        self._reasons.add(reason)
        self._event.set()

    def drifted(self, module: str, how: str) -> None:
        self._drifted[module] = how
        self._event.set()

    async def wait(self, debounce: timedelta) -> Wake:
        await self._event.wait()
        await anyio.sleep(debounce.total_seconds())
        wake = Wake(frozenset(self._reasons), dict(self._drifted))
        self._woken_at = self._reconnects
        self._reasons, self._drifted = set(), {}
        self._event = anyio.Event()
        return wake


# The buckets whose keys nodes write, each its own `<node>.>`.
WRITTEN_BY_NODES = frozenset(bucket.name for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT))


def watch_scopes(sources: set[Source], node: str) -> dict[Source, set[str]]:
    """One watch per bucket, not per key: the node's own `<node>.>` where every source of the
    bucket lies under it, else the whole bucket; with the source filters whose changes matter.
    A bucket nodes write (a shared collection's other nodes' contributions) is the exception: each
    source outside the node's own keys is a watch of its own (`followed_live`).

    A client of many modules would otherwise hold hundreds of subscriptions; the filters keep
    other keys' changes from waking it."""
    own_keys = under(node)
    own = own_keys[:-1]
    by_bucket: dict[Bucket, set[str]] = {}
    scopes: dict[Source, set[str]] = {}
    for source in sources:
        if followed_live(source, node):
            scopes[source] = {source.filter}
        else:
            by_bucket.setdefault(source.bucket, set()).add(source.filter)
    scopes.update(
        {
            Source(bucket, own_keys if all(f.startswith(own) for f in filters) else ">"): filters
            for bucket, filters in by_bucket.items()
        }
    )
    return scopes


def followed_live(source: Source, node: str) -> bool:
    """Whether `source` is followed where its bucket's stream republishes it (`$KVR.`), not on its
    keys' own subjects: other nodes' keys of a bucket nodes write (a shared collection), whose live
    updates a node's grants import there, off the subjects its own writes go out on."""
    return source.bucket.name in WRITTEN_BY_NODES and not source.filter.startswith(under(node)[:-1])


class _Followers:
    """One subscription per bucket a reconcile read from; a change of a key it read pulls the trigger."""

    def __init__(self, bus: Bus, tg: TaskGroup, trigger: Trigger, node: str) -> None:
        self._bus = bus
        self._tg = tg
        self._trigger = trigger
        self._node = node
        self._scopes: dict[Source, anyio.CancelScope] = {}
        self._interest: dict[Source, set[str]] = {}

    def follow(self, sources: set[Source]) -> None:
        self._interest = watch_scopes(sources, self._node)
        for gone in set(self._scopes) - set(self._interest):
            self._scopes.pop(gone).cancel()
        for scope_source in sorted(set(self._interest) - set(self._scopes), key=lambda s: (s.bucket.name, s.filter)):
            scope = self._scopes[scope_source] = anyio.CancelScope()
            self._tg.start_soon(self._follow, scope_source, scope)

    async def _follow(self, source: Source, scope: anyio.CancelScope) -> None:
        live = followed_live(source, self._node)
        subject = source.bucket.live_subject(source.filter) if live else source.bucket.subject(source.filter)
        own = under(self._node)[:-1]

        async def on_message(msg: Message) -> None:
            key = source.bucket.key_of(msg.subject)
            if live and key.startswith(own):  # its own write, come back: nothing to read again
                return
            if any(subject_matches(f, key) for f in self._interest.get(source, ())):
                self._trigger.pull(f"{source.bucket.name} {key}")

        with scope:
            try:
                subscription = await self._bus.subscribe(subject, on_message)
                try:
                    await self._bus.flush()  # the server has the subscription: re-read what changed before it
                    self._trigger.pull(f"resync after following {source.bucket.name}")
                    await anyio.sleep_forever()
                finally:
                    with anyio.move_on_after(2, shield=True):
                        await subscription.unsubscribe()
            except BusError as err:  # followed again after the next reconcile
                log.warning("cannot follow %s %s: %s", source.bucket.name, source.filter, err.reason)
                self._scopes.pop(source, None)
                self._trigger.pull("retry following")


async def watch(
    bus: Bus,
    plan: ClientPlan,
    timing: WatchTiming,
    *,
    stop: anyio.Event | None = None,
    on_report: Callable[[Report], None] | None = None,
    metrics: NodeMetrics | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Reconciles until `stop` is set, then returns after the reconcile in progress (its change
    actions finish: cancelling would kill them), or until cancelled; ready after the first
    reconcile that reached the bus. Only while it holds the node's lease (`holding`): it waits
    for it first, and again whenever it was lost. `metrics` is told of each reconcile, drift put
    back and lease change, and written after each."""
    closed_for_good = anyio.Event()
    async with anyio.create_task_group() as outer:
        outer.start_soon(_end_when_closed, bus, closed_for_good, outer.cancel_scope)
        await _watch_holding(
            bus, plan, timing, stop=stop, on_report=on_report, metrics=metrics, task_status=task_status
        )
        outer.cancel_scope.cancel()
    if closed_for_good.is_set():
        raise ConnectionClosed(f"watch node {plan.node}", "nats closed the connection for good; restart the client")


async def _end_when_closed(bus: Bus, closed_for_good: anyio.Event, everything: anyio.CancelScope) -> None:
    """nats-py never reconnects a connection it closed (an authorization violation, say): a watch
    on it would wait for ever, so it ends, for its supervisor to start the client again."""
    await bus.closed.wait()
    closed_for_good.set()
    everything.cancel()


async def _watch_holding(
    bus: Bus,
    plan: ClientPlan,
    timing: WatchTiming,
    *,
    stop: anyio.Event | None,
    on_report: Callable[[Report], None] | None,
    metrics: NodeMetrics | None,
    task_status: TaskStatus[None],
) -> None:
    stopping = anyio.Event() if stop is None else stop
    lease = node_lease(bus, plan.node, plan.lease_ttl)
    started: list[bool] = []

    def on_started() -> None:
        if not started:
            task_status.started()
            started.append(True)

    while await lease.wait_for_it(stopping):
        lost = anyio.Event()
        _lease_told(metrics, held=True)
        try:
            async with anyio.create_task_group() as tg:
                renewals = Renewals(lease, lost, WaitingWrites(plan.materialize, plan.node))
                tg.start_soon(renewals.run)
                await _reconcile_while_held(
                    bus,
                    plan,
                    timing,
                    renewals=renewals,
                    stopping=stopping,
                    lost=lost,
                    on_report=on_report,
                    on_started=on_started,
                    metrics=metrics,
                )
                tg.cancel_scope.cancel()
        finally:
            with anyio.move_on_after(2, shield=True):
                await lease.release()
            _lease_told(metrics, held=False)


def _lease_told(metrics: NodeMetrics | None, *, held: bool) -> None:
    if metrics is not None:
        metrics.lease(held=held)


async def _reconcile_while_held(
    bus: Bus,
    plan: ClientPlan,
    timing: WatchTiming,
    *,
    renewals: Renewals,
    stopping: anyio.Event,
    lost: anyio.Event,
    on_report: Callable[[Report], None] | None,
    on_started: Callable[[], None],
    metrics: NodeMetrics | None = None,
) -> None:
    trigger = Trigger()
    trigger.pull("start")

    async def wake_on(event: anyio.Event, reason: str) -> None:
        await event.wait()
        trigger.pull(reason)

    drift = DriftWatch(plan.materialize)
    applied: dict[str, AppliedValue] = {}
    async with anyio.create_task_group() as tg:
        followers = _Followers(bus, tg, trigger, plan.node)
        tg.start_soon(_poll_manifests, plan.manifests, trigger, timing.poll)
        tg.start_soon(_poll_drift, drift, trigger, timing.drift_poll)
        tg.start_soon(_refresh, trigger, timing.refresh)
        tg.start_soon(wake_on, stopping, "stop")
        tg.start_soon(wake_on, lost, "lease lost")
        _notice_bus_changes(tg, bus, plan, trigger, timing.rollback_check)
        rollouts = _follow_rollouts(bus, tg, trigger, plan.node)
        backoff = Backoff(timing.backoff_max)
        while not (stopping.is_set() or lost.is_set()):
            wake = await trigger.wait(timing.debounce)
            if stopping.is_set() or not await _renewed_first(renewals, wake):
                break
            started = time.monotonic()
            try:
                if not wake.reasons and await _put_back(bus, plan, drift, wake.drifted, applied):
                    if metrics is not None:
                        metrics.drift_put_back(len(wake.drifted))
                    continue
                report = await reconcile(bus, plan, observer=drift, distrust=trigger.distrust, waits=renewals.waits)
            except (BusError, ClientError) as err:
                if metrics is not None:
                    metrics.failed(time.monotonic() - started)
                delay = _retry_after(err, backoff, timing)
                log.warning("reconcile failed: %s; retrying in %.1f s", err, delay)
                with anyio.move_on_after(delay):
                    await stopping.wait()
                trigger.pull("retry")
                continue
            _look_again(report, backoff, tg, trigger, timing=timing, rollouts=rollouts)
            applied = {module: done.applied for module, done in report.modules.items()}
            drift.expect(applied)
            followers.follow(report.sources)
            _log_report(report)
            took = time.monotonic() - started
            put_back_now = _put_back_by_reconcile(report, wake.drifted)
            if metrics is not None:
                metrics.reconciled(report, took, put_back=put_back_now)
            if on_report is not None:
                on_report(report)
            on_started()
        tg.cancel_scope.cancel()


@dataclass(frozen=True)
class _Rollouts:
    interest: FleetInterest
    alarm: RolloutAlarm


def _follow_rollouts(bus: Bus, tg: TaskGroup, trigger: Trigger, node: str) -> _Rollouts:
    """The fleet bucket followed and the rollout alarm running (`provisioner_client.watch.fleet`)."""
    rollouts = _Rollouts(FleetInterest(node), RolloutAlarm(trigger.pull))
    tg.start_soon(follow_fleet, bus, rollouts.interest, trigger.pull)
    tg.start_soon(rollouts.alarm.run)
    return rollouts


def _look_again(
    report: Report, backoff: Backoff, tg: TaskGroup, trigger: Trigger, *, timing: WatchTiming, rollouts: _Rollouts
) -> None:
    """What wakes the loop after `report`: a retry of refused or waiting writes, the fleet's writes
    of the modules it declares and waits on, the rollout alarm; the memory trusted again."""
    trigger.trusted()
    _again_if_refused(report, backoff, tg, trigger, timing.waiting_retry)
    rollouts.interest.modules, rollouts.interest.waiting = set(report.modules), set(report.rollout.waiting)
    rollouts.alarm.set(report.rollout.wake_after)


async def _renewed_first(renewals: Renewals, wake: Wake) -> bool:
    """Whether to reconcile for `wake`: not once the lease is lost. While the lease's renewals wait
    for the hub, one is tried first: the reconcile's writes then follow a renewal that reached the
    hub, or a lease lost meanwhile (remove-node during a cut) stops them all. After a renewal still
    refused, the writes fail as it did."""
    if renewals.lost.is_set():
        return False
    log.debug("woken by %s", wake.described())
    if renewals.waiting:
        await renewals.now()
    return not renewals.lost.is_set()


def _retry_after(err: BusError | ClientError, backoff: Backoff, timing: WatchTiming) -> float:
    """The backoff's next delay; at most `waiting_retry` when the hub did not answer (a link down)."""
    return backoff.next(cap=timing.waiting_retry.total_seconds() if link_down(err) is not None else None)


def _put_back_by_reconcile(report: Report, drifted: Mapping[str, str]) -> int:
    """The drifted files the reconcile rewrote, each logged as drift put back; how many."""
    put_back = 0
    with log_context(reconcile=report.reconcile_id):
        for module, how in sorted(drifted.items()):
            if module in report.modules and report.modules[module].written:
                _drift_put_back(report.node, module, how, report.modules[module].applied.file)
                put_back += 1
    return put_back


def _again_if_refused(
    report: Report, backoff: Backoff, tg: TaskGroup, trigger: Trigger, waiting_retry: timedelta
) -> None:
    """A bucket that refused writes (full) is asked again after a backoff: nothing else would wake
    the loop when it has room again; writes that wait for the hub, after at most `waiting_retry`."""
    if not report.refused and not report.waiting:
        backoff.reset()
        return
    if not report.refused:
        delay = backoff.next(cap=waiting_retry.total_seconds())
        log.debug("node %s: writes wait for the hub; reconciling again in %.1f s", report.node, delay)
        tg.start_soon(_pull_after, trigger, delay, "retry of writes waiting for the hub")
        return
    delay = backoff.next()
    refused_by = ", ".join(sorted(report.refused))
    log.info(
        "node %s: writes refused by %s; reconciling again in %.1f s",
        report.node,
        refused_by,
        delay,
        extra=event(reconcile=report.reconcile_id),
    )
    tg.start_soon(_pull_after, trigger, delay, "retry of refused writes")


async def _pull_after(trigger: Trigger, delay: float, reason: str) -> None:
    await anyio.sleep(delay)
    trigger.pull(reason)


class Backoff:
    """Delays doubling from 0.5 s up to `limit`, until reset."""

    def __init__(self, limit: timedelta) -> None:
        self._limit = limit.total_seconds()
        self._delay = 0.5

    def next(self, cap: float | None = None) -> float:
        """The next delay; `cap` (writes waiting for the hub, retried every `waiting_retry`) bounds it
        and how far the delays grow, so that the first other failure after a long cut link is
        retried within a few seconds, not after the delay the cut's retries would have doubled to."""
        limit = self._limit if cap is None else min(cap, self._limit)
        delay, self._delay = min(self._delay, limit), min(self._delay * 2, limit)
        return delay

    def reset(self) -> None:
        self._delay = 0.5


def _log_report(report: Report) -> None:
    pending = sorted(m for m, r in report.modules.items() if r.applied.state == "pending")
    written = sorted(m for m, r in report.modules.items() if r.written)
    if written or pending or any(report.writes.values()) or report.removed:
        log.info(
            "node %s reconciled: %d modules, written %s, pending %s",
            report.node,
            len(report.modules),
            ", ".join(written) or "none",
            ", ".join(pending) or "none",
            extra=event(reconcile=report.reconcile_id),
        )


async def _put_back(
    bus: Bus, plan: ClientPlan, drift: DriftWatch, drifted: Mapping[str, str], applied: Mapping[str, AppliedValue]
) -> bool:
    """Puts each drifted file back from what is applied; False when one needs a full reconcile."""
    for module, how in sorted(drifted.items()):
        record = applied.get(module)
        if record is None or record.digest is None:
            return _needs_reconcile(plan.node, module, how)
        if not await put_back(bus, plan, module, record.digest, observer=drift):
            return _needs_reconcile(plan.node, module, how)
        _drift_put_back(plan.node, module, how, record.file)
    return True


def _needs_reconcile(node: str, module: str, how: str) -> bool:
    log.info(
        "the env file of module %s was %s; its values or manifest changed since it was applied: reconciling",
        module,
        how,
        extra=event(node=node, module=module),
    )
    return False


def _drift_put_back(node: str, module: str, how: str, file: str | None) -> None:
    log.warning(
        "drift put back: %s of module %s had been %s",
        file,
        module,
        how,
        extra=event(node=node, module=module, path=file or ""),
    )


async def _poll_drift(drift: DriftWatch, trigger: Trigger, every: timedelta) -> None:
    said = ""  # what stands in the way is said once, not at every poll, until it changes or clears
    while True:
        await anyio.sleep(every.total_seconds())
        try:
            found = drift.drifted()
        except ClientError as err:  # the digest key cannot be read: the next reconcile says so too
            if str(err) != said:
                log.warning("cannot look at the env files for drift: %s", err)
                said = str(err)
            continue
        said = ""
        for module, how in found.items():
            trigger.drifted(module, how)


def manifests_fingerprint(folder: Path) -> tuple[tuple[str, int, int, int], ...]:
    found = []
    for path in manifest_files(folder) if folder.is_dir() else []:
        try:
            status = path.stat()
        except OSError:
            continue
        found.append((path.name, status.st_ino, status.st_mtime_ns, status.st_size))
    return tuple(found)


async def _poll_manifests(folder: Path, trigger: Trigger, every: timedelta) -> None:
    seen = manifests_fingerprint(folder)
    while True:
        await anyio.sleep(every.total_seconds())
        now = manifests_fingerprint(folder)
        if now != seen:
            seen = now
            trigger.pull("manifests changed")


def _notice_bus_changes(tg: TaskGroup, bus: Bus, plan: ClientPlan, trigger: Trigger, every: timedelta) -> None:
    """A reconcile after each reconnect, and after the bus is found to have gone back (checked
    every `every`, whether or not a reconnect was seen)."""
    tg.start_soon(_resync_on_reconnect, bus, trigger)
    tg.start_soon(check_for_rollback, bus, plan.materialize, plan.node, trigger.pull, every)


async def _resync_on_reconnect(bus: Bus, trigger: Trigger) -> None:
    """Live updates are at-most-once: what was written while the connection was away is re-read."""
    seen = bus.reconnects
    while True:
        seen = await bus.reconnected(seen)
        trigger.reconnected()


async def _refresh(trigger: Trigger, every: timedelta) -> None:
    while True:
        await anyio.sleep(every.total_seconds())
        trigger.pull("refresh of verb-answered values")
