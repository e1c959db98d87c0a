"""Shared fixtures: a real nats-server with JetStream per test, and a connection to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from registry.bus import Bus, BusOptions, connect
from registry.local_nats import LocalNats, local_nats


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with local_nats(tmp_path / "nats") as server:
        yield server


@pytest.fixture
async def bus(nats_server: LocalNats) -> AsyncIterator[Bus]:
    async with connect(BusOptions(servers=(nats_server.url,), name="test")) as connected:
        yield connected
