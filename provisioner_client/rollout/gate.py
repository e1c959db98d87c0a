"""The reconcile's one door to rollouts: whether a module's change may be applied now, and the
claim that change runs under, seen through to the end.

A reconcile makes one `RolloutGate`. Before deciding what to resolve, `prepare` keeps the claims
the node left standing (deletes a succeeded one it could not delete before, renews a failed one,
deletes it once an operator resumed the rollout) and names the modules an abort rolls back. For
each module whose env file would change (or whose change action has not run for its content),
`admit` answers:

- the module's first env file on this node: go (nothing runs from it yet to restart);
- no budget: go (after the splay and quiet period the module asks for, `pacing`);
- the rollout held: pending, `rollout: paused ...` / `rollout: aborted ...`;
- otherwise the node writes (or renews, keeping its place) its claim `waiting`, reads every live
  claim of the module, and goes only while its own is among the first slots
  (`admission`), writing it `running`; else pending, `rollout: waiting for a slot ...`;
- the fleet bucket unreadable or unwritable: pending, `rollout: coordination unreachable ...`, for
  at most the client's `rollout_wait_limit`, then the fallback `rollout_unreachable`: `proceed`
  (applied without a slot, said in the record and the log) or `hold` (pending until it is back).

A change admitted under a claim is seen through by `run_under_claim`: the env file it replaces kept
as the last good one, the action started (remembered on disk first), the claim renewed while the
action and the health command run, then deleted (success) or written `failed` (kept: a failure
uses its slot up until an operator resumes). What the gate knows after the reconcile
(`RolloutReport`) tells watch mode which modules it waits on and when to look again.

What the node remembers of its rollouts, in the materialize folder, across restarts of the
client and of nats-server: the node's record `state.records.ROLLOUT` holds, per module, the
change it is on and its claim's place in the queue, and whether that change's action started and
how it ended. A change's action runs at most once: the record says "started" (on disk) before the
action starts, so a client killed while it ran, or a reconcile whose later writes failed
(nats-server restarted), never runs it again.

The env file a change replaced is kept beside it (`state.records.keep_last_good`, mode 0600: it
holds what the env file held, secrets included), so that an aborted rollout can put it back where
the module allows (`"rollout": {"rollback": true}`).

The node's side of the fleet bucket: its own claims, written, renewed and deleted, and the
claims and holds of the others, read.

Every write is conditional on the revision the node read or last wrote (its own key alone: its
grants let it write `claim.*.<node>` and nothing else), and every read is a batch direct get (a
node has no JetStream API besides direct gets). A write that lost to a write of its own stored
late (a renewal the bus did not answer in time) is done again from the revision read back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import anyio

from provisioner_client.errors import MaterializeError
from provisioner_client.resolving.manifest import LoadedManifest, Manifest
from provisioner_client.resolving.own import say_lost
from provisioner_client.rollout import admission, pacing
from provisioner_client.rollout.budget import Budget, RolloutPlan
from provisioner_client.state import records
from provisioner_client.state.records import ModuleRollout, RolloutRecord
from registry.contract import ActionRecord, fleet, to_json
from registry.errors import BusError, KeyShapeError, WrongLastSequence, sole_exception
from registry.runtime import event
from registry.wire import Bus, KvItem, TooManyKeys, delete, get_direct, get_last_many, get_latest_paged, update

FLEET = fleet.FLEET
ClaimState = Literal["waiting", "running", "failed"]


class Claims:
    """Node `node`'s claims, and what it reads of the fleet bucket."""

    def __init__(self, bus: Bus, node: str, ttl: timedelta) -> None:
        self.bus = bus
        self.node = node
        self.ttl = ttl

    async def holds(self) -> dict[str, fleet.Hold]:
        """Every module's hold, by module (one read of `rollout.>`)."""
        found = {}
        for item in await _latest(self.bus, f"{fleet.ROLLOUT}.>"):
            module = _module_of(item.key)
            if not item.deleted and module is not None:  # an unreadable hold holds, as every view shows it
                found[module] = fleet.read_hold(item.value, item.stored_at)
        return found

    async def of_module(self, module: str) -> list[KvItem]:
        """Every node's claim of `module` as it stands (deleted ones included)."""
        return await _latest(self.bus, fleet.claims_of(module))

    def own(self, items: Sequence[KvItem], module: str) -> KvItem | None:
        key = fleet.claim_key(module, self.node)
        return next((item for item in items if item.key == key), None)

    async def write(
        self, module: str, *, state: ClaimState, change: str, queued: int, last: int | None, reason: str = ""
    ) -> int:
        """Writes the node's claim of `module`; its revision. `last`: the revision it stands at, if known."""
        claim = fleet.Claim(
            state=state,
            change=change,
            since=datetime.now(UTC),
            ttl_seconds=self.ttl.total_seconds(),
            reason=reason[:1024],
            queued=queued,
        )
        key = fleet.claim_key(module, self.node)
        if last is None:
            last = await self._revision_of(key)
        try:
            return await update(self.bus, FLEET, key, to_json(claim), last=last)
        except WrongLastSequence:
            return await update(self.bus, FLEET, key, to_json(claim), last=await self._revision_of(key))

    async def current(self, module: str) -> KvItem | None:
        """The node's own claim of `module` as it stands (a delete marker included), None if never written."""
        return await get_direct(self.bus, FLEET, fleet.claim_key(module, self.node))

    async def remove(self, module: str) -> None:
        """Deletes the node's claim of `module`, if it stands: its slot is free."""
        key = fleet.claim_key(module, self.node)
        current = await get_direct(self.bus, FLEET, key)
        if current is None or current.deleted:
            return
        try:
            await delete(self.bus, FLEET, key, last=current.revision)
        except WrongLastSequence:
            again = await get_direct(self.bus, FLEET, key)
            if again is not None and not again.deleted:
                await delete(self.bus, FLEET, key, last=again.revision)

    async def _revision_of(self, key: str) -> int:
        current = await get_direct(self.bus, FLEET, key)
        return current.revision if current is not None else 0


