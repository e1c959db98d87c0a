"""The hub's durable consumers the sites' copies take, made and checked by the hub's seat.

A site's copies of the hub's buckets (`provisioner.seat.site_copies`) do not create consumers at
the hub: each names a durable consumer the hub's seat made for it (ADR-58, nats-server 2.14+) and
only *resets* it across the link (`CONSUMER.RESET.<stream>.<name>`), which puts it back at what the
copy acknowledged. Why: a copy that creates its consumer resumes after a cut on nats-server's own
schedule (a create lost in the cut is waited for 30 s, then tried again after 10 s more each
failure, up to 2 min: 50 s after a 60 s cut, measured), where a durable one is reset as soon as the
hub's consumer is heard again (it sends a heartbeat every second to the copy's delivery subject),
and the link then permits no consumer create at all (`registry.access.sites.links`).

With `sites_file` set (and no `site`: the hub of those sites), the hub's seat makes, at each start,
for each site of sites.json and each copy its seat makes (the same providers and domains file):

    site-<site>          on each mirrored stream: the whole bucket, delivered to
                         `$JS.M.<site>.<stream>`
    site-<site>-<node>   on each node-keyed stream, for each node of the site: that node's keys,
                         delivered to `$JS.S.<site>.<stream>.<node>`

each push, acknowledged by the copy's flow control (`ack_policy: flow_control`, a heartbeat a
second: what nats-server requires of a durable copy's consumer), from the stream's first message. A
consumer that exists is updated to this when it differs (a node moved, a delivery subject); one
named `site-...` that no site of the file takes (a site or a node removed) is deleted: the seat's
footprint is the consumers named by that prefix, and no other consumer of the hub's is touched.

The seat reads the file again every `sites_reread` (`follow_sites_file`): a site added to the mesh
file (`grants --mesh` writes sites.json anew) gets its consumers without restarting the hub's seat,
and a site removed loses them. A file that cannot be read then, or is no sites.json, is said in one
ERROR line and the consumers are left as they are.

A consumer keeps what its copy acknowledged: a copy deleted at the site and made again would be
sent only what came after (the mirror takes the consumer's position), so removing a site's copy
goes with deleting its consumer here (remove the site from the file, let the seat read it, put it
back), which the site's seat's ERROR line about a copy that differs says.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from provisioner.seat.buckets import seat_buckets, until_enough_peers
from provisioner.seat.site_copies import site_copies
from registry.access import COPY_PREFIX, CopyConsumer, SitesFile, read_sites_file
from registry.contract import Bucket
from registry.errors import NotFound, SettingsError
from registry.wire import Bus

log = logging.getLogger(__name__)

HEARTBEAT_NS = 1_000_000_000  # nats-server requires 1 s of a flow-control acknowledged consumer
MAX_ACK_PENDING = 10_000  # messages sent before the copy's flow control answers
NAMES_PAGE = 1024


def wanted_consumers(
    sites: SitesFile, providers: Iterable[str] = (), domains_file: Path | None = None
) -> dict[tuple[str, str], CopyConsumer]:
    """Every consumer the sites' copies take, by (stream, name)."""
    providers = list(providers)
    return {
        (consumer.bucket.stream, consumer.name): consumer
        for entry in sites.sites
        for copy in site_copies(entry, providers, domains_file)
        for consumer in copy.consumers
    }


def consumer_config(consumer: CopyConsumer) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": consumer.name,
        "durable_name": consumer.name,
        "description": f"{consumer.what}, at site {consumer.site} (mesh-provisioner's hub seat)",
        "deliver_subject": consumer.delivery,
        "deliver_policy": "all",
        "ack_policy": "flow_control",
        "flow_control": True,
        "idle_heartbeat": HEARTBEAT_NS,
        "max_ack_pending": MAX_ACK_PENDING,
        "replay_policy": "instant",
    }
    if consumer.filter is not None:
        config["filter_subject"] = consumer.filter
    return config


async def ensure_site_consumers(
    bus: Bus, sites: SitesFile, *, providers: Iterable[str] = (), domains_file: Path | None = None
) -> list[CopyConsumer]:
    """Makes each consumer the sites' copies take, brings those that differ in line, deletes those
    of our prefix no copy takes; the consumers."""
    providers = list(providers)
    wanted = wanted_consumers(sites, providers, domains_file)
    for consumer in wanted.values():
        await ensure_site_consumer(bus, consumer)
    streams = {bucket.stream: bucket for bucket in seat_buckets(providers, domains_file)}
    for bucket in streams.values():
        await _remove_unwanted(bus, bucket, wanted)
    return list(wanted.values())


