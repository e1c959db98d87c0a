"""The client as a node that may not use the JetStream API beyond direct gets: everything it does
still works.

In an account of its own a node has no consumer creation and no stream info in the data account;
here that is played by a user of one account denied `$JS.API.CONSUMER.>`, `$JS.API.STREAM.>` and
flow control. A reconcile applies every module and a watch follows a config change, and the
server reports no permission violation. The seat and the stand-ins run as an unrestricted user.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest
from pydantic import SecretStr

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import StandIns, stand_ins
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.status import read_status
from registry.contract import buckets
from registry.errors import PermissionDenied
from registry.wire import Bus, BusOptions, connect, snapshot
from tests.helpers import in_own_task, watch_follows_a_config_change

NO_JETSTREAM_API = """
accounts { MESH { jetstream: enabled, users = [
  { user: admin, password: admin }
  { user: n1, password: n1, permissions: {
      publish: { deny: ["$JS.API.CONSUMER.>", "$JS.API.STREAM.>", "$JS.FC.>"] } } }
] } }
"""


def options(server: LocalNats, user: str) -> BusOptions:
    return BusOptions(
        servers=(server.url,),
        name=f"test-{user}",
        user=user,
        password=SecretStr(user),
        inbox_prefix=f"_INBOX_{user}",
        request_timeout=timedelta(seconds=2),
    )


@pytest.fixture
async def restricted(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(local_nats(tmp_path / "restricted-nats", NO_JETSTREAM_API)) as server:
        yield server


@dataclass(frozen=True)
class AdminDomains:
    """The stand-ins, and the unrestricted connection they write through."""

    bus: Bus
    parts: StandIns


@asynccontextmanager
async def seat_and_stand_ins(server: LocalNats) -> AsyncIterator[AdminDomains]:
    stop = anyio.Event()
    run = partial(run_server, bus_options=options(server, "admin"), settings=ServerSettings(), stop=stop)
    async with anyio.create_task_group() as tasks, connect(options(server, "admin")) as admin:
        await tasks.start(run)
        try:
            async with stand_ins(admin, "n1") as parts:
                yield AdminDomains(admin, parts)
        finally:
            stop.set()


@pytest.fixture
async def admin_domains(restricted: LocalNats) -> AsyncIterator[AdminDomains]:
    async with in_own_task(seat_and_stand_ins(restricted)) as domains:
        yield domains


async def test_a_node_without_consumers_or_stream_info_reconciles_watches_and_tells_its_status(
    restricted: LocalNats, admin_domains: AdminDomains, plan: ClientPlan
) -> None:
    plan = ClientPlan("n1", plan.manifests, plan.materialize, timedelta(seconds=1))
    async with connect(options(restricted, "n1")) as node:
        report = await reconcile(node, plan)
        assert report.ok, report.summary()
        assert sorted(report.modules) == ["app", "postgres", "tools"]
        again = await reconcile(node, plan)
        assert not any(again.writes.values()), "a second reconcile writes nothing"
        status = await read_status(node, "n1", plan.materialize)
        assert status.ok and sorted(status.modules) == ["app", "postgres", "tools"]
        await watch_follows_a_config_change(node, plan, admin_domains.bus, admin_domains.parts.config)
        await node.flush()
        assert node.recent_denial(0) is None
        with pytest.raises(PermissionDenied):  # the premise: this node cannot list with a consumer
            await snapshot(node, buckets.NEEDS, [NodeScope("n1").filter])
