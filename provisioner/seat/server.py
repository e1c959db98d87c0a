"""The running server: one task group owning the registry compile and the verb service.

    read the grants file              who is who on the bus, for the verb's scope
    async with connect(...)            reconnects forever; drained last: the data connection
    async with connect(...)            the verb's own connection: requests in, answers out
    async with connect(...)            the quota guard's own, and one per bucket it watches (the hub's seat alone)
      ensure the seat's buckets         its own, each provider's `_bound`, each writing domain's
                                        (at a site: the site's copies of them, and no compile)
      compile the registry              at start (a failure here is fatal) ...
      ├── every compile_interval        ... then as a task of the group
      ├── the quota guard               purges a node over its quota (at a site: the hub's purges
      │                                 followed in its mirrors, `provisioner.seat.site_purges`,
      │                                 and its copies' resets lost in a cut sent again,
      │                                 `provisioner.seat.site_resets`)
      ├── the gone marks                gone.<node> in the fleet bucket for nodes gone longer than
      │                                 forget_after (`provisioner.seat.gone_marks`; the hub's alone)
      ├── the rollout holds             pauses a module's rollout when a node running it fails its
      │                                 change (`provisioner.seat.rollouts`; the hub's alone)
      ├── the registry view             follows the registry bucket for `what=registry`
      ├── the own pages                 a node's own listing kept between its writes; follows
      │                                 the quota's purge records (`provisioner.verb.own_pages`)
      ├── the metrics endpoint          when `metrics_listen` is set (`provisioner.metrics`)
      └── the verb service              until `stop` is set, then shut down in order;
                                        once it serves, the start's heap is frozen (`gc.freeze`)

With `sites_file` and no `site`, the hub's seat also makes the durable consumers the sites' copies
take (`provisioner.seat.site_consumers`). At a site (`site` and `sites_file` set:
`provisioner.seat.site_copies`) the seat makes and checks
the site's copies of the hub's buckets in place of the buckets, and neither compiles (the compile
lease is the hub's alone) nor guards quotas: it writes nothing at the hub. The registry view, the
listings and the fleet view read the copies, which have the hub's stream names, so the verb's code
is the same; the site's nodes are answered there, by the queue group's member on their own server.

`stop` is an `anyio.Event`: the CLI sets it on SIGTERM/SIGINT (`registry.runtime.signals`), tests and
`mesh-provisioner-dev` set it themselves. A connection that nats-py closes for good (the server
refused it: an authorization violation, a protocol error) ends the server with
`ConnectionClosed`, so that the CLI exits 1 and a supervisor restarts it, rather than a process
that stays up answering nothing.

Requests arrive on a connection of their own: on the data connection a request would wait, in
the socket, behind every byte already sent to the seat before it (pages of listings, the watches'
writes), and one party's listings of 64 KiB values held an operator's `what=registry` behind
megabytes of them.
"""

from __future__ import annotations

import gc
import logging
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
from anyio import CancelScope
from anyio.abc import TaskGroup, TaskStatus

from provisioner.metrics import SeatWork, serve_seat_metrics
from provisioner.seat.buckets import ensure_buckets, seat_buckets
from provisioner.seat.gone_marks import keep_gone_marks
from provisioner.seat.quotas import GUARDED, Quota, QuotaGuard
from provisioner.seat.registry_sync import CompileCounts, keep_registry_compiled
from provisioner.seat.rollouts import Placement, hold_failed_rollouts
from provisioner.seat.settings import ServerSettings
from provisioner.seat.site_consumers import ensure_site_consumers, follow_sites_file
from provisioner.seat.site_copies import ensure_site_copies
from provisioner.seat.site_purges import follow_purges
from provisioner.seat.site_resets import resend_lost_resets
from provisioner.verb.budgets import AnswerRates
from provisioner.verb.cursors import CursorSeal
from provisioner.verb.handler import GRANTS_SETTING, Verb
from provisioner.verb.nodes import FleetView
from provisioner.verb.own_pages import OwnPages
from provisioner.verb.paging import PageCache
from provisioner.verb.registry_view import RegistryView
from provisioner.verb.service import verb_service
from provisioner.verb.stats import RequestStats
from registry.access import GrantsFile, PartyMap, SiteFileEntry, SitesFile, read_sites_file
from registry.contract import Bucket
from registry.edge import flag_of, setting_of
from registry.errors import ConnectionClosed, SettingsError
from registry.wire import BucketConfig, Bus, BusOptions, connect