async def follow_sites_file(
    bus: Bus,
    path: Path,
    *,
    every: timedelta,
    providers: Iterable[str] = (),
    domains_file: Path | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Reads `path` again every `every`; when it changed, makes the consumers of what it now holds
    (`ensure_site_consumers`), until cancelled."""
    providers = list(providers)
    stamp = _stamp_of(path)
    task_status.started()
    while True:
        await anyio.sleep(every.total_seconds())
        now = _stamp_of(path)
        if now == stamp:
            continue
        stamp = now
        sites = _read_again(path)
        if sites is None:
            continue
        made = await ensure_site_consumers(bus, sites, providers=providers, domains_file=domains_file)
        names = ", ".join(site.name for site in sites.sites) or "none"
        log.info(
            "%s changed: the consumers of sites %s made or kept (%d), those of others removed", path, names, len(made)
        )


def _read_again(path: Path) -> SitesFile | None:
    """sites.json as it now is; None, said in one ERROR line, when it cannot be read or is none."""
    problem: SettingsError | None = None
    try:
        return read_sites_file(path, setting=str(path))
    except SettingsError as err:
        problem = err
    log.error("sites.json read again: %s; the sites' consumers are left as they were", problem)
    return None


def _stamp_of(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size)


async def ensure_site_consumer(bus: Bus, consumer: CopyConsumer) -> None:
    stream, wanted = consumer.bucket.stream, consumer_config(consumer)
    found = await _consumer_info(bus, consumer)
    if found is not None and not differences(found.get("config") or {}, wanted):
        return
    create = {"stream_name": stream, "config": wanted}
    operation = f"make the hub's consumer {consumer.name} of {stream}"
    await until_enough_peers(
        consumer.bucket,
        lambda: bus.jetstream(f"CONSUMER.CREATE.{stream}.{consumer.name}", create, operation=operation),
    )
    if found is None:
        log.info(
            "consumer %s of %s made: %s", consumer.name, stream, consumer.what, extra={"bucket": consumer.bucket.name}
        )
    else:
        log.warning(
            "consumer %s of %s updated (%s): %s",
            consumer.name,
            stream,
            "; ".join(differences(found.get("config") or {}, wanted)),
            consumer.what,
            extra={"bucket": consumer.bucket.name},
        )


def differences(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """What of `wanted` an existing consumer's configuration does not have."""
    keys = ("deliver_subject", "filter_subject", "ack_policy", "flow_control", "idle_heartbeat", "deliver_policy")
    return [
        f"{key} {existing.get(key)!r}, not {wanted.get(key)!r}" for key in keys if existing.get(key) != wanted.get(key)
    ]


async def _consumer_info(bus: Bus, consumer: CopyConsumer) -> dict[str, Any] | None:
    api = f"CONSUMER.INFO.{consumer.bucket.stream}.{consumer.name}"
    try:
        return await bus.jetstream(api, operation=f"the hub's consumer {consumer.name}")
    except NotFound:
        return None


async def _remove_unwanted(bus: Bus, bucket: Bucket, wanted: Mapping[tuple[str, str], CopyConsumer]) -> None:
    for name in await _consumer_names(bus, bucket):
        if name.startswith(COPY_PREFIX) and (bucket.stream, name) not in wanted:
            operation = f"delete the hub's consumer {name} of {bucket.stream}"
            await bus.jetstream(f"CONSUMER.DELETE.{bucket.stream}.{name}", operation=operation)
            log.warning(
                "consumer %s of %s deleted: no site's copy takes it (sites.json)",
                name,
                bucket.stream,
                extra={"bucket": bucket.name},
            )


async def _consumer_names(bus: Bus, bucket: Bucket) -> list[str]:
    names: list[str] = []
    while True:
        page = await bus.jetstream(
            f"CONSUMER.NAMES.{bucket.stream}", {"offset": len(names)}, operation=f"the consumers of {bucket.stream}"
        )
        got = page.get("consumers") or []
        names += got
        if not got or len(names) >= page.get("total", 0):
            return names
