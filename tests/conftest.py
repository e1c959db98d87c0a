"""Shared fixtures: a real nats-server with JetStream per test, our connection to it, and a raw
nats-py connection playing any other party on the bus (a writer, an attacker, a stand-in)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats, local_nats
from registry.bus import Bus, BusOptions, connect
from tests.helpers import in_own_task
from tests.isolation import Mesh, jwt_mesh_server, mesh_server


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


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    """A mesh on the generated grants, in both kinds of configuration `mesh-provisioner grants` writes."""
    start = mesh_server if request.param == "static" else jwt_mesh_server
    async with in_own_task(start(tmp_path / "mesh")) as running:
        yield running
