"""A module's rollout paused across the fleet when one node's change fails.

Each node changing a module holds a claim of one of its rollout slots in the fleet bucket
(`registry.contract.fleet`): `claim.<module>.<node>`, `waiting`, `running`, then deleted once its
change action and health check succeeded, or `failed` (kept: the failure uses up its slot). The
seat follows the claims and, when one turns `failed`, pauses the module's rollout for the whole
fleet:

    a claim turns failed    claim.<M>.<X> written `failed` for a change it was not failed for
                            before (a renewal of the same failed claim is no new failure)
    X runs M?               placement (`mesh-controller_assignments`) holds `X.M`; with
                            `pause_on_failure = "declared"`, also for a module placement holds
                            for no node at all, X registered needs of M (`X.M.>` in
                            `mesh-provisioner_needs`: the node's own word, so a hostile node can
                            pause any module placement does not know; the default, `placed`,
                            leaves such a module to operators)
    yes: hold               `rollout.<M>` = paused, by `seat`, naming X and why, written
                            create-only: a hold already there (paused by another node's
                            failure, an operator's pause or abort) is left as it is
    no: nothing             a node's grants let it write a claim of any module under its own
                            name: a failure it claims of a module it does not run pauses nothing
                            (logged once), so a hostile node cannot stop another module's rollout

The seat also judges every claim as the bus stored it, since no grant can check a value or refuse
a token (`claim.*.<node>` takes any one module token) and the nodes cannot read placement; a claim
that does not count is deleted (conditional on its revision), logged once per node and module:

    a key of no shape       a literal `*` or `>`, a non-canonical escape (an operator's `rollout.*`
                            too): deleted (the stream denies erasing; the marker is skipped)
    a place not given       `queued` other than the place the seat saw the bus give the standing
                            claim (its first write's revision), or naming one for a claim that
                            did not stand: deleted; claims standing when the seat started are
                            taken at their word for their place
    a module not run        a new claim of a node that placement does not place on the module;
                            for a module placement holds for no node, of a node that registered
                            no needs of it (needs are the node's own word: for a placed module
                            they would let any node take a slot): deleted at the revision
                            judged, a write meanwhile being judged in turn

A claim stands at most `fleet.MAX_CLAIM_TTL` after its last write, whatever ttl it says
(`fleet.live_claims`, every reader's one reading of claims).

The node is the one the key names, which its grants bind to it (`claim.*.<node>`), never a value
it wrote. A claim not renewed within its ttl (by the server's stamp) is dead and pauses nothing: a
seat started later does not pause a module for a failure its node gave up on; it pauses for a
failure still standing, unless held. What the seat keeps is bounded: each claim's last state
(for the turn to failed, and the figures by state: a renewal of a standing failed claim, within
its ttl, is none), at most `MAX_CLAIMS_KEPT`, and each module's
hold; each write is taken in as it is read, and the failures wait to be judged in a queue
bounded per node and in all (`FailuresWaiting`).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError

from registry.access import writing_domains
from registry.contract import Bucket, buckets, fleet, load_catalogue, to_json, under
from registry.errors import BusError, KeyShapeError, WrongLastSequence
from registry.runtime import event
from registry.wire import (
    SKEW,
    Bus,
    KvItem,
    TooManyKeys,
    delete,
    get_last_many,
    get_latest,
    scoped_watch,
    update,
)

log = logging.getLogger(__name__)

PLACEMENT = "placement"  # the catalogue's domain whose bucket says which node runs which module
SEAT_BY = "seat"  # the `by` of a hold the seat writes
MAX_CLAIMS_KEPT = 100_000  # claims whose last state the seat keeps; past it, new ones are not counted
REFUSALS_LOGGED = 4096  # (module, node) refusals remembered so as to be logged once
FAILURES_PER_NODE = 16  # failed claims of one node waiting to be judged
FAILURES_WAITING = 4096  # failed claims waiting to be judged, in all
REASON_KEPT = 1000  # characters of a failure's reason in the hold (a hold's text holds 1024)
ATTEMPTS = 3  # tries of a pause whose reads or write fail on the bus
CLAIM_STATES = ("waiting", "running", "failed", "expired")
HOLD_STATES = ("paused", "aborted")
PAUSE_OUTCOMES = ("paused", "already_held", "not_running", "failed", "dropped")
REFUSALS = ("not_running", "position", "unshaped")  # why the seat deleted a claim or a key


@dataclass(frozen=True, slots=True)
class ClaimSeen:
    """A claim's last write: its state and change, when the server stored it and for how long it
    stands (`fleet.Claim.lifetime`); its place in the queue as the seat judged it."""

    state: str
    change: str
    stored_at: datetime
    ttl: timedelta
    position: int = 0

    def live(self, now: datetime) -> bool:
        return now <= self.stored_at + self.ttl + SKEW

    def shown_state(self, now: datetime) -> str:
        return self.state if self.live(now) else "expired"


@dataclass(frozen=True, slots=True)
class FailedClaim:
    """A claim write to judge: the module, the node its key names, the change, why it says it
    failed; `revision`: the write's. `failed`: it turned failed (to pause for); `new`: a claim that
    did not stand before (to check its node runs the module); `forged`: it names a place in the
    queue the bus did not give it (to delete); `unshaped`: a key of no shape (`module` holds the
    key), which no grant can refuse (a literal `*`, a non-canonical escape: to delete)."""

    module: str
    node: str
    change: str
    reason: str
    revision: int = 0
    failed: bool = True
    new: bool = False
    forged: bool = False
    unshaped: bool = False


class RolloutsSeen:
    """What the seat saw of the fleet's rollouts: each claim's last state and each module's hold,
    and what its pauses came to; read by the metrics (`provisioner.metrics`) at each scrape."""

    def __init__(self, *, max_claims: int = MAX_CLAIMS_KEPT, max_ttl: float = fleet.MAX_CLAIM_TTL) -> None:
        self.max_claims = max_claims
        self.max_ttl = max_ttl
        self.claims: dict[str, ClaimSeen] = {}  # by key
        self.holds: dict[str, str] = {}  # each module's hold state
        self.pauses: Counter[str] = Counter()  # by outcome (PAUSE_OUTCOMES)
        self.refused: Counter[str] = Counter()  # claims deleted, by why (REFUSALS)
        self.unreadable = 0  # fleet writes of no shape or value the contract builds
        self.known_upto = 0  # the writes up to this revision were read as they stood, not each
        self._full_said = False

    def claims_by_state(self, now: datetime | None = None) -> dict[str, int]:
        """The claims kept, by state; `expired`: not renewed within its ttl."""
        now = now or datetime.now(UTC)
        counts = dict.fromkeys(CLAIM_STATES, 0)
        for claim in self.claims.values():
            counts[claim.shown_state(now)] += 1
        return counts

    def holds_by_state(self) -> dict[str, int]:
        counts = dict.fromkeys(HOLD_STATES, 0)
        for state in self.holds.values():
            counts[state] = counts.get(state, 0) + 1
        return counts

    def note(self, item: KvItem, now: datetime | None = None) -> FailedClaim | None:
        """Takes in one write of the fleet bucket; the claim write to judge, if there is one (a
        claim new, turned failed while it stands, or naming a place the bus did not give it)."""
        try:
            key = fleet.parse_fleet_key(item.key)
        except KeyShapeError:
            self.unreadable += 1
            if item.deleted:
                return None
            owner = fleet.claim_owner(item.key) or item.key.partition(".")[0]  # whose share it waits in
            return FailedClaim(item.key, owner, "", "", item.revision, failed=False, unshaped=True)
        if key.kind == fleet.ROLLOUT and key.module is not None:
            self._note_hold(key.module, item)
        elif key.kind == fleet.CLAIM and key.module is not None and key.node is not None:
            return self._note_claim(item, key.module, key.node, now or datetime.now(UTC))
        return None

    def _note_hold(self, module: str, item: KvItem) -> None:
        if item.deleted:
            self.holds.pop(module, None)
            return
        try:
            self.holds[module] = fleet.Hold.model_validate_json(item.value).state
        except ValidationError:
            self.unreadable += 1

    def _note_claim(self, item: KvItem, module: str, node: str, now: datetime) -> FailedClaim | None:
        if item.deleted:
            self.claims.pop(item.key, None)
            return None
        try:
            claim = fleet.Claim.model_validate_json(item.value)
        except ValidationError:
            self.unreadable += 1
            return None
        stored_at = item.stored_at or now
        before = self.claims.get(item.key)
        standing = before is not None and before.live(stored_at)
        if before is not None and standing and claim.queued == before.position:
            position = before.position  # a renewal keeps its place
        elif claim.queued == 0 or item.revision <= self.known_upto:
            position = claim.position(item.revision)  # a first write; or one stored before the seat read
        elif before is None and len(self.claims) >= self.max_claims:
            position = claim.position(item.revision)  # past what the seat keeps: not checked
        else:
            self.claims.pop(item.key, None)
            return FailedClaim(module, node, claim.change, claim.reason, item.revision, failed=False, forged=True)
        seen = ClaimSeen(claim.state, claim.change, stored_at, claim.lifetime(self.max_ttl), position)
        self._keep(item.key, seen)
        live = seen.live(now)
        failed = claim.state == "failed" and not _renewal(before, seen) and live
        new = not standing and live  # a dead claim counts for nothing: nothing to check
        if not (failed or new):
            return None
        return FailedClaim(module, node, claim.change, claim.reason, item.revision, failed=failed, new=new)

    def _keep(self, key: str, seen: ClaimSeen) -> None:
        if key in self.claims or len(self.claims) < self.max_claims:
            self.claims[key] = seen
            return
        if not self._full_said:
            self._full_said = True
            log.warning(
                "rollouts: more than %d claims in the fleet bucket; those past it are not counted, and a failed one "
                "pauses its module at each of its writes",
                self.max_claims,
            )


def _renewal(before: ClaimSeen | None, seen: ClaimSeen) -> bool:
    """Whether `seen` renews the same failure `before` stood for, without a gap: written within
    its ttl, by the server's stamps (a failure that died and is written again is judged again)."""
    if before is None or before.state != "failed" or before.change != seen.change:
        return False
    return before.live(seen.stored_at)


