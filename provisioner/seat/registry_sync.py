"""Keeps the registry bucket equal to the compiled catalogue: one seat at a time, at start and
every interval.

Every seat answers the verb, but only the seat holding the compile lease (`registry.wire.lease`,
key `seat.compile`) writes the registry: two seats with different domains files would otherwise
rewrite it against each other forever. A seat that does not hold the lease waits for it (saying
once who holds it) and compares its own catalogue with the bucket every interval, warning
loudly, naming the kinds, when they disagree; it never writes. The holder warns when kinds it
wrote were changed by someone else since its last compile (a seat without the lease, a hand
edit), then writes its own back: it holds the lease. A holder that stops (or stops renewing) is
replaced within the lease's ttl, the clock skew allowed (`registry.wire.lease.SKEW`) and one more
check (a third of the ttl).

An unchanged registry costs no write: only kinds whose bytes differ are written, and kinds no
domain answers any more are deleted (`registry.wire.kv.converge`). The domains file is read again on
every compile, so an operator's edit takes effect at the next interval without a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from registry.contract import buckets, load_catalogue, registry_values
from registry.errors import RegistryError, sole_exception
from registry.wire import Bus, Changes, KvItem, Lease, LeaseHeld, converge, current_snapshot, seat_key

log = logging.getLogger(__name__)

COMPILE_LEASE_TTL = timedelta(seconds=15)

Step = Callable[[], Awaitable[object]]


async def sync_registry(bus: Bus, *, domains_file: Path | None) -> Changes:
    """Compiles the catalogue and converges the registry bucket to it; says what changed."""
    return await Compiler(bus, domains_file).compile()


class Compiler:
    """One seat's catalogue against the registry bucket: compiled (by the lease holder) or
    compared (by any other seat), remembering what its last compile wrote."""

    def __init__(self, bus: Bus, domains_file: Path | None) -> None:
        self.bus = bus
        self.domains_file = domains_file
        self._written: dict[str, bytes] | None = None
        self._told: tuple[str, ...] = ()

    def desired(self) -> dict[str, bytes]:
        return registry_values(load_catalogue(self.domains_file))

    async def compile(self) -> Changes:
        desired = self.desired()
        current = await current_snapshot(self.bus, buckets.REGISTRY, include_deleted=True)
        if self._written is not None:
            changed = differing(current, self._written)
            if changed:
                log.warning(
                    "registry kinds %s were rewritten by someone else since this seat's last compile (a seat "
                    "with another catalogue that does not hold the compile lease, or a hand edit); this seat "
                    "holds the lease and writes its own back",
                    ", ".join(changed),
                    extra={"kinds": list(changed)},
                )
        changes = await converge(self.bus, buckets.REGISTRY, current, desired)
        self._written = desired
        _log_compiled(changes, len(desired))
        return changes

    async def compare(self) -> tuple[str, ...]:
        """The kinds on which the bucket disagrees with this seat's catalogue; warns when they change."""
        self._written = None  # another seat compiles now: what this one wrote before is no reference
        disagreeing = differing(
            await current_snapshot(self.bus, buckets.REGISTRY, include_deleted=True), self.desired()
        )
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
    held = {item.key: item.value for item in current if not item.deleted}
    return tuple(sorted(kind for kind in held.keys() | wanted.keys() if held.get(kind) != wanted.get(kind)))


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
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Compiles now if the compile lease is free (failing loudly), else compares; reports started;
    then compiles every `interval` while holding the lease, or waits for it, comparing."""
    compiler = Compiler(bus, domains_file)
    lease = Lease(bus, seat_key(), ttl=lease_ttl)
    try:
        await lease.try_take()
    except LeaseHeld:  # `lease.hold` says who holds it
        await compiler.compare()
    else:
        await compiler.compile()
    task_status.started()
    while True:
        try:
            await _hold_and_compile(lease, compiler, interval)
        except* RegistryError as failed:  # the lease lost, or the bus away while renewing it
            # One line, no traceback: the reason says it all, and the seat goes on.
            log.error(  # noqa: TRY400
                "compile lease %s: %s; this seat stops compiling and waits for the lease again",
                lease.key,
                sole_exception(failed),
            )
        await anyio.sleep(lease.ttl.total_seconds() / 3)


async def _hold_and_compile(lease: Lease, compiler: Compiler, interval: timedelta) -> None:
    """Waits for the lease (comparing every interval), then compiles every interval until it is lost."""
    async with anyio.create_task_group() as tasks:
        comparing = anyio.CancelScope()
        tasks.start_soon(partial(_every, interval, compiler.compare, scope=comparing, first=False))
        compiled_at_take = lease.held  # taken at start: compiled already
        await tasks.start(lease.hold)
        comparing.cancel()
        await _every(interval, compiler.compile, scope=anyio.CancelScope(), first=not compiled_at_take)


async def _every(interval: timedelta, step: Step, *, scope: anyio.CancelScope, first: bool) -> None:
    """Runs `step` (now when `first`, then every `interval`) until `scope` is cancelled; a failure
    is logged and the next interval tries again."""
    with scope:
        if first:
            await _logged(step)
        while True:
            await anyio.sleep(interval.total_seconds())
            await _logged(step)


async def _logged(step: Step) -> None:
    try:
        await step()
    except RegistryError as err:
        log.error("registry compile or comparison failed, the bucket keeps its last values: %s", err)  # noqa: TRY400