log = logging.getLogger(__name__)


async def run_server(
    *,
    bus_options: BusOptions,
    settings: ServerSettings,
    stop: anyio.Event,
    parties: PartyMap | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Runs the server until `stop` is set; reports ready once the verb is served.

    The verb scopes its answers by `parties`, else by the parties of `settings.grants_file`,
    else not at all. A `stop` before the server is ready (still waiting for NATS, say) gives up
    at once: there is nothing in flight to finish. Raises `ConnectionClosed` when the connection
    is closed for good before `stop`."""
    ready = anyio.Event()
    lost = anyio.Event()
    if parties is None and settings.grants_file is not None:
        parties = read_grants(settings.grants_file)
    if parties is None:
        log.warning(
            "no grants file (%s): answering only requests from this seat's own account; "
            "a request the bus says came from another account is refused",
            GRANTS_SETTING,
        )
    site = site_of(settings)
    hub_of = sites_of_the_hub(settings)
    work = SeatWork(RequestStats(), CompileCounts(), page_cache_of(settings, bus_options))
    async with AsyncExitStack() as resources, anyio.create_task_group() as tasks:
        tasks.start_soon(_give_up_if_stopped_before, ready, stop, tasks.cancel_scope)
        bus = await resources.enter_async_context(connect(bus_options))
        tasks.start_soon(_give_up_if_closed, bus, stop, lost, tasks.cancel_scope)
        answering = await resources.enter_async_context(connect(verb_connection(bus_options)))
        tasks.start_soon(_give_up_if_closed, answering, stop, lost, tasks.cancel_scope)
        connections = {"data": bus, "verb": answering}
        if site is None:
            guarding = await resources.enter_async_context(connect(guard_connection(bus_options)))
            tasks.start_soon(_give_up_if_closed, guarding, stop, lost, tasks.cancel_scope)
            connections["guard"] = guarding
            served, nodes = await _start_hub_work(tasks, connections, settings, work, hub_of)
        else:
            served, nodes = await _start_site_work(tasks, bus, settings, site)
        registry = RegistryView()
        await tasks.start(partial(registry.follow, bus, check=settings.rollback_check))
        await tasks.start(partial(nodes.follow, bus, check=settings.rollback_check))
        own = OwnPages()
        await tasks.start(partial(own.follow, bus, check=settings.rollback_check))
        if settings.metrics_listen is not None:
            metrics = partial(serve_seat_metrics, settings.metrics_listen, connections, nodes, served, work=work)
            await tasks.start(metrics)
        async with verb_service(
            answering,
            verb=Verb(bus, work.cache, registry, parties, nodes, own=own),
            max_concurrent=settings.max_concurrent_requests,
            max_waiting=settings.max_waiting_requests,
            concurrent_per_party=settings.max_concurrent_per_party,
            waiting_per_party=settings.max_waiting_per_party,
            answer_rates=AnswerRates(node=settings.node_answer_rate, reader=settings.reader_answer_rate),
            shutdown_timeout=settings.shutdown_timeout,
            stats=work.requests,
        ):
            freeze_start_up_heap()
            ready.set()
            task_status.started()
            await stop.wait()
            log.info("stopping")
        tasks.cancel_scope.cancel()
    if lost.is_set():
        raise ConnectionClosed("serve", "nats closed the connection for good; restart the server")
    log.info("stopped")


async def _start_hub_work(
    tasks: TaskGroup, connections: dict[str, Bus], settings: ServerSettings, work: SeatWork, sites: SitesFile | None
) -> tuple[list[Bucket], FleetView]:
    """The hub's seat: its buckets (and, the hub of `sites`, the consumers their copies take), the
    registry compiled (under the compile lease), the quota guard (on its connection: see
    `guard_connection`); the buckets it serves and its view of the fleet."""
    bus = connections["data"]
    await ensure_buckets(bus, bucket_config_of(settings, bus), settings.providers, settings.domains_file)
    if sites is not None and settings.sites_file is not None:
        await ensure_site_consumers(bus, sites, providers=settings.providers, domains_file=settings.domains_file)
        follow = partial(
            follow_sites_file,
            bus,
            settings.sites_file,
            every=settings.sites_reread,
            providers=settings.providers,
            domains_file=settings.domains_file,
        )
        await tasks.start(follow)
    compile_registry = partial(
        keep_registry_compiled,
        bus,
        domains_file=settings.domains_file,
        interval=settings.compile_interval,
        lease_ttl=settings.compile_lease_ttl,
        check=settings.rollback_check,
        counts=work.compiles,
    )
    await tasks.start(compile_registry)
    guard = QuotaGuard(Quota(settings.node_quota_keys, settings.node_quota_bytes))
    nodes = FleetView(over_quota=guard.cut_back)
    guard.on_purged = nodes.forget_purged
    watching = partial(_guard_watch_connection, connections["guard"].options)
    await tasks.start(partial(guard.guard, connections["guard"], watching=watching))
    marks = partial(keep_gone_marks, bus, forget_after=settings.forget_after, every=settings.gone_marks_interval)
    await tasks.start(marks)
    placement = Placement.of_catalogue(settings.domains_file, declared=settings.pause_on_failure == "declared")
    pause = settings.pause_on_failure != "off"
    await tasks.start(partial(hold_failed_rollouts, bus, placement=placement, seen=work.rollouts, pause=pause))
    return seat_buckets(settings.providers, settings.domains_file), nodes


async def _start_site_work(
    tasks: TaskGroup, bus: Bus, settings: ServerSettings, site: SeatSite
) -> tuple[list[Bucket], FleetView]:
    """A site's seat: the site's copies of the hub's buckets, and nothing else of the hub's work
    (no compile, no lease, no quota guard: the hub's seat does those, and writes the hub alone)
    but the hub's quota purges followed in its mirrors; the copies it serves and its view of the
    fleet (from the site's mirrors)."""
    log.info(
        "seat of site %s (hub domain %s): the site's copies of the hub's buckets; no compile, no quota guard",
        site.entry.name,
        site.hub_domain,
    )
    copies = await ensure_site_copies(
        bus,
        site.entry,
        hub_domain=site.hub_domain,
        config=bucket_config_of(settings, bus),
        providers=settings.providers,
        domains_file=settings.domains_file,
    )
    await tasks.start(partial(follow_purges, bus, tuple(c.bucket for c in copies if c.bucket in GUARDED)))
    await tasks.start(partial(resend_lost_resets, bus, site.hub_domain))
    return [copy.bucket for copy in copies], FleetView()


@dataclass(frozen=True)
class SeatSite:
    """The site a seat runs at: its entry of sites.json and the hub's JetStream domain."""

    entry: SiteFileEntry
    hub_domain: str


def site_of(settings: ServerSettings) -> SeatSite | None:
    """The site of `settings.site` in `settings.sites_file`; None: the hub's seat. A site the file
    does not name, or a file that is no sites.json, is a settings error (exit 2)."""
    if settings.site is None or settings.sites_file is None:
        return None
    topology = read_sites_file(settings.sites_file, setting=setting_of(ServerSettings, "sites_file"))
    entry = topology.site(settings.site)
    if entry is None:
        named = ", ".join(s.name for s in topology.sites) or "none"
        where = setting_of(ServerSettings, "site")
        raise SettingsError(where, f"{settings.site!r} is not a site of {settings.sites_file} (its sites: {named})")
    return SeatSite(entry, topology.hub.domain)


def sites_of_the_hub(settings: ServerSettings) -> SitesFile | None:
    """sites.json, for the hub's seat (`sites_file` without `site`); a file that is no sites.json is
    a settings error (exit 2)."""
    if settings.site is not None or settings.sites_file is None:
        return None
    return read_sites_file(settings.sites_file, setting=setting_of(ServerSettings, "sites_file"))


def page_cache_of(settings: ServerSettings, bus_options: BusOptions) -> PageCache:
    """The seat's listings in memory, their cursors sealed by the key every seat of the mesh
    derives from the credentials they share."""
    return PageCache(
        seal=CursorSeal.of_credentials(bus_options, settings.cursor_ttl),
        ttl=settings.cursor_ttl,
        max_listings=settings.max_cursors,
        max_bytes=settings.cursor_cache_bytes,
        party_listings=settings.max_cursors_per_party,
        party_bytes=settings.cursor_cache_bytes_per_party,
    )


def verb_connection(options: BusOptions) -> BusOptions:
    """The options of the verb's connection: the seat's, under a name of its own."""
    return options.model_copy(update={"name": f"{options.name} (verb)"})


def _guard_watch_connection(options: BusOptions, bucket: Bucket) -> AbstractAsyncContextManager[Bus]:
    """A connection of the quota guard's watch of `bucket` (see `QuotaGuard.guard`)."""
    return connect(options.model_copy(update={"name": f"{options.name}: {bucket.name}"}))


def guard_connection(options: BusOptions) -> BusOptions:
    """The options of the quota guard's connection: the seat's, under a name of its own. The guard
    reads every write of the nodes' buckets (a node's headers with it: 60 KB a put, as fast as the
    node can write), and each consumer may have 32 MiB on the way; on the data connection, with
    the views' and the listings' reads, that passed the 64 MiB nats-server allows a connection
    pending, the data connection was closed as a slow consumer, and every watch of it read again.
    The counts and purges go on this one, each guarded bucket's watch on one more."""
    return options.model_copy(update={"name": f"{options.name} (quota guard)"})


def freeze_start_up_heap() -> None:
    """Leaves what the start made (modules, settings, the registry view: ~45,000 objects) out of the
    garbage collector's full collections, which would otherwise scan it all with the event loop
    blocked: 11 ms of CPU at start, 16 to 24 ms while 20 nodes a second register (about one every
    20 s); frozen, about 1 ms."""
    gc.collect()
    gc.freeze()


_GRANTS_FILE = setting_of(ServerSettings, "grants_file")


def read_grants(path: Path) -> PartyMap:
    """The parties of the grants file; a file that cannot be read is a settings error (exit 2)."""
    try:
        return GrantsFile(path)
    except OSError as err:
        raise SettingsError(_GRANTS_FILE, f"{path} cannot be read: {err.strerror or err}") from None
    except ValueError as err:
        raise SettingsError(_GRANTS_FILE, f"{path} cannot be read as grants.json: {str(err)[:300]}") from None


def bucket_config_of(settings: ServerSettings, bus: Bus) -> BucketConfig:
    """The configuration of the buckets the seat creates; a value limit must leave room under
    the connection's max_payload for the subject and headers of a put."""
    if settings.bucket_max_value_size >= bus.max_payload:
        where = f"bucket_max_value_size ({flag_of(ServerSettings, 'bucket_max_value_size')})"
        reason = f"{settings.bucket_max_value_size} is not under the bus's max_payload {bus.max_payload}"
        raise SettingsError(where, reason)
    return BucketConfig(
        history=settings.bucket_history,
        replicas=settings.bucket_replicas,
        storage=settings.bucket_storage,
        max_value_size=settings.bucket_max_value_size,
        max_bytes=settings.bucket_max_bytes,
    )


async def _give_up_if_closed(bus: Bus, stop: anyio.Event, lost: anyio.Event, everything: CancelScope) -> None:
    """Ends everything when nats-py closes the connection for good: it never reconnects after that."""
    await bus.closed.wait()
    if not stop.is_set():
        log.error("nats closed the connection for good; the server stops (exit 1) to be restarted")
        lost.set()
        everything.cancel()


async def _give_up_if_stopped_before(ready: anyio.Event, stop: anyio.Event, everything: CancelScope) -> None:
    await stop.wait()
    if not ready.is_set():
        log.info("stopped before the server was ready")
        everything.cancel()