class Placement:
    """Whether a node runs a module: placement says so; with `declared`, also for a module
    placement knows of no node at all, the node registered needs of it."""

    def __init__(self, bucket: Bucket | None, *, declared: bool = False) -> None:
        self.bucket = bucket
        self.declared = declared

    @classmethod
    def of_catalogue(cls, domains_file: Path | None = None, *, declared: bool = False) -> Placement:
        """The placement domain's bucket in the catalogue (`domains_file`'s, else the built-in);
        none when the catalogue writes no placement bucket keyed `<node>.<module>`."""
        bucket = writing_domains(load_catalogue(domains_file)).get(PLACEMENT)
        if bucket is not None and bucket.shape.fields != ("node", "module"):
            bucket = None
        if bucket is None:
            log.warning(
                "rollouts: the catalogue has no placement bucket keyed <node>.<module>: %s",
                "nodes' needs alone say who runs a module" if declared else "no node's failure pauses a rollout",
            )
        return cls(bucket, declared=declared)

    async def runs(self, bus: Bus, node: str, module: str) -> bool:
        """Whether a failure of `node` in `module` pauses its rollout (`counts`, needs only when declared)."""
        return await self._says(bus, node, module, needs=self.declared)

    async def counts(self, bus: Bus, node: str, module: str) -> bool:
        """Whether a claim of `node` for `module` counts: placement says it runs it; for a module
        placement holds for no node, the node registered needs of it. Needs are the node's own word:
        for a placed module they never count, else a node would take a slot by declaring a need."""
        return await self._says(bus, node, module, needs=True)

    async def _says(self, bus: Bus, node: str, module: str, *, needs: bool) -> bool:
        if self.bucket is not None:
            placed = await get_latest(bus, self.bucket, self.bucket.shape.build(node=node, module=module))
            if placed is not None and not placed.deleted:
                return True
            if not needs or await self._knows(bus, module):
                return False
        return needs and await _any_live(bus, buckets.NEEDS, under(node, module))

    async def _knows(self, bus: Bus, module: str) -> bool:
        """Whether placement holds the module for some node; more keys than one read answers: it does."""
        assert self.bucket is not None
        return await _any_live(bus, self.bucket, self.bucket.shape.filters(module=module)[0])


