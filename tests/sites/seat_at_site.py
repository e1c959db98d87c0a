"""The hub and site 1 on their generated files, the site's link through a relay, a seat at each:
what the tests of the seat at a site, and of a site's isolation and resume, run on."""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import pytest
from anyio.abc import TaskGroup, TaskStatus

from mesh_dev.local_nats import LocalNats
from provisioner.commands.cli import main
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from provisioner.verb.service import ENDPOINT
from registry.access import account_key, creds_path
from registry.contract import Bucket, buckets
from registry.wire import Bus, BusOptions, answer_of
from tests.cluster import free_port
from tests.helpers import eventually
from tests.sites import Relay, leafz, server

T = TypeVar("T")

DELAY = 0.020  # seconds each way through the relay: the WAN
MESH = """\
nodes = ["n1", "n3"]
operators = ["ops"]
[providers.postgres]
machines = ["n1"]
[hub]
leafnodes = ["nats-leaf://127.0.0.1:{relay}"]
listen = "127.0.0.1:{leaf}"
[sites.site1]
nodes = ["n1"]
"""
NEED = b'{"placeholder":"${secret:db}","used_in":["app.env"]}'
CONFIG = Bucket("mesh-config_values", buckets.NEEDS.shape)
DROPPING_CONSUMERS = '[domains.vault-consumers]\nmodule = "mesh-vault"\nkinds = []\nverb = "mesh-vault.consumers"\n'
ASKED = 40  # requests timed for each figure
MODES = [pytest.param(False, id="static accounts"), pytest.param(True, id="decentralized JWT accounts")]


class Seat:
    """A seat (`run_server`) run by a task of the test's, stopped when the test says."""

    def __init__(self, options: BusOptions, settings: ServerSettings) -> None:
        self.options, self.settings = options, settings
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        self.started = False

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        self.started = True
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        try:
            await run_server(bus_options=self.options, settings=self.settings, stop=self._stop, task_status=task_status)
        finally:
            self._stopped.set()

    async def stop(self) -> None:
        self._stop.set()
        if self.started:
            await self._stopped.wait()


@dataclass
class Mesh:
    out: Path
    keys: Path
    hub: LocalNats
    site: LocalNats
    relay: Relay
    hub_seat: Seat
    site_seat: Seat
    tasks: TaskGroup
    jwt: bool
    monitor: int  # the hub's monitoring port
    data: str  # the site's own account at the hub, where its links bind

    def options(self, running: LocalNats, label: str) -> BusOptions:
        return connecting(running, label, self.keys, jwt=self.jwt)

    async def data_link_up(self) -> bool:
        return any(link["account"] == self.data for link in await anyio.to_thread.run_sync(leafz, self.monitor))


def grants(root: Path, relay: int, leaf: int, *, jwt: bool = False, domains: str = "") -> tuple[Path, Path]:
    """The grants of `MESH`, with a domains file of `domains` if given (beside the mesh file)."""
    mesh = root / "mesh.toml"
    named = ""
    if domains:
        (root / "domains.toml").write_text(domains)
        named = 'domains_file = "domains.toml"\n'
    mesh.write_text(named + MESH.format(relay=relay, leaf=leaf))
    out, keys = root / "out", root / "keys"
    jwt_flag = ["--jwt"] if jwt else []
    assert main(["grants", "--mesh", str(mesh), "--out", str(out), "--keys", str(keys), *jwt_flag]) == 0
    return out, keys


def connecting(running: LocalNats, label: str, keys: Path, *, jwt: bool, name: str | None = None) -> BusOptions:
    """How party `label` connects to `running`: with its seed, or its `.creds` (JWT)."""
    if jwt:
        return BusOptions(servers=(running.url,), name=name or label, creds=creds_path(keys, label))
    return BusOptions(servers=(running.url,), name=name or label, nkey_seed=keys / f"{label}.nk")


