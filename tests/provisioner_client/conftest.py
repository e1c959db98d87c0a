"""Fixtures of the client's tests: the provisioner server (its buckets, registry and verb, which
lists a node's own keys for the client), the stand-ins, a plan."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import StandIns, stand_ins
from provisioner_client.reconcile import ClientPlan
from registry.wire import Bus
from tests.helpers import EXAMPLES, NODE, in_own_task, serving


@pytest.fixture
async def provisioned(nats_server: LocalNats, bus: Bus) -> AsyncIterator[Bus]:
    """`bus`, with the server running in-process: it created the buckets and wrote the registry."""
    async with in_own_task(serving(nats_server.url)):
        yield bus


@pytest.fixture
async def domains(provisioned: Bus) -> AsyncIterator[StandIns]:
    async with in_own_task(stand_ins(provisioned, NODE)) as parts:
        yield parts


@pytest.fixture
def plan(tmp_path: Path) -> ClientPlan:
    manifests = tmp_path / "manifests"
    shutil.copytree(EXAMPLES, manifests, ignore=shutil.ignore_patterns("*.md"))
    return ClientPlan(node=NODE, manifests=manifests, materialize=tmp_path / "env", verb_timeout=timedelta(seconds=1))
