"""The node's own keys of needs, collect and applied in one reconcile: found, then written, and
what came of each write (`OwnKeys.write`, the one place it is judged): written; waiting for the hub
(below); refused by the bus (below).

Each bucket's keys are taken as the memory has them when it says they are as remembered
(`provisioner_client.resolving.memory`: their stamp has not moved, and for needs and collect the wanted
content is the remembered one), else listed through the verb (`NodeScope.read`); a bucket found as
remembered with the same wanted content is not converged at all. After its converge, the memory is
told what the bucket now holds, or that it cannot be vouched for.

A stamp found below the remembered one says the bus lost writes it had acknowledged (a server's
store rolled back to an earlier prefix by a power failure before its sync): the keys are listed,
what the node wants of them written again, and one line says what was lost and restored.

Writes that wait: writes to the hub that wait for the link: what is stale, since when, and how the client knows.

A node at a site writes its keys (needs, collect, applied, its lease) at the hub, through the
site's import (`docs/sites-write-path.md`, fail fast); its reads are answered by the site's
mirrors. With the leaf link cut, a write is answered `NoResponders` at once (3 ms: nobody behind
the import); with the link silent but not yet dropped, it times out. Neither is assumed from the
connection, which stays up (the node's own server is there): the client knows the link is down
because a write said so, and says which write and when.

"Stale" means exactly this: what the hub holds of the node is older than what the node did. The
env files are not stale (the site's mirrors answered their values, as of the mirror's last
message from the hub); what waits is

- each bucket whose converge was answered so (`needs`, `collect`, `applied`): its keys not yet
  written, and for applied the records themselves, which hold digests, states and the change
  actions' outcomes, never a value: the next reconcile writes them as they were, their
  `changed_at` when they were applied, and takes them as the previous records, so a change
  action that ran during the cut is not run again for the same file;
- the lease (`lease`): its renewals fail, so the hub sees it expire after its ttl.

Each part is kept in the env folder (`WAITING_RECORD`, the node's record `state.records.WAITING`) with
`since` (the first write refused in this outage, kept while it keeps failing) and `how` (the
write and the answer); a part is removed by the next write of its own that succeeds, and the file
with the last part. `status` reads it. A watch reads it once (`WaitingWrites`, shared by the
lease's renewals and every reconcile) and writes it through at each change.

`link_down` tells such an answer from the others: `NoRoute` (this account does not import the
subject: grants, not a link) and JetStream errors (refusals, below) are not waits.

Refused writes: writes of the node's own keys that the bus refused, kept where `status` finds them.

A bucket refuses a write when nats-server answers it with a JetStream error: a bucket full past
its `max_bytes` (`discard: new`: "maximum bytes exceeded", error 10077), an account over its
storage, a value over the bucket's limit. That answer will not change by asking again at once, and
the client's log is not where an operator looks. So a reconcile that met one:

- leaves each module whose needs or contributions were refused pending, its reason naming the
  bucket and the server's answer, and writes that record to applied if applied takes it
  (`status` and `query applied` show it);
- keeps the refusals in the env folder (`REFUSALS_RECORD`, the node's record `state.records.REFUSALS`,
  mode 0600, its temporary files a killed client left removed with the others) with the node and when, and removes
  that file at the first reconcile that met none: `status` says from it which bucket refused and
  why, and exits 1, even when applied refused the records too;
- in watch mode, is followed by another reconcile after a backoff: nothing the client follows
  changes when the bucket has room again.

A conditional write that lost to another writer (10071) and a cluster that has no leader for the
moment (10008, 10009) are not refusals: the reconcile fails and is retried, as when the bus is away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from provisioner_client.errors import MaterializeError, capped
from provisioner_client.resolving.memory import Memory, Verdict
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.state import records
from provisioner_client.state.records import RefusalsDocument, WaitingDocument, WaitingPart
from registry.contract import Bucket, buckets
from registry.errors import (
    BusError,
    BusTimeout,
    ConvergeError,
    JetStreamError,
    NoResponders,
    NoRoute,
    PermissionDenied,
    WrongLastSequence,
)
from registry.wire import Bus, Changes, KvItem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """A bucket's node keys as this reconcile found them: `items` None when they are known to hold
    exactly what was remembered (needs, collect); `verdict` says whether they were listed and why."""

    stamp: int
    items: list[KvItem] | None
    verdict: Verdict
    unlisted: BusError | None = None  # the listing the hub did not answer: the keys are not known
    lost_after: int | None = None  # the remembered stamp, when the one found is below it: writes lost

    @property
    def listed(self) -> bool:
        """Read through the verb, not known as remembered."""
        return not self.verdict.as_before


class OwnKeys:
    """The node's keys of needs, collect and applied, for one reconcile. Without a `memory`,
    nothing is remembered: every bucket is listed."""

    def __init__(self, bus: Bus, scope: NodeScope, memory: Memory | None = None) -> None:
        self.bus = bus
        self.scope = scope
        self.memory = memory if memory is not None else Memory(scope.node)
        self.found: dict[str, Found] = {}
        self.written: dict[str, dict[str, int]] = {}  # per bucket, each key written and its new revision

    async def find(self, bucket: Bucket, desired: Mapping[str, bytes] | None) -> None:
        """Finds the bucket's keys: as remembered when the memory says they are (for needs and
        collect, `desired` must be what was remembered; None lists them), else listed."""
        try:
            stamp = await self.scope.stamp(self.bus, bucket)
        except BusError as err:  # the listing below says whether the bus is away
            log.debug("stamp of %s not read (%s): listing", bucket.name, err.reason)
            stamp = -1
        verdict = self.memory.keys(bucket.name, stamp, desired)
        lost_after = self.memory.went_back(bucket.name, stamp)
        how = "as remembered" if verdict.as_before else "listed"
        log.debug("node %s: %s %s: %s", self.scope.node, bucket.name, how, verdict, extra={"bucket": bucket.name})
        if verdict.as_before:
            self.found[bucket.name] = Found(stamp, self.memory.items_of(bucket.name), verdict)
            return
        try:
            self.found[bucket.name] = Found(
                stamp, await self.scope.read(self.bus, bucket), verdict, lost_after=lost_after
            )
        except BusError as err:
            if link_down(err) is None:
                raise
            self.found[bucket.name] = self._unlisted(bucket, stamp, err)

    def _unlisted(self, bucket: Bucket, stamp: int, err: BusError) -> Found:
        """The keys of a bucket the verb (at the hub) did not list: a link down. Its writes wait;
        applied's records are taken as remembered, so that what was applied is still known."""
        log.debug(  # said once per cut by the record of waiting writes (below)
            "node %s: %s not listed (%s): its writes wait for the hub",
            self.scope.node,
            bucket.name,
            err,
            extra={"bucket": bucket.name},
        )
        remembered = self.memory.items_of(bucket.name) or []
        return Found(stamp, remembered, Verdict(as_before=False, reason=f"not listed: {err.reason}"), unlisted=err)

    def items(self, bucket: Bucket) -> list[KvItem]:
        """The bucket's node keys as found; empty for a bucket known to hold what is wanted."""
        return self.found[bucket.name].items or []

    async def converge(self, bucket: Bucket, desired: Mapping[str, bytes]) -> Changes:
        """Makes the bucket's node keys hold `desired` (nothing to do when they were found as
        remembered), then tells the memory what they hold."""
        found = self.found[bucket.name]
        if found.unlisted is not None:
            reason = f"its keys could not be listed: {found.unlisted.reason}"
            raise ConvergeError(bucket.name, "*", reason, "nothing") from found.unlisted
        if found.items is None:
            return Changes()
        written = self.written.setdefault(bucket.name, {})
        try:
            changes = await self.scope.converge(self.bus, bucket, found.items, desired, revisions=written)
        except ConvergeError as err:
            self._remember_unchanged(bucket, found, err)
            raise
        except BaseException:
            self.memory.keep_keys(bucket.name, None)
            raise
        state = self.memory.converged(bucket.name, found.stamp, found.items, desired, written, listed=found.listed)
        if state is not None and written and await self._stamp_or_none(bucket) != state.stamp:
            state = None  # someone else wrote meanwhile
        self.memory.keep_keys(bucket.name, state)
        if found.lost_after is not None:
            restored = changes.summary() if changes else "nothing of the node's was missing"
            say_lost(self.scope.node, f"{bucket.name} keys", found.lost_after, found.stamp, restored)
        return changes

    def _remember_unchanged(self, bucket: Bucket, found: Found, err: ConvergeError) -> None:
        """After a converge that failed: with nothing written and the hub out of reach, the keys
        are as found (a write given up on and stored later moves their stamp), so the next
        reconcile, during the same cut, need not list them through the verb at the hub."""
        if self.written.get(bucket.name) or link_down(err) is None or found.items is None:
            self.memory.keep_keys(bucket.name, None)
            return
        present = {item.key: item.value for item in found.items if not item.deleted}
        state = self.memory.converged(bucket.name, found.stamp, found.items, present, {}, listed=found.listed)
        self.memory.keep_keys(bucket.name, state)

    def unwritten(self, bucket: Bucket, desired: Mapping[str, bytes]) -> set[str]:
        """The keys of `desired` the bucket does not hold as desired after a converge that failed
        part-way: neither found so nor written since (none known for a bucket not listed)."""
        if self.found[bucket.name].unlisted is not None:
            return set()  # its keys are not known: which of them differ is not either
        found = {item.key: item.value for item in self.items(bucket) if not item.deleted}
        done = self.written.get(bucket.name, {})
        return {key for key, value in desired.items() if key not in done and found.get(key) != value}

    async def write(
        self,
        bucket: Bucket,
        desired: Mapping[str, bytes],
        waits: WaitingWrites,
        outcomes: Outcomes,
        *,
        owner: str | None,
    ) -> None:
        """`desired` converged in the node's keys of `bucket`, and its outcome noted in `outcomes`,
        the one place it is: written (nothing of it waits any more); answered as the link being
        down (its keys wait, and applied's records with them); refused by the bus (each module
        whose keys it refused pending, by the key's field `owner`). Applied has no module to leave
        pending (`owner` None): its refusal, like any other failure, is raised."""
        try:
            await self._converge(bucket, desired, outcomes)
        except ConvergeError as err:
            if not (
                self._left_waiting(bucket, desired, waits, outcomes, err=err)
                or self._left_pending(bucket, desired, outcomes, err=err, owner=owner)
            ):
                raise
            return
        waits.done(bucket.name)

    async def _converge(self, bucket: Bucket, desired: Mapping[str, bytes], outcomes: Outcomes) -> None:
        started = time.perf_counter()
        changes = await self.converge(bucket, desired)
        outcomes.writes[bucket.name] = changes
        if changes:
            outcomes.write_seconds[bucket.name] = time.perf_counter() - started
            node = self.scope.node
            log.info(
                "node %s: %s %s", node, bucket.name, changes.summary(), extra={"node": node, "bucket": bucket.name}
            )

    def _left_waiting(
        self,
        bucket: Bucket,
        desired: Mapping[str, bytes],
        waits: WaitingWrites,
        outcomes: Outcomes,
        *,
        err: ConvergeError,
    ) -> bool:
        """Whether `err` says the link to the hub is down: then what was not written waits (applied's
        records themselves, to be written as they are and taken as the previous ones meanwhile)."""
        how = link_down(err)
        if how is None:
            return False
        outcomes.waiting[bucket.name] = _waiting_how(bucket, how, err)
        unwritten = self.unwritten(bucket, desired)
        records = {key: desired[key] for key in unwritten} if bucket == buckets.APPLIED else None
        waits.failed(bucket.name, outcomes.waiting[bucket.name], detail=err.reason, keys=unwritten, records=records)
        return True

    def _left_pending(
        self, bucket: Bucket, desired: Mapping[str, bytes], outcomes: Outcomes, *, err: ConvergeError, owner: str | None
    ) -> bool:
        """Whether `err` is the bus refusing the writes (noted) and the modules whose keys it
        refused were left pending, saying why."""
        refusal = refusal_of(err)
        if refusal is None:
            return False
        outcomes.refused[bucket.name] = refusal
        if owner is None:
            return False
        modules = {bucket.shape.parse(key)[owner] for key in self.unwritten(bucket, desired)}
        for module in modules:
            outcomes.refused_modules.setdefault(module, f"its {bucket.name} keys were refused: {refusal}")
        node = self.scope.node
        log.warning(
            "node %s: %s refused the writes (%s): %s; pending: %s",
            node,
            bucket.name,
            err.done,
            refusal,
            ", ".join(sorted(modules)) or "no module",
            extra={"node": node, "bucket": bucket.name},
        )
        return True

    async def _stamp_or_none(self, bucket: Bucket) -> int | None:
        try:
            return await self.scope.stamp(self.bus, bucket)
        except BusError:
            return None


