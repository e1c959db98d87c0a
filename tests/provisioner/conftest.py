"""Fixtures for the server: run in-process against the test's own nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from mesh_dev.local_nats import LocalNats
from tests.helpers import in_own_task, serving


@pytest.fixture
async def server(nats_server: LocalNats) -> AsyncIterator[LocalNats]:
    async with in_own_task(serving(nats_server.url)):
        yield nats_server
