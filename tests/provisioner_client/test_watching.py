"""Watch mode: each kind of change is materialized within a bounded time."""

from __future__ import annotations

import json
import logging
import os
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskStatus
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import StandIns, stand_ins
from provisioner_client.reconcile import ClientPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import BucketAnswer, RegistryEntry, buckets, to_json
from registry.wire import Bus, BusOptions, connect, put
from tests.helpers import Reports, logged, serving, sh_env

TIMING = WatchTiming(
    debounce=timedelta(seconds=0.1),
    refresh=timedelta(seconds=1),
    poll=timedelta(seconds=0.2),
    backoff_max=timedelta(seconds=1),
)
BOUND = 10.0


async def test_each_kind_of_change_is_materialized_within_a_bounded_time(
    domains: StandIns, bus: Bus, js: JetStreamContext, plan: ClientPlan
) -> None:
    app = plan.materialize / "app.env"
    reports = Reports(BOUND)

    def app_env(name: str) -> str:
        return sh_env(app).get(name, "")

    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, TIMING, on_report=reports, task_status=task_status))
        assert app_env("LOG_LEVEL") == "info"

        await put(bus, domains.config, "log-level", b'"debug"')
        await reports.until(lambda: app_env("LOG_LEVEL") == "debug", "a config value")

        domains.vault.rotate("db-password", "rotated-password")
        await reports.until(lambda: "rotated-password" in app_env("DATABASE_URL"), "a rotated secret")

        other = await js.create_key_value(bucket="mesh-config_other", direct=True)
        await other.put("greeting", b'"hi"')
        await other.put("log-level", b'"warning"')
        registry = await js.key_value(buckets.REGISTRY.name)
        entry = RegistryEntry(
            kind="config",
            domain="config",
            module="mesh-config",
            answer=BucketAnswer(bucket="mesh-config_other", key="<name>"),
        )
        await registry.put("config", to_json(entry))
        await reports.until(lambda: app_env("LOG_LEVEL") == "warning", "a registry change")

        await other.put("log-level", b'"error"')
        await reports.until(lambda: app_env("LOG_LEVEL") == "error", "a value of the bucket the registry now names")

        replacement = plan.manifests / ".tools.json.tmp"
        replacement.write_text(json.dumps({"module": "tools", "contributes": {"shell:zsh:normal": ["setopt nobeep"]}}))
        os.replace(replacement, plan.manifests / "tools.json")
        await reports.until(lambda: app_env("ZSH_SNIPPETS").endswith("\nsetopt nobeep"), "a manifest replaced")
        tg.cancel_scope.cancel()
    assert reports.all[-1].ok


async def test_watch_mode_backs_off_until_the_bus_can_answer_then_applies(
    nats_server: LocalNats, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    reports = Reports(BOUND)
    with logged("not taken yet", "registry.wire.lease") as failed:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: watch(bus, plan, TIMING, on_report=reports))
            await failed.wait(within=BOUND)  # logged at the first failed attempt; nothing else tells of one
            async with serving(nats_server.url), stand_ins(bus, "node-1"):
                await reports.until(
                    lambda: bool(reports.all) and reports.all[-1].ok, "the first reconcile once provisioned"
                )
            tg.cancel_scope.cancel()
    assert "trying again" in caplog.text


async def test_watch_mode_rides_out_a_restart_of_the_bus(
    tmp_path: Path, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    """Live updates are at-most-once: once the connection is back, the loop reconciles again."""
    caplog.set_level(logging.DEBUG, "provisioner_client.watch.watching")
    store = tmp_path / "restarting-nats"
    stop_first, first_stopped, stop_second = anyio.Event(), anyio.Event(), anyio.Event()

    async def server(port: int, stop: anyio.Event, stopped: anyio.Event, *, task_status: TaskStatus[LocalNats]) -> None:
        async with local_nats(store, port=port) as running:
            task_status.started(running)
            await stop.wait()
        stopped.set()

    async with anyio.create_task_group() as servers:
        first: LocalNats = await servers.start(server, -1, stop_first, first_stopped)
        options = BusOptions(servers=(first.url,), name="client", reconnect_wait=timedelta(seconds=0.2))
        async with connect(options) as bus, anyio.create_task_group() as tg:
            await tg.start(_serving_until_cancelled, first.url)
            domains = await tg.start(_stand_ins_until_cancelled, bus)
            reports = Reports(BOUND)
            await tg.start(lambda task_status: watch(bus, plan, TIMING, on_report=reports, task_status=task_status))
            stop_first.set()
            await first_stopped.wait()
            with logged("resync after reconnect", "provisioner_client.watch.watching") as resynced:
                await servers.start(server, first.port, stop_second, anyio.Event())
                await resynced.wait(within=BOUND)
            await put(bus, domains.config, "log-level", b'"after-restart"')
            await reports.until(
                lambda: sh_env(plan.materialize / "app.env")["LOG_LEVEL"] == "after-restart",
                "a value written after the bus restarted",
            )
            tg.cancel_scope.cancel()
        stop_second.set()


async def _serving_until_cancelled(url: str, *, task_status: TaskStatus[None]) -> None:
    async with serving(url, shutdown_timeout=timedelta(seconds=1)):
        task_status.started()
        await anyio.sleep_forever()


async def _stand_ins_until_cancelled(bus: Bus, *, task_status: TaskStatus[StandIns]) -> None:
    async with stand_ins(bus, "node-1") as parts:
        task_status.started(parts)
        await anyio.sleep_forever()