@dataclass(kw_only=True)
class Outcomes:
    """What came of a reconcile's writes of the node's own keys (`OwnKeys.write`), by bucket."""

    writes: dict[str, Changes] = field(default_factory=dict)
    write_seconds: dict[str, float] = field(default_factory=dict)  # how long each bucket's writes took
    refused: dict[str, str] = field(default_factory=dict)  # bucket name to the server's refusal of its writes
    refused_modules: dict[str, str] = field(default_factory=dict)  # module to why: its keys were refused
    waiting: dict[str, str] = field(default_factory=dict)  # bucket name to how its writes wait for the hub


def _waiting_how(bucket: Bucket, how: str, err: ConvergeError) -> str:
    """How the client knows that `bucket`'s writes wait, in a few words: the request and its answer."""
    if err.key == "*":  # not listed: the verb, at the hub, did not answer
        return f"the listing of its {bucket.name} keys was answered {how}"
    return f"the {bucket.name} writes were answered {how}"


def say_lost(node: str, what: str, remembered: int, found: int, restored: str) -> None:
    """The one line that says the bus lost writes of the node's own `what` (found at `found`, below
    the `remembered` stamp or revision) and what the node wrote again."""
    log.warning(
        "node %s: the bus lost writes of its %s (their stamp went back from %d to %d); restored: %s",
        node,
        what,
        remembered,
        found,
        restored,
        extra={"node": node, "what": what},
    )


