"""Keeps the registry bucket equal to the compiled catalogue: one seat at a time, at start and
every interval.

Every seat answers the verb, but only the seat holding the compile lease (`registry.wire.lease`,
key `seat.compile`) writes the registry: two seats with different domains files would otherwise
rewrite it against each other forever. A seat that does not hold the lease waits for it (saying
once who holds it) and compares its own catalogue with the bucket every interval (the first time
a moment after it starts), warning loudly, naming the kinds, when they disagree; it never writes,
and never judges a bucket that moved since its last look (the holder compiling it). The holder
warns when kinds it wrote were changed by someone else since its last compile (a seat without
the lease, a hand edit), then writes its own back: it holds the lease. A write of a compile that
failed may stand (acknowledged before the failure, or sent from nats-py's reconnect buffer after
the compile gave up), so it is this seat's own too. A holder that stops (or stops renewing) is
replaced within the lease's ttl, the clock skew allowed (`registry.wire.lease.SKEW`) and one more
check (a third of the ttl); an outage is no stop (`registry.wire.lease.Lease.hold`).

JetStream acknowledges a write before it reaches the disk, so a server restarted after a power
failure may hold the registry as it was some compiles ago. The holder looks at the registry
stream's last sequence every `check` (one request): found below where it stood at the last look,
the stream went back, and the registry is compiled at once instead of at the next interval.

The bus failing, at start (a fresh cluster's streams answer a moment after they are made) or
later, never stops the seat: the lease is not taken yet, or the compile is tried again soon.

An unchanged registry costs no write: only kinds whose bytes differ are written, and kinds no
domain answers any more are deleted (`registry.wire.kv.converge`). The domains file is read again on
every compile, so an operator's edit takes effect at the next interval without a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from registry.contract import buckets, load_catalogue, registry_values
from registry.errors import BusError, RegistryError, sole_exception
from registry.wire import Bus, Changes, KvItem, Lease, converge, current_snapshot, seat_key, stream_last_sequence

log = logging.getLogger(__name__)

COMPILE_LEASE_TTL = timedelta(seconds=15)
ROLLBACK_CHECK = timedelta(seconds=30)  # how often the holder looks whether the registry's stream went back
COMPILE_OUTCOMES = ("changed", "unchanged", "failed")
RETRY_FIRST = 1.0  # seconds before a compile or comparison the bus failed is tried again, doubling

Step = Callable[[], Awaitable[object]]  # None: not judged, run again soon


async def sync_registry(bus: Bus, *, domains_file: Path | None) -> Changes:
    """Compiles the catalogue and converges the registry bucket to it; says what changed."""
    return await Compiler(bus, domains_file).compile()


Ours = dict[str, frozenset[bytes | None]]  # each kind's values this seat may have left there (None: none)


@dataclass
class CompileCounts:
    """This seat's compiles since it started, by outcome (`changed`: it wrote or deleted kinds,
    `unchanged`, `failed`: the bus failed it), and the kinds it `written` and `deleted`."""

    runs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COMPILE_OUTCOMES, 0))
    written: int = 0
    deleted: int = 0

    def ran(self, changes: Changes | None) -> None:
        if changes is None:
            self.runs["failed"] += 1
            return
        self.runs["changed" if changes else "unchanged"] += 1
        self.written += len(changes.written)
        self.deleted += len(changes.deleted)


class Compiler:
    """One seat's catalogue against the registry bucket: compiled (by the lease holder) or
    compared (by any other seat), remembering what its compiles may have left in the bucket."""

    def __init__(self, bus: Bus, domains_file: Path | None, counts: CompileCounts | None = None) -> None:
        self.bus = bus
        self.domains_file = domains_file
        self.counts = counts if counts is not None else CompileCounts()
        self._ours: Ours | None = None
        self._told: tuple[str, ...] = ()
        self._seen: int | None = None  # the bucket's last revision at the last comparison
        self._stream_end = 0  # the registry stream's last sequence at the last look (`went_back`)

    def desired(self) -> dict[str, bytes]:
        return registry_values(load_catalogue(self.domains_file))

    async def compile(self) -> Changes:
        try:
            changes = await self._compile()
        except BusError:
            self.counts.ran(None)
            raise
        self.counts.ran(changes)
        return changes

    async def _compile(self) -> Changes:
        desired = self.desired()
        current = await current_snapshot(self.bus, buckets.REGISTRY, include_deleted=True)
        if self._ours is not None:
            changed = rewritten(current, self._ours)
            if changed:
                log.warning(
                    "registry kinds %s were rewritten by someone else since this seat's last compile (a seat "
                    "with another catalogue that does not hold the compile lease, or a hand edit); this seat "
                    "holds the lease and writes its own back",
                    ", ".join(changed),
                    extra={"kinds": list(changed)},
                )
        try:
            changes = await converge(self.bus, buckets.REGISTRY, current, desired)
        except BusError:
            # Any write of it may stand: acknowledged before the failure, or sent by nats-py from
            # its reconnect buffer after this compile gave up on it.
            self._ours = _also(self._ours, desired)
            raise
        self._ours = {kind: frozenset({value}) for kind, value in desired.items()}
        _log_compiled(changes, len(desired))
        return changes

    async def went_back(self) -> bool:
        """Whether the registry's stream ends below where it ended at the last look: a server restarted
        from a store behind the writes it had acknowledged, and what was compiled since may be gone
        (what this seat wrote before is then no reference either)."""
        end = await stream_last_sequence(self.bus, buckets.REGISTRY)
        before, self._stream_end = self._stream_end, end
        if end >= before:
            return False
        log.warning(
            "the registry's stream went back to sequence %d from %d (a server restarted from a store behind "
            "the writes it had acknowledged); compiling it again now",
            end,
            before,
        )
        self._ours = None
        return True

    async def compare(self) -> tuple[str, ...] | None:
        """The kinds on which the bucket disagrees with this seat's catalogue, warning when they
        change. A bucket that moved since the last comparison is not judged (None): the holder
        may be compiling it now, as when seats start together. An empty one disagrees with
        nothing: the holder has not compiled it yet."""
        self._ours = None  # another seat compiles now: what this one wrote before is no reference
        current = await current_snapshot(self.bus, buckets.REGISTRY, include_deleted=True)
        last = max((item.revision for item in current), default=0)
        seen, self._seen = self._seen, last
        if last != seen:
            return None
        if all(item.deleted for item in current):
            return ()
        disagreeing = differing(current, self.desired())
        if disagreeing and disagreeing != self._told:
            log.warning(
                "the registry disagrees with this seat's catalogue on kinds %s: the seat holding the compile "
                "lease wrote it from another domains file; this seat does not write while another holds the "
                "lease",
                ", ".join(disagreeing),
                extra={"kinds": list(disagreeing)},
            )
        elif self._told and not disagreeing:
            log.info("the registry agrees with this seat's catalogue again")
        self._told = disagreeing
        return disagreeing


def differing(current: Sequence[KvItem], wanted: Mapping[str, bytes]) -> tuple[str, ...]:
    """The kinds whose entry in `current` (a snapshot with deletions) is not what `wanted` holds."""
    return rewritten(current, {kind: frozenset({value}) for kind, value in wanted.items()})


def rewritten(current: Sequence[KvItem], ours: Ours) -> tuple[str, ...]:
    """The kinds whose entry in `current` (a snapshot with deletions) is none of the values `ours`
    allows them (a kind `ours` does not name: none)."""
    held = {item.key: item.value for item in current if not item.deleted}
    return tuple(sorted(kind for kind in held.keys() | ours.keys() if held.get(kind) not in ours.get(kind, {None})))


def _also(ours: Ours | None, desired: Mapping[str, bytes]) -> Ours | None:
    """`ours` allowing each kind what `desired` gives it too (None: no reference, and still none)."""
    if ours is None:
        return None
    return {kind: ours.get(kind, frozenset({None})) | {desired.get(kind)} for kind in ours.keys() | desired.keys()}


def _log_compiled(changes: Changes, kinds: int) -> None:
    if changes:
        log.info(
            "registry compiled: %s (written: %s; deleted: %s)",
            changes.summary(),
            ", ".join(changes.written) or "-",
            ", ".join(changes.deleted) or "-",
        )
    else:
        log.info("registry compiled: unchanged, %d kinds", kinds)


async def keep_registry_compiled(
    bus: Bus,
    *,
    domains_file: Path | None,
    interval: timedelta,
    lease_ttl: timedelta = COMPILE_LEASE_TTL,
    check: timedelta = ROLLBACK_CHECK,
    counts: CompileCounts | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Compiles now if the compile lease is free; reports started; then compiles every `interval`
    while holding the lease, or waits for it, comparing (the first time a moment after the start).

    A domains file that cannot be read fails the start. The bus failing at start does not (a
    fresh cluster's streams answer a moment after they are made): the lease is then not taken
    yet, or the registry not compiled yet, and both are tried again soon."""
    compiler = Compiler(bus, domains_file, counts)
    compiler.desired()  # a domains file that cannot be read fails the start, whoever compiles
    lease = Lease(bus, seat_key(), ttl=lease_ttl)
    compiled = await lease.take() and await _compiled_at_start(compiler)
    task_status.started()
    while True:
        try:
            await _hold_and_compile(lease, compiler, interval, compiled=compiled, check=check)
        except* RegistryError as failed:  # the lease lost to another seat
            # One line, no traceback: the reason says it all, and the seat goes on.
            log.error(  # noqa: TRY400
                "compile lease %s: %s; this seat stops compiling and waits for the lease again",
                lease.key,
                sole_exception(failed),
            )
        compiled = False
        await anyio.sleep(lease.ttl.total_seconds() / 3)