def seat_settings(out: Path, **more: Any) -> ServerSettings:
    return ServerSettings(grants_file=out / "grants.json", providers=["postgres"], **more)


@asynccontextmanager
async def hub_and_site(
    root: Path,
    *,
    jwt: bool = False,
    start_site_seat: bool = True,
    hub_settings: dict[str, Any] | None = None,
    domains: str = "",
    **site_settings: Any,
) -> AsyncIterator[Mesh]:
    """The hub and site 1 on their generated files (with a domains file of `domains`, if given, to
    the grants and both seats), the site's link through the relay, the hub's seat running and
    (unless told) the site's."""
    leaf, monitor = free_port(), free_port()
    relay = Relay(leaf, DELAY)
    out, keys = grants(root, relay.port, leaf, jwt=jwt, domains=domains)
    if domains:
        hub_settings = {"domains_file": root / "domains.toml", **(hub_settings or {})}
        site_settings = {"domains_file": root / "domains.toml", **site_settings}
    async with anyio.create_task_group() as tasks:
        async with AsyncExitStack() as servers:
            hub = await servers.enter_async_context(server(out, root, "hub", jwt=jwt, monitor=monitor))
            await tasks.start(relay.serve)  # before the site dials it: a failed dial is an error line at its start
            site = await servers.enter_async_context(server(out, root, "site1", jwt=jwt))
            # The link up first: a copy made while it is down starts about 40 s after it comes up
            # (nats-server's retry of a mirror's setup), which would only slow the test down.
            data = "site-site1"  # the site's own account at the hub, where its links bind
            if jwt:  # the account's public key
                data = account_key(keys, data).public_key

            def data_link(up: list[dict[str, Any]]) -> bool:
                return any(link["account"] == data for link in up)

            await eventually(
                lambda: with_holding(anyio.to_thread.run_sync(leafz, monitor), data_link), "the site's data link up"
            )
            site_file = out / "sites" / "sites.json"
            hub_seat = Seat(  # the hub of the sites of sites.json: it makes the consumers their copies take
                connecting(hub, "seat", keys, jwt=jwt, name=buckets.SEAT),
                seat_settings(out, sites_file=site_file, **(hub_settings or {})),
            )
            site_seat = Seat(
                connecting(site, "seat-site1", keys, jwt=jwt, name=buckets.SEAT),
                seat_settings(out, site="site1", sites_file=site_file, **site_settings),
            )
            mesh = Mesh(out, keys, hub, site, relay, hub_seat, site_seat, tasks, jwt, monitor, data)
            await tasks.start(hub_seat.run)
            if start_site_seat:
                await tasks.start(site_seat.run)
            try:
                yield mesh
            finally:
                await site_seat.stop()
                await hub_seat.stop()
        tasks.cancel_scope.cancel()  # the relay


async def registry_kinds(node: Bus) -> set[str]:
    answer = (await answer_of(node, {"what": "registry"})).document()
    return {str(entry["kind"]) for entry in answer["entries"]}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:  # loopback
        text: str = answer.read().decode()
        return text


async def requests_answered(bus: Bus) -> int:
    """How many verb requests the seat serving on `bus`'s server answered (`$SRV.STATS`): the
    `$SRV` subjects never cross the link, so each side's seat is asked alone."""
    reply = await bus.request(f"$SRV.STATS.{buckets.SEAT}", b"", operation="stats")
    stats = json.loads(reply.data)
    return sum(int(e["num_requests"]) for e in stats["endpoints"] if e["name"] == ENDPOINT)


async def timed(node: Bus, count: int = ASKED) -> float:
    """The median milliseconds of `what=registry` asked by `node`."""
    took = []
    for _ in range(count):
        started = time.perf_counter()
        await answer_of(node, {"what": "registry"})
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


async def with_holding(ask: Awaitable[T], holds: Callable[[T], bool]) -> T | None:
    """What `ask` answers, if `holds` of it; else None (for `eventually`)."""
    found = await ask
    return found if holds(found) else None