WAITING_RECORD = records.WAITING.name
LEASE = "lease"
MAX_KEYS = 50  # keys named per part; then "... and N more"

Part = WaitingPart  # one kind of write that waits, as it is kept


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def link_down(err: BaseException) -> str | None:
    """What a write's failure says of the link to the hub (`NoResponders`, `timed out`), or None
    when it says something else. A converge's `ConvergeError` is judged by the error it wraps."""
    cause = err.__cause__ if isinstance(err.__cause__, BusError) else err
    if isinstance(cause, NoRoute):
        return None
    if isinstance(cause, NoResponders):
        return "NoResponders"
    if isinstance(cause, BusTimeout):
        return "timed out"
    return None


@dataclass(frozen=True)
class Waiting:
    """What waits for the hub, by part (`LEASE` or a bucket's name)."""

    node: str
    parts: dict[str, Part]

    @property
    def since(self) -> str:
        return min(part.since for part in self.parts.values())

    def applied_records(self, bucket: str) -> dict[str, bytes]:
        part = self.parts.get(bucket)
        return {key: value.encode() for key, value in part.records.items()} if part is not None else {}

    def as_json(self) -> dict[str, object]:
        return {"since": self.since, "parts": {name: part.as_json() for name, part in sorted(self.parts.items())}}


