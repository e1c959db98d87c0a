"""The client as node user `n1` of deploy/accounts.conf: everything it does is granted.

A reconcile and a watch run with the node's least-privilege grants (own keys only, one filter
per listing and watch, its own inbox prefix) and the server reports no permission violation.
The other domains' stand-ins run as an extra unrestricted user added for the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from pydantic import SecretStr

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import StandIns, provision_own_buckets, stand_ins
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.watching import WatchTiming, watch
from registry.bus import Bus, BusOptions, connect
from registry.kv import put
from tests.helpers import in_own_task, sh_env

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
VARIABLES = ("PASSWORD_SYS", "PASSWORD_MESH_PROVISIONER", "PASSWORD_N1", "PASSWORD_N2", "PASSWORD_OPERATOR",
             "PASSWORD_POSTGRES")  # fmt: skip
_MESH_USERS = "  MESH {\n    jetstream: enabled\n    users = [\n"


def server_config() -> str:
    accounts = (DEPLOY / "accounts.conf").read_text()
    assert _MESH_USERS in accounts, "deploy/accounts.conf changed shape; update this test's admin user"
    admin = '      { user: admin, password: "admin-password" }\n'
    variables = "".join(f'{name}: "test-password"\n' for name in VARIABLES)
    return variables + accounts.replace(_MESH_USERS, _MESH_USERS + admin)


def options(server: LocalNats, user: str) -> BusOptions:
    password = "admin-password" if user == "admin" else "test-password"
    return BusOptions(servers=(server.url,), name=f"test-{user}", user=user, password=SecretStr(password),
                      inbox_prefix=f"_INBOX_{user}", request_timeout=timedelta(seconds=2))  # fmt: skip


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(local_nats(tmp_path / "secured-nats", server_config())) as server:
        yield server


@dataclass(frozen=True)
class AdminDomains:
    """The stand-ins, and the unrestricted connection they write through."""

    bus: Bus
    parts: StandIns


@asynccontextmanager
async def stand_ins_as_admin(secured: LocalNats) -> AsyncIterator[AdminDomains]:
    async with connect(options(secured, "admin")) as admin:
        await provision_own_buckets(admin)
        async with stand_ins(admin, "n1") as parts:
            yield AdminDomains(admin, parts)


@pytest.fixture
async def admin_domains(secured: LocalNats) -> AsyncIterator[AdminDomains]:
    async with in_own_task(stand_ins_as_admin(secured)) as domains:
        yield domains


async def test_a_reconcile_and_a_watch_as_node_n1_need_no_more_than_its_grants(
    secured: LocalNats, admin_domains: AdminDomains, plan: ClientPlan
) -> None:
    plan = ClientPlan("n1", plan.manifests, plan.materialize, timedelta(seconds=1))
    async with connect(options(secured, "n1")) as node:
        report = await reconcile(node, plan)
        assert report.ok, report.summary()
        assert node.recent_denial(0) is None
        await _watch_one_change(node, plan, admin_domains)
        await node.flush()
        assert node.recent_denial(0) is None


async def _watch_one_change(node: Bus, plan: ClientPlan, domains: AdminDomains) -> None:
    changed = anyio.Event()

    def on_report(report: Report) -> None:
        if sh_env(plan.materialize / "app.env")["LOG_LEVEL"] == "debug":
            changed.set()

    timing = WatchTiming(debounce=timedelta(seconds=0.1), heartbeat=timedelta(seconds=0.5))
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(node, plan, timing, on_report=on_report, task_status=task_status))
        await put(domains.bus, domains.parts.config, "log-level", b'"debug"')
        with anyio.fail_after(10):
            await changed.wait()
        tg.cancel_scope.cancel()
