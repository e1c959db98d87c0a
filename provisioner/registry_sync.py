"""Keeps the registry bucket equal to the compiled catalogue: at start and every interval.

An unchanged registry costs no write: only kinds whose bytes differ are written, and kinds no
domain answers any more are deleted (`registry.kv.converge`). The domains file is read again on
every compile, so an operator's edit takes effect at the next interval without a restart.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from registry import buckets
from registry.bus import Bus
from registry.catalogue import load_catalogue
from registry.compile import registry_values
from registry.errors import RegistryError
from registry.kv import Changes, converge, snapshot

log = logging.getLogger(__name__)


async def sync_registry(bus: Bus, *, domains_file: Path | None) -> Changes:
    """Compiles the catalogue and converges the registry bucket to it; says what changed."""
    desired = registry_values(load_catalogue(domains_file))
    current = await snapshot(bus, buckets.REGISTRY, include_deleted=True)
    changes = await converge(bus, buckets.REGISTRY, current, desired)
    if changes:
        log.info("registry compiled: %s (written: %s; deleted: %s)", changes.summary(),
                 ", ".join(changes.written) or "-", ", ".join(changes.deleted) or "-")  # fmt: skip
    else:
        log.info("registry compiled: unchanged, %d kinds", len(desired))
    return changes


async def keep_registry_compiled(
    bus: Bus, *, domains_file: Path | None, interval: timedelta,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:  # fmt: skip
    """Compiles now (failing loudly), then every `interval` (logging failures and carrying on)."""
    await sync_registry(bus, domains_file=domains_file)
    task_status.started()
    while True:
        await anyio.sleep(interval.total_seconds())
        try:
            await sync_registry(bus, domains_file=domains_file)
        except RegistryError as err:
            log.error("registry compile failed, the bucket keeps its last values: %s", err)  # noqa: TRY400