class WaitingWrites:
    """The record of `node`'s waiting writes in `folder`, told of each write's outcome: read once,
    at its first use, then kept here and written through each time it changes. One is shared by
    the lease's task and every reconcile of a watch (each call changes and writes it at once, no
    await in between), so that neither writes over what the other noted."""

    def __init__(self, folder: Path, node: str) -> None:
        self.folder = folder
        self.node = node
        self._kept: Waiting | None = None
        self._read = False

    def current(self) -> Waiting | None:
        if not self._read:
            self._read = True
            try:
                self._kept = read_waiting(self.folder, self.node)
            except MaterializeError as err:
                log.warning("%s; taken as nothing waiting", err, extra={"node": self.node})
        return self._kept

    def failed(
        self,
        part: str,
        how: str,
        *,
        detail: str = "",
        keys: Iterable[str] = (),
        records: Mapping[str, bytes] | None = None,
    ) -> Part:
        """`part`'s write was answered as the link being down (`how`: the write and the answer, in
        a few words, for status; `detail`, the server's whole answer, for the log): kept since its
        first such answer."""
        found = self.current()
        parts = dict(found.parts) if found is not None else {}
        before = parts.get(part)
        named = sorted(keys)
        shown = tuple(named[:MAX_KEYS]) + ((f"... and {len(named) - MAX_KEYS} more",) if len(named) > MAX_KEYS else ())
        kept = {key: value.decode() for key, value in (records or {}).items()}
        parts[part] = Part(
            since=before.since if before is not None else now(), how=capped(how), keys=shown, records=kept
        )
        if parts[part] != before:
            if before is None:
                said = f"{how}: {detail}" if detail else how
                log.warning("writes to the hub wait: %s", said, extra={"node": self.node, "part": part})
            self._write(parts)
        return parts[part]

    def done(self, part: str) -> None:
        """`part`'s writes reached the hub (or nothing of it waits any more)."""
        found = self.current()
        if found is None or part not in found.parts:
            return
        parts = {name: p for name, p in found.parts.items() if name != part}
        log.info(
            "writes to the hub: %s written again (waiting since %s)",
            part,
            found.parts[part].since,
            extra={"node": self.node, "part": part},
        )
        self._write(parts)

    def _write(self, parts: Mapping[str, Part]) -> None:
        self._kept = Waiting(self.node, dict(parts)) if parts else None
        try:
            if not parts:
                records.WAITING.remove(self.folder)
                return
            records.WAITING.write(self.folder, WaitingDocument(node=self.node, parts=dict(parts)))
        except MaterializeError as err:
            log.warning("%s; status cannot say which writes wait", err, extra={"node": self.node})