async def _compiled_at_start(compiler: Compiler) -> bool:
    """Whether the start's compile reached the bus; a bus error is said, not raised (anything else is)."""
    try:
        await compiler.compile()
    except BusError as err:
        log.warning("cannot compile the registry at start: %s; trying again", err)
        return False
    return True


async def _hold_and_compile(
    lease: Lease, compiler: Compiler, interval: timedelta, *, compiled: bool, check: timedelta
) -> None:
    """Waits for the lease (comparing every interval), then compiles every interval until it is
    lost: the first time at once, unless `compiled` at start; and at once whenever the registry's
    stream went back (looked at every `check`)."""
    whole = interval.total_seconds()
    async with anyio.create_task_group() as tasks:
        comparing = anyio.CancelScope()
        tasks.start_soon(partial(_every, interval, compiler.compare, scope=comparing, first=min(RETRY_FIRST, whole)))
        await tasks.start(lease.hold)
        comparing.cancel()
        tasks.start_soon(_compile_when_gone_back, compiler, check)
        await _every(interval, compiler.compile, scope=anyio.CancelScope(), first=whole if compiled else 0.0)


async def _compile_when_gone_back(compiler: Compiler, check: timedelta) -> None:
    """Compiles whenever the registry's stream is found gone back, looked at every `check`; a bus
    error is said by the next compile, and looked at again at the next check."""
    while True:
        await anyio.sleep(check.total_seconds())
        try:
            gone_back = await compiler.went_back()
        except BusError:
            continue
        if gone_back:
            await _again_soon(compiler.compile)


