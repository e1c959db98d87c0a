"""Fixtures for the server: run in-process against the test's own nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from mesh_dev.local_nats import LocalNats, local_nats
from tests.helpers import in_own_task, serving


@pytest.fixture
async def server(nats_server: LocalNats) -> AsyncIterator[LocalNats]:
    async with in_own_task(serving(nats_server.url)):
        yield nats_server


@asynccontextmanager
async def small_payload_nats(tmp_path: Path) -> AsyncIterator[LocalNats]:
    """A nats-server whose max_payload is 16 KiB, with the seat serving: answers take many pages."""
    async with (
        local_nats(tmp_path / "nats", "max_payload: 16384") as server,
        serving(server.url, bucket_max_value_size=8192),
    ):
        yield server


@pytest.fixture
async def small_payload_server(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(small_payload_nats(tmp_path)) as server:
        yield server