def read_waiting(folder: Path, node: str) -> Waiting | None:
    """What waits for the hub; None when nothing does (or the record is another node's). Raises
    `MaterializeError` when the record cannot be read."""
    found = records.WAITING.read(folder)
    if found is None or found.node != node or not found.parts:
        return None
    return Waiting(found.node, dict(found.parts))


REFUSALS_RECORD = records.REFUSALS.name
_FOR_THE_MOMENT = frozenset({10008, 10009})  # JetStream temporarily unavailable; not the leader

Refusals = RefusalsDocument  # what the last reconcile of a node found refused, as it is kept


def refusal_of(err: BusError) -> str | None:
    """The server's answer if `err` (or the error it wraps: a converge's) is a refusal, else None."""
    cause = err.__cause__ if isinstance(err.__cause__, BusError) else err
    if isinstance(cause, PermissionDenied):
        return cause.reason
    if isinstance(cause, JetStreamError) and not isinstance(cause, WrongLastSequence):
        return None if cause.err_code in _FOR_THE_MOMENT else cause.reason
    return None


def record_refusals(folder: Path, node: str, refused: Mapping[str, str]) -> None:
    """Keeps what the reconcile found refused, or removes the record when nothing was. A failure
    to keep it is logged: the reconcile's own outcome does not depend on it."""
    try:
        if not refused:
            records.REFUSALS.remove(folder)
            return
        at = datetime.now(UTC).isoformat(timespec="seconds")
        buckets = {bucket: capped(reason) for bucket, reason in sorted(refused.items())}
        records.REFUSALS.write(folder, Refusals(node=node, at=at, buckets=buckets))
    except MaterializeError as err:
        log.warning("%s; status cannot say which writes were refused", err, extra={"node": node})


def read_refusals(folder: Path, node: str) -> Refusals | None:
    """What the last reconcile of `node` found refused; None when it found nothing refused (or the
    record is another node's). Raises `MaterializeError` when the record cannot be read."""
    refusals = records.REFUSALS.read(folder)
    return refusals if refusals is not None and refusals.node == node else None