async def _every(interval: timedelta, step: Step, *, scope: anyio.CancelScope, first: float) -> None:
    """Runs `step` (`first` seconds from now, then every `interval`) until `scope` is cancelled.

    A step the bus failed, or that answered None (a registry in motion, not judged), runs again
    sooner: after `RETRY_FIRST`, then twice as long each time up to the interval. A compile that
    did not reach the bus leaves the registry behind the catalogue (on a fresh cluster, empty)
    until one does."""
    whole = interval.total_seconds()
    pause, retry = first, RETRY_FIRST
    with scope:
        while True:
            await anyio.sleep(pause)
            if await _again_soon(step):
                pause, retry = min(retry, whole), retry * 2
            else:
                pause, retry = whole, RETRY_FIRST


async def _again_soon(step: Step) -> bool:
    """Runs `step`; whether it must run again soon: it answered None, or the bus failed it (said at
    WARNING). Any other failure (a domains file that cannot be read) is said at ERROR and waits
    for the next interval."""
    try:
        return await step() is None
    except BusError as err:
        log.warning("registry compile or comparison failed on the bus: %s; trying again", err)
        return True
    except RegistryError as err:
        log.error("registry compile or comparison failed, the bucket keeps its last values: %s", err)  # noqa: TRY400
    return False