async def _any_live(bus: Bus, bucket: Bucket, subject_filter: str) -> bool:
    try:
        items = await get_last_many(bus, bucket, subject_filter, max_bytes=256 * 1024)
    except TooManyKeys:
        return True
    return any(not item.deleted for item in items)


async def hold_failed_rollouts(
    bus: Bus,
    *,
    placement: Placement | None = None,
    seen: RolloutsSeen | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    pause: bool = True,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Follows the fleet bucket, judges each claim as it is stored (see the module) and, with
    `pause`, pauses a module's rollout when a node running it fails its change, until cancelled.
    `placement`: the built-in catalogue's, unless given; `seen`: where the claims and holds seen
    are kept (the metrics read it).

    Each write is taken in as it is read (`RolloutsSeen.note`, in the connection's reading task:
    about 15 us, so a start over 10,000 claims never falls behind); a claim to judge waits in
    `FailuresWaiting` for the one task that reads placement and writes holds and deletions."""
    placement = placement or Placement.of_catalogue()
    seen = seen if seen is not None else RolloutsSeen()
    seen.known_upto = await _last_revision(bus)
    waiting = FailuresWaiting()

    def take_in(item: KvItem) -> None:
        judged = seen.note(item, clock())
        if judged is not None and not waiting.add(item.key, judged) and judged.failed:
            seen.pauses["dropped"] += 1

    name = f"seat-rollouts-{uuid.uuid4().hex[:12]}"
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(partial(_judge_each, bus, waiting, placement, seen, clock=clock, pause=pause))
        async with scoped_watch(bus, fleet.FLEET, ">", name=name, on_item=take_in):
            task_status.started()
            await anyio.sleep_forever()


async def _last_revision(bus: Bus) -> int:
    """The fleet's last stream sequence: the writes up to it the seat reads as they stand."""
    info = await bus.jetstream(fleet.FLEET.info_api, operation=f"info {fleet.FLEET.name}")
    return int(info.get("state", {}).get("last_seq", 0))


async def _judge_each(
    bus: Bus,
    waiting: FailuresWaiting,
    placement: Placement,
    seen: RolloutsSeen,
    *,
    clock: Callable[[], datetime],
    pause: bool,
) -> None:
    refused = _Refusals()
    while True:
        judged = await waiting.next()
        refusal = await refuse_if_not_counted(bus, judged, placement, refused)
        if refusal is not None:
            seen.refused[refusal] += 1
            if judged.failed:
                seen.pauses["not_running"] += 1
        elif judged.failed and pause:
            seen.pauses[await pause_for(bus, judged, placement, refused, clock)] += 1


async def refuse_if_not_counted(
    bus: Bus, judged: FailedClaim, placement: Placement, refused: _Refusals | None = None
) -> str | None:
    """Deletes a claim that does not count, erases a key of no shape; why (`REFUSALS`), or None
    for a claim that counts. A bus failure is tried `ATTEMPTS` times, then said: the claim stands."""
    refused = refused or _Refusals()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await _refuse_once(bus, judged, placement, refused)
        except BusError as err:
            if attempt == ATTEMPTS:
                log.error(  # noqa: TRY400 (the bus's error says it all: no traceback)
                    "claim %s of node %s not judged: %s", judged.module, judged.node, err
                )
                return None
            await anyio.sleep(attempt)
    raise AssertionError("unreachable")  # pragma: no cover


async def _refuse_once(bus: Bus, judged: FailedClaim, placement: Placement, refused: _Refusals) -> str | None:
    if judged.unshaped:
        await _erase(bus, judged.module)
        if refused.first("", judged.module):
            log.warning(
                "fleet key %r is of no shape the contract builds (a literal wildcard, a non-canonical "
                "escape): deleted, as every such write is",
                judged.module[:200],
            )
        return "unshaped"
    if judged.forged:
        await _delete_claim(bus, judged, at=judged.revision)
        if refused.first(judged.module, f"{judged.node} position"):
            log.warning(
                "node %s's claim of module %s names a place in the queue the bus did not give it: deleted",
                judged.node,
                judged.module,
                extra=event(node=judged.node, module=judged.module),
            )
        return "position"
    if not judged.new or await placement.counts(bus, judged.node, judged.module):
        return None
    if not await _delete_uncounted(bus, judged, placement):
        return None
    if refused.first(judged.module, judged.node):
        log.warning(
            "node %s claims a rollout slot of module %s, which placement (or, for a module placement holds for "
            "no node, its needs) does not say it runs: "
            "its claim is deleted, as every such claim is",
            judged.node,
            judged.module,
            extra=event(node=judged.node, module=judged.module),
        )
    return "not_running"


async def _delete_claim(bus: Bus, judged: FailedClaim, *, at: int) -> None:
    """Deletes `judged`'s claim at revision `at`: a later write is judged on its own."""
    with contextlib.suppress(WrongLastSequence):
        await delete(bus, fleet.FLEET, fleet.claim_key(judged.module, judged.node), last=at)


async def _delete_uncounted(bus: Bus, judged: FailedClaim, placement: Placement) -> bool:
    """Deletes `judged`'s claim at the revision judged not to count; a write made meanwhile is
    judged in turn and deleted at its own revision only if it does not count either (a renewal of
    the claim is no new claim: the watch would not judge it). False when the claim standing counts;
    True when it is deleted, by this seat or another."""
    key = fleet.claim_key(judged.module, judged.node)
    at = judged.revision
    for _ in range(ATTEMPTS):
        try:
            await delete(bus, fleet.FLEET, key, last=at)
        except WrongLastSequence:
            found = await get_latest(bus, fleet.FLEET, key)
            if found is None or found.deleted:
                return True
            if await placement.counts(bus, judged.node, judged.module):
                return False
            at = found.revision
            continue
        return True
    raise BusError(f"delete {key}", f"written again {ATTEMPTS} times while it was deleted")


async def _erase(bus: Bus, key: str) -> None:
    """Deletes `key`, of no shape (the fleet's stream denies erasing a message: a delete marker
    stays, which every reader skips). Whatever it holds: no revision of such a key is valid, and a
    key holding `*` cannot be deleted at a revision, nats-server judging the expected last sequence
    of every subject the token matches (a later claim of the same node would refuse the delete)."""
    await delete(bus, fleet.FLEET, key, last=None)


class FailuresWaiting:
    """Failed claims waiting to be judged, in the order read, at most `per_node` of one node (a
    node writing failures under many module names fills its own share, never another's) and
    `most` in all; one waiting per claim key (a later write of the same key takes its place).
    Taken node by node in turn."""

    def __init__(self, *, per_node: int = FAILURES_PER_NODE, most: int = FAILURES_WAITING) -> None:
        self.per_node = per_node
        self.most = most
        self._by_node: dict[str, dict[str, FailedClaim]] = {}
        self._count = 0
        self._added: anyio.Event | None = None  # set by the next add: made by the waiting `next`
        self._dropped_said: set[str] = set()

    def __len__(self) -> int:
        return self._count

    def add(self, key: str, failed: FailedClaim) -> bool:
        """Queues `failed` (the claim at `key`); False when its node's share or the whole is taken."""
        own = self._by_node.get(failed.node, {})
        if key not in own and (len(own) >= self.per_node or self._count >= self.most):
            self._say_dropped(failed)
            return False
        self._count += key not in own
        own[key] = failed
        self._by_node[failed.node] = own
        if self._added is not None:
            self._added.set()
        return True

    async def next(self) -> FailedClaim:
        """The first failure of the node first in turn; waits for one."""
        while not self._count:
            self._added = anyio.Event()
            await self._added.wait()
        node, own = next(iter(self._by_node.items()))
        key = next(iter(own))
        failed = own.pop(key)
        del self._by_node[node]
        if own:
            self._by_node[node] = own  # its next one after the other nodes' turn
        self._count -= 1
        return failed

    def _say_dropped(self, failed: FailedClaim) -> None:
        if failed.node in self._dropped_said or len(self._dropped_said) >= REFUSALS_LOGGED:
            return
        self._dropped_said.add(failed.node)
        log.error(
            "node %s: more failed claims waiting than the seat keeps (%d of one node, %d in all); "
            "that of module %s is not judged: its rollout is not paused for it",
            failed.node,
            self.per_node,
            self.most,
            failed.module,
            extra=event(node=failed.node, module=failed.module),
        )


async def pause_for(
    bus: Bus,
    failed: FailedClaim,
    placement: Placement,
    refused: _Refusals | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> str:
    """Pauses `failed.module`'s rollout for its node's failure if that node runs it; the outcome
    (`PAUSE_OUTCOMES`). A bus failure is tried `ATTEMPTS` times, then said and given up."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await _pause_once(bus, failed, placement, refused or _Refusals(), clock)
        except BusError as err:
            if attempt == ATTEMPTS:
                log.error(  # noqa: TRY400 (the bus's error says it all: no traceback)
                    "rollout of %s NOT paused for node %s's failure: %s",
                    failed.module,
                    failed.node,
                    err,
                    extra=event(node=failed.node, module=failed.module),
                )
                return "failed"
            await anyio.sleep(attempt)
    raise AssertionError("unreachable")  # pragma: no cover


async def _pause_once(
    bus: Bus, failed: FailedClaim, placement: Placement, refused: _Refusals, clock: Callable[[], datetime]
) -> str:
    if not await placement.runs(bus, failed.node, failed.module):
        if refused.first(failed.module, failed.node):
            log.warning(
                "node %s claims a failed change of module %s, which placement does not say it runs: its "
                "rollout is not paused (an operator may: mesh-provisioner rollout pause)",
                failed.node,
                failed.module,
                extra=event(node=failed.node, module=failed.module),
            )
        return "not_running"
    reason = fleet.copied_reason(f"change {failed.change} failed: {failed.reason}", REASON_KEPT)
    hold = fleet.Hold(state="paused", since=clock(), by=SEAT_BY, reason=reason, node=failed.node)
    current = await hold_if_none(bus, failed.module, hold)
    if current is not None:
        log.info(
            "node %s's change of %s failed; its rollout is %s already (by %s)",
            failed.node,
            failed.module,
            current.state,
            current.by,
            extra=event(node=failed.node, module=failed.module),
        )
        return "already_held"
    log.warning(
        "rollout of %s paused: node %s's %s; `mesh-provisioner rollout resume %s` or `abort` decides",
        failed.module,
        failed.node,
        reason,
        failed.module,
        extra=event(node=failed.node, module=failed.module),
    )
    return "paused"


async def hold_if_none(bus: Bus, module: str, hold: fleet.Hold) -> fleet.Hold | None:
    """Writes `hold` as `module`'s rollout hold unless one is there (create-only: a write racing
    another's loses); None once written, else the hold found (an unreadable one: as found, paused)."""
    return await write_hold_unless(bus, module, lambda before: hold if before is None else None)


async def write_hold_unless(
    bus: Bus, module: str, decide: Callable[[fleet.Hold | None], fleet.Hold | None]
) -> fleet.Hold | None:
    """Writes the hold `decide` makes of the one standing (None: none stands), conditional on the
    revision read, unless it makes none; the hold that stood before. A write racing another's is
    read and decided again, `ATTEMPTS` times at most."""
    key = fleet.hold_key(module)
    for _ in range(ATTEMPTS):
        found = await get_latest(bus, fleet.FLEET, key)
        before = fleet.read_hold(found.value, found.stored_at) if found is not None and not found.deleted else None
        hold = decide(before)
        if hold is None:
            return before
        try:
            await update(bus, fleet.FLEET, key, to_json(hold), last=found.revision if found else 0)
        except WrongLastSequence:
            continue  # written meanwhile: read what it is now
        return before
    raise BusError(f"hold {key}", f"written by others {ATTEMPTS} times while this write was tried; try again")


class _Refusals:
    """The (module, node) pairs whose refusal was logged, at most `REFUSALS_LOGGED` (then forgotten)."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()

    def first(self, module: str, node: str) -> bool:
        if (module, node) in self._logged:
            return False
        if len(self._logged) >= REFUSALS_LOGGED:
            self._logged.clear()
        self._logged.add((module, node))
        return True