async def _latest(bus: Bus, subject_filter: str) -> list[KvItem]:
    """The keys under `subject_filter` as they stand: one batch read, or paged past its 1,024 keys
    (a deleted claim's marker stays: every node that ever claimed a module has a key of it)."""
    try:
        return await get_last_many(bus, FLEET, subject_filter)
    except TooManyKeys:
        return await get_latest_paged(bus, FLEET, subject_filter)


def _module_of(key: str) -> str | None:
    """The module a hold's key names; None for a key of no shape (an operator's grant takes any one
    token: a literal `*`, a non-canonical escape), which is no module's hold."""
    try:
        return fleet.parse_fleet_key(key).module
    except KeyShapeError:
        return None


log = logging.getLogger(__name__)

RECORD = records.ROLLOUT.name


class RolloutState:
    """The rollout record of the materialize folder: read once, written on every change of it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._record: RolloutRecord | None = None

    @property
    def modules(self) -> dict[str, ModuleRollout]:
        if self._record is None:
            self._record = self._read()
        return self._record.modules

    def get(self, module: str) -> ModuleRollout | None:
        return self.modules.get(module)

    def put(self, module: str, value: ModuleRollout) -> None:
        """Keeps `value` as the module's, on disk before this returns."""
        self.modules[module] = value
        self._write()

    def forget(self, module: str) -> None:
        if self.modules.pop(module, None) is not None:
            self._write()
        records.forget_last_good(self.folder, module)

    def keep_last_good(self, module: str, content: bytes) -> None:
        records.keep_last_good(self.folder, module, content)

    def last_good(self, module: str) -> bytes | None:
        return records.last_good(self.folder, module)

    def _read(self) -> RolloutRecord:
        try:
            found = records.ROLLOUT.read(self.folder)
        except MaterializeError as err:  # unreadable: started afresh, said (a change may then run twice)
            log.warning("%s; the rollouts are remembered afresh", err)
            return RolloutRecord()
        return found or RolloutRecord()

    def _write(self) -> None:
        assert self._record is not None
        records.ROLLOUT.write(self.folder, self._record)


