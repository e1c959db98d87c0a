"""Fixtures of the client's tests: the provisioner's buckets and registry, the stand-ins, a plan."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from mesh_dev.standins import StandIns, provision_own_buckets, stand_ins
from provisioner_client.reconcile import ClientPlan
from registry.bus import Bus
from tests.helpers import EXAMPLES, NODE, in_own_task


@pytest.fixture
async def provisioned(bus: Bus) -> Bus:
    await provision_own_buckets(bus)
    return bus


@pytest.fixture
async def domains(provisioned: Bus) -> AsyncIterator[StandIns]:
    async with in_own_task(stand_ins(provisioned, NODE)) as parts:
        yield parts


@pytest.fixture
def plan(tmp_path: Path) -> ClientPlan:
    manifests = tmp_path / "manifests"
    shutil.copytree(EXAMPLES, manifests, ignore=shutil.ignore_patterns("*.md"))
    return ClientPlan(node=NODE, manifests=manifests, materialize=tmp_path / "env", verb_timeout=timedelta(seconds=1))
