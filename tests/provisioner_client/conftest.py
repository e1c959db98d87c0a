"""Fixtures of the client's tests: the provisioner's buckets and registry, the stand-ins, a plan."""

from __future__ import annotations

import gc
import shutil
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from provisioner_client.reconcile import ClientPlan
from provisioner_client.standins import StandIns, provision_own_buckets, stand_ins
from registry.bus import Bus

NODE = "node-1"
EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"


@pytest.fixture
async def provisioned(bus: Bus) -> Bus:
    await provision_own_buckets(bus)
    return bus


@pytest.fixture
async def domains(provisioned: Bus) -> AsyncIterator[StandIns]:
    async with stand_ins(provisioned, NODE) as parts:
        yield parts


@pytest.fixture
def plan(tmp_path: Path) -> ClientPlan:
    manifests = tmp_path / "manifests"
    shutil.copytree(EXAMPLES, manifests, ignore=shutil.ignore_patterns("*.md"))
    return ClientPlan(node=NODE, manifests=manifests, materialize=tmp_path / "env", verb_timeout=timedelta(seconds=1))


@pytest.fixture(autouse=True)
def _collect_garbage_per_test() -> Iterator[None]:
    """A resource a test leaks is reported by that test, not by whichever test the GC next runs in."""
    yield
    gc.collect()
