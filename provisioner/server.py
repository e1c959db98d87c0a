"""The running server: one task group owning the registry compile and the verb service.

    async with connect(...)            reconnects forever; drained last
      ensure the four buckets
      compile the registry              at start (a failure here is fatal) ...
      ├── every compile_interval        ... then as a task of the group
      ├── the registry view             follows the registry bucket for `what=registry`
      └── the verb service              until `stop` is set, then shut down in order

`stop` is an `anyio.Event`: the CLI sets it on SIGTERM/SIGINT (`registry.signals`), tests and
`mesh-provisioner-dev` set it themselves.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from functools import partial

import anyio
from anyio import CancelScope
from anyio.abc import TaskStatus

from provisioner.buckets import ensure_buckets
from provisioner.paging import PageCache
from provisioner.registry_sync import keep_registry_compiled
from provisioner.registry_view import RegistryView
from provisioner.service import verb_service
from provisioner.settings import ServerSettings
from provisioner.verb import Verb
from registry.bus import BusOptions, connect
from registry.kv import BucketConfig

log = logging.getLogger(__name__)


async def run_server(
    *,
    bus_options: BusOptions,
    settings: ServerSettings,
    stop: anyio.Event,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Runs the server until `stop` is set; reports ready once the verb is served.

    A `stop` before the server is ready (still waiting for NATS, say) gives up at once: there is
    nothing in flight to finish."""
    ready = anyio.Event()
    async with AsyncExitStack() as resources, anyio.create_task_group() as tasks:
        tasks.start_soon(_give_up_if_stopped_before, ready, stop, tasks.cancel_scope)
        bus = await resources.enter_async_context(connect(bus_options))
        bucket_config = BucketConfig(
            history=settings.bucket_history, replicas=settings.bucket_replicas, storage=settings.bucket_storage
        )
        await ensure_buckets(bus, bucket_config)
        compile_registry = partial(
            keep_registry_compiled, bus, domains_file=settings.domains_file, interval=settings.compile_interval
        )
        await tasks.start(compile_registry)
        registry = RegistryView()
        await tasks.start(partial(registry.follow, bus))
        cache = PageCache(
            ttl=settings.cursor_ttl, max_listings=settings.max_cursors, max_bytes=settings.cursor_cache_bytes
        )
        async with verb_service(
            bus,
            verb=Verb(bus, cache, registry),
            max_concurrent=settings.max_concurrent_requests,
            max_waiting=settings.max_waiting_requests,
            shutdown_timeout=settings.shutdown_timeout,
        ):
            ready.set()
            task_status.started()
            await stop.wait()
            log.info("stopping")
        tasks.cancel_scope.cancel()
    log.info("stopped")


async def _give_up_if_stopped_before(ready: anyio.Event, stop: anyio.Event, everything: CancelScope) -> None:
    await stop.wait()
    if not ready.is_set():
        log.info("stopped before the server was ready")
        everything.cancel()