# The words a pending reason starts with, by the class the seat and `query` read it in.
WAITING = fleet.ROLLOUT_REASONS["rollout_waiting"]
PAUSED = fleet.ROLLOUT_REASONS["rollout_paused"]
ABORTED = fleet.ROLLOUT_REASONS["rollout_aborted"]
UNREACHABLE = fleet.ROLLOUT_REASONS["rollout_unreachable"]


@dataclass(frozen=True)
class Admission:
    """`go`: apply the change now; `claimed`: under a claim (see it through with `run_under_claim`);
    `reasons`: why not (pending), or what to say of a change applied without a slot."""

    go: bool
    claimed: bool = False
    reasons: tuple[str, ...] = ()


GO = Admission(go=True)


@dataclass
class RolloutReport:
    """After a reconcile: the modules the node waits on (their claims, holds or timers), and in
    how many seconds it should look again (renew a claim, a splay or quiet period ends, the wait
    for the coordination runs out); None: nothing to look at."""

    waiting: set[str] = field(default_factory=set)
    wake_after: float | None = None
    ran_under_claim: list[str] = field(default_factory=list)

    def wake_within(self, seconds: float) -> None:
        self.wake_after = seconds if self.wake_after is None else min(self.wake_after, seconds)


class RolloutGate:
    def __init__(self, claims: Claims, folder: Path, plan: RolloutPlan) -> None:
        self.claims = claims
        self.plan = plan
        self.state = RolloutState(folder)
        self.report = RolloutReport()
        self._holds: dict[str, fleet.Hold] | None = None
        self._unreachable: str | None = None
        self._asked: set[str] = set()

    @property
    def node(self) -> str:
        return self.claims.node

    # --- before the modules are resolved -------------------------------------------------------

    async def prepare(self, modules: Mapping[str, LoadedManifest]) -> set[str]:
        """Keeps the claims left standing; the modules to resolve whatever the memory says (an
        abort to roll back, a claim to see to)."""
        records = dict(self.state.modules)
        for module in sorted(set(records) - set(modules)):
            await self._let_go(module, records[module])
        outstanding = {
            m: r for m, r in records.items() if m in modules and (r.claimed or self._rolls_back(r, modules[m].manifest))
        }
        if not outstanding:
            return set()
        holds = await self._read_holds()
        forced = set()
        for module, record in sorted(outstanding.items()):
            forced |= await self._keep(module, record, holds.get(module), modules[module].manifest)
        return forced

    async def _keep(self, module: str, record: ModuleRollout, hold: fleet.Hold | None, manifest: Manifest) -> set[str]:
        if record.stage == "running" and record.started:  # the client stopped while it ran: never again
            action = record.action or _interrupted(record)
            interrupted = {"stage": "failed", "action": action, "reason": "interrupted", "renewed_at": None}
            record = record.model_copy(update=interrupted)  # its claim written failed at once, below
            self.state.put(module, record)
        if record.claimed and record.stage in ("waiting", "running", "failed"):
            await self._quietly(module, self._restore_if_lost(module, record))
            record = self.state.get(module) or record
        if record.stage == "done" and record.claimed:
            await self._quietly(module, self._free(module, record))
        elif record.stage == "failed" and record.claimed:
            await self._quietly(module, self._keep_failed(module, record, hold))
        record = self.state.get(module) or record
        if hold is not None and hold.state == "aborted" and self._rolls_back(record, manifest):
            return {module}
        if record.claimed or self._unreachable:
            self.report.waiting.add(module)
            self.report.wake_within(self._renew_every)
        return {module} if record.stage in ("waiting", "running") and record.claimed else set()

    async def _restore_if_lost(self, module: str, record: ModuleRollout) -> None:
        """Writes the node's claim again, once, when the bus lost it: found below the revision the
        node last wrote, or gone (a server's store rolled back to an earlier prefix)."""
        if not record.revision:
            return
        own = await self.claims.current(module)
        found = own.revision if own is not None else 0
        if found >= record.revision:  # as written, or written since (a delete by the seat included)
            return
        state: ClaimState = record.stage if record.stage in ("failed", "running") else "waiting"
        await self._renew(module, record, state, force=True)
        restored = f"its {state} claim of module {module} written again"
        say_lost(self.node, f"claim of module {module}", record.revision, found, restored)

    async def _keep_failed(self, module: str, record: ModuleRollout, hold: fleet.Hold | None) -> None:
        if hold is not None:
            if not record.saw_hold:
                self.state.put(module, record := record.model_copy(update={"saw_hold": True}))
            await self._renew(module, record, "failed")
        elif record.saw_hold:  # resumed: the slot is freed, the record stays failed until the next change
            await self.claims.remove(module)
            self.state.put(module, record.model_copy(update={"stage": "resumed", "claimed": False, "saw_hold": False}))
            log.info("rollout of module %s resumed: the failed claim of node %s deleted", module, self.node)
        else:
            await self._renew(module, record, "failed")

    async def _free(self, module: str, record: ModuleRollout) -> None:
        await self.claims.remove(module)
        self.state.put(module, record.model_copy(update={"claimed": False}))

    async def _let_go(self, module: str, record: ModuleRollout) -> None:
        """A module no longer declared: its claim deleted, its record forgotten."""
        if record.claimed:
            try:
                await self.claims.remove(module)
            except BusError as err:
                log.warning("claim of module %s not deleted: %s; it expires", module, err)
        self.state.forget(module)

    # --- one module's change -------------------------------------------------------------------

    def rollback_due(self, module: str, manifest: Manifest) -> bytes | None:
        """The last good env file to put back, when the module's rollout is aborted and this node
        changed it under a claim (and the module can be rolled back)."""
        hold = (self._holds or {}).get(module)
        record = self.state.get(module)
        if hold is None or hold.state != "aborted" or record is None or not self._rolls_back(record, manifest):
            return None
        return self.state.last_good(module)

    def rolled_back(self, module: str) -> str:
        record = self.state.get(module) or ModuleRollout()
        undone = {"rolled_back": True, "under_claim": False, "started": False, "action": None, "digest": ""}
        self.state.put(module, record.model_copy(update=undone))  # the change applied again later runs again
        hold = (self._holds or {}).get(module)
        by = hold.by if hold is not None else "an operator"
        log.warning(
            "rollout of module %s aborted by %s: node %s rolled back to the last good env file", module, by, self.node
        )
        return f"{ABORTED} by {by}: rolled back to the last good env file"

    def ran(self, module: str, digest: str) -> ActionRecord | None:
        """The outcome of the change action run for `digest` under a claim, if it ran (or started)."""
        record = self.state.get(module)
        if record is None or record.digest != digest or not record.started:
            return None
        return record.action or _interrupted(record)

    async def admit(self, module: str, manifest: Manifest, digest: str, *, first: bool) -> Admission:
        """Whether the module's change to `digest` may be applied now (see the module's docstring)."""
        if first:
            return GO
        budget = self.plan.budget_of(manifest)
        if budget is None:
            return self._paced(module, manifest, digest)
        self._asked.add(module)
        change = _change_of(digest)
        record = self._for_change(module, change, digest)
        try:
            holds = await self._read_holds()
            if self._unreachable is not None:
                return self._unreachable_now(module, record, self._unreachable)
            hold = holds.get(module)
            if hold is not None:
                return await self._held(module, record, hold)
            return await self._queue(module, record, budget)
        except BusError as err:
            return self._unreachable_now(module, record, err.reason)

    def _for_change(self, module: str, change: str, digest: str) -> ModuleRollout:
        record = self.state.get(module) or ModuleRollout()
        if record.change == change:  # the same change again: its place kept while its claim stands
            return record if record.claimed else record.model_copy(update={"queued": 0})
        keeps_place = record.claimed and record.stage in ("waiting", "failed")
        return ModuleRollout(
            change=change,
            digest=digest,
            queued=record.queued if keeps_place else 0,
            claimed=record.claimed,
            unreachable_since=record.unreachable_since,
        )

    async def _held(self, module: str, record: ModuleRollout, hold: fleet.Hold) -> Admission:
        if record.claimed:
            await self._renew(module, record, "waiting")
        self.report.waiting.add(module)
        said = f"{PAUSED if hold.state == 'paused' else ABORTED} by {hold.by}"
        whose = f" after the change of node {hold.node} failed" if hold.node else ""
        why = f": {hold.reason}" if hold.reason else ""
        return Admission(go=False, reasons=(f"{said}{whose}{why}",))

    async def _queue(self, module: str, record: ModuleRollout, budget: Budget) -> Admission:
        items = await self.claims.of_module(module)
        if record.unreachable_since is not None:  # reached again: a later outage is waited for afresh
            self.state.put(module, record := record.model_copy(update={"unreachable_since": None}))
        own = self.claims.own(items, module)
        if record.queued and not _stands(own, datetime.now(UTC)):
            # its claim died (not renewed within its ttl: the client stopped, or ran one-shot):
            # while it was dead others were admitted past it, so it queues again at the end
            self.state.put(module, record := record.model_copy(update={"queued": 0}))
        if _renewal_due(own, record, self._renew_every):
            revision = await self.claims.write(
                module, state="waiting", change=record.change, queued=record.queued, last=_revision(own)
            )
            record = record.model_copy(
                update={
                    "queued": record.queued or revision,
                    "revision": revision,
                    "claimed": True,
                    "stage": "waiting",
                    "renewed_at": datetime.now(UTC),
                    "unreachable_since": None,
                }
            )
            self.state.put(module, record)
            items = await self.claims.of_module(module)  # everyone queued before it is stored by now
        live = admission.live_claims(items, datetime.now(UTC))
        if not any(claim.node == self.node for claim in live):  # a replica behind its own write
            mine = fleet.Claim(
                state="waiting", change=record.change, since=datetime.now(UTC), ttl_seconds=1, queued=record.queued
            )
            live = sorted([*live, admission.LiveClaim(self.node, mine, record.queued)], key=lambda c: c.position)
        verdict = admission.verdict(live, self.node, budget)
        if not verdict.admitted:
            self.report.waiting.add(module)
            self.report.wake_within(self._renew_every)
            return Admission(go=False, reasons=(f"{WAITING} (budget {budget}): {verdict.describe()}",))
        revision = await self.claims.write(
            module, state="running", change=record.change, queued=record.queued, last=None
        )
        running = {"stage": "running", "revision": revision, "renewed_at": datetime.now(UTC)}
        self.state.put(module, record.model_copy(update=running))
        log.info("node %s: rollout of module %s %s", self.node, module, verdict.describe(), extra=event(module=module))
        return Admission(go=True, claimed=True)

    def _unreachable_now(self, module: str, record: ModuleRollout, why: str) -> Admission:
        now = datetime.now(UTC)
        since = record.unreachable_since or now
        self.state.put(module, record.model_copy(update={"unreachable_since": since}))
        waited = now - since
        limit = self.plan.wait_limit
        if waited < limit:
            left = (limit - waited).total_seconds()
            self.report.waiting.add(module)
            self.report.wake_within(left)
            then = "applied without a slot" if self.plan.unreachable == "proceed" else "held"
            reason = f"{UNREACHABLE}: {why}; waiting {left:.0f} s more, then {then} (rollout_unreachable)"
            return Admission(go=False, reasons=(reason,))
        if self.plan.unreachable == "hold":
            self.report.waiting.add(module)
            self.report.wake_within(self._renew_every)
            return Admission(go=False, reasons=(f"{UNREACHABLE}: {why}; held (rollout_unreachable = hold)",))
        waited_for = f"{waited.total_seconds():.0f} s"
        said = f"{UNREACHABLE} for {waited_for}: {why}; applied without a slot (rollout_unreachable = proceed)"
        log.warning("node %s: module %s: %s", self.node, module, said, extra=event(module=module))
        self.state.put(module, record.model_copy(update={"unreachable_since": None}))  # the next change waits again
        return Admission(go=True, reasons=(said,))

    def _paced(self, module: str, manifest: Manifest, digest: str) -> Admission:
        rollout = manifest.rollout
        if rollout is None or not (rollout.splay_seconds or rollout.wait_seconds):
            return GO
        self._asked.add(module)
        now = datetime.now(UTC)
        record = pacing.paced(self.state.get(module) or ModuleRollout(), rollout, _change_of(digest), now)
        if record != self.state.get(module):
            self.state.put(module, record)
        due = pacing.due_at(record, rollout)
        if due <= now:
            if not record.pacing_applied:
                self.state.put(module, record.model_copy(update={"pacing_applied": True}))
            return GO
        left = (due - now).total_seconds()
        self.report.waiting.add(module)
        self.report.wake_within(left)
        return Admission(go=False, reasons=(f"{WAITING}: splay and quiet period, due in {left:.1f} s",))

    async def run_under_claim(
        self,
        module: str,
        digest: str,
        *,
        replaced: bytes | None,
        action: Callable[[], Awaitable[ActionRecord]] | None,
        health: Callable[[], Awaitable[str | None]],
    ) -> tuple[ActionRecord | None, str | None]:
        """The admitted change seen through: `replaced` kept as the last good env file, the action
        (if one is due) run once, remembered as started first, then the health command; the claim
        renewed while they run, then freed or failed. The action's record and why the health check
        failed, if it did."""
        if replaced is not None:
            self.state.keep_last_good(module, replaced)
        started = action is not None
        update = {"digest": digest, "started": started, "action": None, "under_claim": True, "rolled_back": False}
        record = (self.state.get(module) or ModuleRollout()).model_copy(update=update)
        self.state.put(module, record)
        done: ActionRecord | None = None
        async with self._renewing(module, record):
            if action is not None:
                done = await action()
                self.state.put(module, record := record.model_copy(update={"action": done}))
            problem = await health() if done is None or done.ok else None
        failure = problem or (f"the change action {done.outcome}" if done is not None and not done.ok else None)
        self.report.ran_under_claim.append(module)
        if failure is None:
            record = record.model_copy(update={"stage": "done"})
            self.state.put(module, record)
            await self._quietly(module, self._free(module, record))
        else:
            record = record.model_copy(update={"stage": "failed", "reason": failure, "saw_hold": False})
            self.state.put(module, record)
            await self._quietly(module, self._renew(module, record, "failed", force=True))
            log.warning("node %s: change of module %s failed under its claim: %s", self.node, module, failure)
        return done, problem

    @asynccontextmanager
    async def _renewing(self, module: str, record: ModuleRollout) -> AsyncIterator[None]:
        async def renew_while_running() -> None:
            while True:
                await anyio.sleep(self._renew_every)
                await self._quietly(module, self._renew(module, record, "running", force=True))

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(renew_while_running)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise sole_exception(group) from None  # as itself: the watch loop tells errors by their class

    async def _renew(self, module: str, record: ModuleRollout, state: ClaimState, *, force: bool = False) -> None:
        now = datetime.now(UTC)
        if (
            not force
            and record.renewed_at is not None
            and now - record.renewed_at < timedelta(seconds=self._renew_every)
        ):
            return
        own = await self.claims.current(module)
        queued = record.queued if _stands(own, now) else 0  # a dead claim's place is gone: the seat deletes it
        revision = await self.claims.write(
            module, state=state, change=record.change, queued=queued, last=_revision(own), reason=record.reason
        )
        current = self.state.get(module) or record  # an action's outcome recorded meanwhile is kept
        renewed = {"renewed_at": now, "claimed": True, "queued": queued or revision, "revision": revision}
        self.state.put(module, current.model_copy(update=renewed))

    async def _quietly(self, module: str, step: Awaitable[None]) -> None:
        """A claim's write that may fail for the moment: the next reconcile does it again."""
        try:
            await step
        except BusError as err:
            log.warning("node %s: claim of module %s not written for now: %s", self.node, module, err.reason)
            self.report.waiting.add(module)
            self.report.wake_within(1.0)

    # --- after the modules -----------------------------------------------------------------------

    async def finish(self) -> RolloutReport:
        """Withdraws the claims of changes that went away before they ran; the report."""
        for module, record in sorted(self.state.modules.items()):
            if module in self._asked:
                continue
            if record.unreachable_since is not None:  # the change it waited for went away: a later outage waits afresh
                self.state.put(module, record := record.model_copy(update={"unreachable_since": None}))
            if record.stage == "waiting" and record.claimed:
                await self._quietly(module, self._withdraw(module, record))
            elif record.pacing_change and not record.claimed:
                self.state.put(module, record.model_copy(update={"pacing_change": "", "burst_since": None}))
        return self.report

    async def _withdraw(self, module: str, record: ModuleRollout) -> None:
        await self.claims.remove(module)
        self.state.put(module, record.model_copy(update={"stage": "withdrawn", "claimed": False}))

    # --- helpers ---------------------------------------------------------------------------------

    @property
    def _renew_every(self) -> float:
        return self.plan.claim_ttl.total_seconds() / 3

    async def _read_holds(self) -> dict[str, fleet.Hold]:
        if self._holds is None and self._unreachable is None:
            try:
                self._holds = await self.claims.holds()
            except BusError as err:
                self._unreachable = err.reason
                log.warning("node %s: the fleet bucket cannot be read: %s", self.node, err.reason)
        return self._holds or {}

    def _rolls_back(self, record: ModuleRollout, manifest: Manifest) -> bool:
        rollout = manifest.rollout
        return bool(rollout and rollout.rollback and record.under_claim and not record.rolled_back)


def _change_of(digest: str) -> str:
    """The change's name in a claim: a short part of the env file's keyed digest (no value)."""
    return digest.rpartition(":")[2][:32]


def _revision(item: KvItem | None) -> int | None:
    return item.revision if item is not None else 0


def _stands(own: KvItem | None, now: datetime) -> bool:
    """Whether the node's own claim, as read, is live (see `admission.live_claims`)."""
    return own is not None and bool(admission.live_claims([own], now))


def _renewal_due(own: KvItem | None, record: ModuleRollout, every: float) -> bool:
    """Whether the node's claim must be written: none stands, it is another change's or state's,
    or it was written longer ago than a third of its ttl."""
    if own is None or own.deleted or not record.claimed:
        return True
    claim = fleet.read_claim(own.value)
    if claim is None or claim.change != record.change or claim.state != "waiting":
        return True
    return own.stored_at is None or (datetime.now(UTC) - own.stored_at).total_seconds() >= every


def _interrupted(record: ModuleRollout) -> ActionRecord:
    return ActionRecord(
        command=("(interrupted)",),
        digest=record.digest,
        outcome="failed",
        exit_code=None,
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
