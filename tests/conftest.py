"""Shared fixtures: a real nats-server with JetStream per test, our connection to it, and a raw
nats-py connection playing any other party on the bus (a writer, an attacker, a stand-in)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import nats
import pytest
from hypothesis import HealthCheck, settings
from nats.aio.client import Client
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats, local_nats
from provisioner_client.reconcile import ClientPlan
from registry.access import Kind
from registry.wire import Bus, BusOptions, connect
from registry.wire.nats_internals import send_ping_after_pending
from tests import rerun_policy
from tests.helpers import DEPLOY, EXAMPLES, in_own_task
from tests.isolation import NODE, Domains, Mesh, domains_of, jwt_mesh_server, mesh_server, party

# Every property test, whatever its own settings: no deadline (an example that takes 200 ms on a
# machine running the suite in parallel is a slow machine, not a failure; the per-test timeout
# bounds a hang) and no "too slow" health check, for the same reason; a failure prints the blob
# that replays it.
# Every nats-py client of the tests flushes what it sent before, as the bus's own connections do
# (`registry.wire.nats_internals.ping_after_pending`): nats-py 2.16 writes a flush's PING ahead of
# the commands still pending, so a flush taken as a barrier after a publish or a subscribe could
# return before the server had seen them (a request after `subscribe` and `flush` was answered
# "no responders" 9 times in 200).
NATS_PY_SEND_PING = Client._send_ping
Client._send_ping = send_ping_after_pending  # type: ignore[method-assign]

settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.load_profile("suite")


def pytest_configure(config: pytest.Config) -> None:
    """The suites that are never run again after a failure, and the rerun summary line."""
    config.pluginmanager.register(rerun_policy, "rerun_policy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, in their own order: pytest-xdist hands tests out in this order, and a
    minute-long test handed out last ran alone at the end while the other workers sat idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(local_nats(tmp_path / "nats")) as server:
        yield server


@pytest.fixture
async def bus(nats_server: LocalNats) -> AsyncIterator[Bus]:
    async with in_own_task(connect(BusOptions(servers=(nats_server.url,), name="test"))) as connected:
        yield connected


@pytest.fixture
async def nc(nats_server: LocalNats) -> AsyncIterator[Client]:
    """Another party on the same bus, through nats-py itself."""
    client = await nats.connect(nats_server.url, name="test party")
    try:
        yield client
    finally:
        await client.drain()


@pytest.fixture
def js(nc: Client) -> JetStreamContext:
    return nc.jetstream()


@pytest.fixture
async def deploy_nats(tmp_path: Path) -> AsyncIterator[str]:
    """nats-server on deploy/mesh/accounts.conf, its URL."""
    config_dir = tmp_path / "nats"  # nats-server reads an include relative to its configuration, always
    config_dir.mkdir()
    shutil.copyfile(DEPLOY / "mesh" / "accounts.conf", config_dir / "accounts.conf")
    async with in_own_task(local_nats(config_dir, "include ./accounts.conf")) as server:
        yield server.url


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    """A mesh on the generated grants, in both kinds of configuration `mesh-provisioner grants` writes."""
    start = mesh_server if request.param == "static" else jwt_mesh_server
    async with in_own_task(start(tmp_path / "mesh")) as running:
        yield running


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    """The seat's connection to `mesh`, nothing written yet; a module whose tests need keys there
    first overrides it with its own, seeding them."""
    async with in_own_task(mesh.connect(party(Kind.SEAT))) as bus:
        yield bus


@pytest.fixture
async def domains(mesh: Mesh) -> AsyncIterator[Domains]:
    """The mesh's stand-ins and its vault on its own key (tests/provisioner_client has its own `domains`)."""
    async with in_own_task(domains_of(mesh)) as running:
        yield running


@pytest.fixture
def node_plan(tmp_path: Path) -> ClientPlan:
    """Node NODE's client plan on a copy of the example manifests."""
    manifests = tmp_path / "manifests"
    shutil.copytree(EXAMPLES, manifests, ignore=shutil.ignore_patterns("*.md"))
    return ClientPlan(NODE, manifests, tmp_path / "env", timedelta(seconds=2))


@pytest.fixture
async def attacker(mesh: Mesh, seat: Bus) -> AsyncIterator[Client]:
    """Node n1 through nats-py itself, once the module's `seat` has seeded the mesh: it may send
    anything its account lets it."""
    client = await mesh.raw(party(Kind.NODE, "n1"))
    try:
        yield client
    finally:
        await client.close()
