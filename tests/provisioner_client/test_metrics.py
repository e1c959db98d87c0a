"""The node's textfile of figures (provisioner_client.metrics), written by a watching client on a real bus."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import DEV_SECRETS, StandIns
from provisioner_client.metrics import FILE_NAME, NodeMetrics
from provisioner_client.reconcile import ClientPlan
from provisioner_client.settings import ClientSettings
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import PENDING_CAUSES
from registry.edge import load_settings
from registry.wire import Bus
from tests.helpers import NODE, Reports, logged
from tests.prometheus import Figures, samples
from tests.prometheus import sample as value
from tests.provisioner_client.cli import client, client_env

TIMING = WatchTiming(
    debounce=timedelta(seconds=0.1),
    poll=timedelta(seconds=0.2),
    drift_poll=timedelta(seconds=0.2),
    backoff_max=timedelta(seconds=0.5),
)
BOUND = 10.0


def figures(folder: Path) -> Figures:
    """Every sample of the textfile, by name and labels."""
    return samples((folder / FILE_NAME).read_text())


@pytest.fixture
def strict_umask() -> Iterator[None]:
    """The client unit's umask: a file made as it is would be unreadable to node_exporter."""
    before = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(before)


async def test_a_watching_node_writes_its_figures_readable_by_node_exporter_naming_no_value(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path, strict_umask: None
) -> None:
    folder = tmp_path / "textfile"
    folder.mkdir()
    reports = Reports(BOUND)
    metrics = NodeMetrics(NODE, folder, connected=lambda: bus.connected)
    before = time.time()
    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: watch(bus, plan, TIMING, on_report=reports, metrics=metrics, task_status=task_status)
        )
        found = figures(folder)
        tg.cancel_scope.cancel()
    assert reports.all[-1].ok
    assert value(found, "mesh_node_info", node=NODE) == 1
    assert (value(found, "mesh_node_modules", state="applied"), value(found, "mesh_node_modules", state="pending")) == (
        3,
        0,
    )
    assert value(found, "mesh_node_pending_oldest_timestamp_seconds") == 0
    assert value(found, "mesh_node_modules_by_action", outcome="succeeded") == 1  # app's echo
    assert value(found, "mesh_node_modules_by_action", outcome="failed") == 0
    assert value(found, "mesh_node_pending_by_cause", cause="verb_refused") == 0
    assert before <= value(found, "mesh_node_reconcile_last_timestamp_seconds") <= time.time()
    assert 0 < value(found, "mesh_node_reconcile_last_duration_seconds") < BOUND
    assert value(found, "mesh_node_reconcile_last_ok") == 1
    assert value(found, "mesh_node_reconciles_total", outcome="completed") >= 1
    assert value(found, "mesh_node_reconciles_total", outcome="failed") == 0
    assert value(found, "mesh_node_writes_refused") == 0
    assert value(found, "mesh_node_lease_held") == 1
    assert value(found, "mesh_node_nats_connected") == 1
    assert stat.S_IMODE((folder / FILE_NAME).stat().st_mode) == 0o644
    assert sorted(p.name for p in folder.iterdir()) == [FILE_NAME]  # no temporary file left
    text = (folder / FILE_NAME).read_text()
    for secret in DEV_SECRETS.values():
        assert secret not in text
    assert str(plan.materialize) not in text


async def test_drift_pending_and_a_failed_action_are_counted_and_the_lease_released_at_the_end(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path
) -> None:
    folder = tmp_path / "textfile"
    folder.mkdir()
    reports = Reports(BOUND)
    metrics = NodeMetrics(NODE, folder, connected=lambda: bus.connected)
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: watch(
                bus, plan, TIMING, stop=stop, on_report=reports, metrics=metrics, task_status=task_status
            )
        )
        await reports.until(lambda: len(reports.all) >= 2, "the resync once its buckets are followed")
        with logged("drift put back", "provisioner_client.watch.watching") as put_back:
            (plan.materialize / "app.env").write_text("LOG_LEVEL=edited by hand\n")
            await put_back.wait(within=BOUND)
        assert value(figures(folder), "mesh_node_drift_put_back_total") == 1

        app = json.loads((plan.manifests / "app.json").read_text())
        app["env"]["X"] = "${port:none}"
        app["env"]["Y"] = "${secret:not-in-the-vault}"
        (plan.manifests / "app.json").write_text(json.dumps(app))
        tools = json.loads((plan.manifests / "tools.json").read_text())
        tools["on_change"] = {"command": ["sh", "-c", "exit 3"], "timeout_seconds": 5}
        (plan.manifests / "tools.json").write_text(json.dumps(tools))
        await reports.until(
            lambda: (
                reports.all[-1].modules["app"].applied.state == "pending" and "tools" in reports.all[-1].actions_run
            ),
            "app pending and tools' action run",
        )
        pending = figures(folder)
        stop.set()
    assert value(pending, "mesh_node_modules", state="pending") == 1
    assert value(pending, "mesh_node_modules", state="applied") == 2
    assert 0 < value(pending, "mesh_node_pending_oldest_timestamp_seconds") <= time.time()
    assert value(pending, "mesh_node_modules_by_action", outcome="failed") == 1
    causes = {cause: value(pending, "mesh_node_pending_by_cause", cause=cause) for cause in PENDING_CAUSES}
    assert causes == {cause: int(cause in ("verb_refused", "other")) for cause in PENDING_CAUSES}
    assert value(pending, "mesh_node_reconcile_last_ok") == 0
    assert value(pending, "mesh_node_lease_held") == 1
    assert value(figures(folder), "mesh_node_lease_held") == 0


async def test_a_failed_reconcile_is_counted_and_the_last_figures_stand(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path
) -> None:
    folder = tmp_path / "textfile"
    folder.mkdir()
    metrics = NodeMetrics(NODE, folder, connected=lambda: bus.connected)
    missing = ClientPlan(NODE, tmp_path / "no-manifests", plan.materialize, plan.verb_timeout)
    with logged("reconcile failed", "provisioner_client.watch.watching") as failed:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: watch(bus, missing, TIMING, metrics=metrics))
            await failed.wait(within=BOUND)
            found = figures(folder)
            tg.cancel_scope.cancel()
    assert value(found, "mesh_node_reconciles_total", outcome="failed") >= 1
    assert value(found, "mesh_node_reconciles_total", outcome="completed") == 0
    assert value(found, "mesh_node_reconcile_last_ok") == 0
    assert value(found, "mesh_node_lease_held") == 1


def test_a_folder_that_cannot_be_written_is_logged_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    metrics = NodeMetrics(NODE, tmp_path / "missing")
    with caplog.at_level(logging.WARNING, "provisioner_client.metrics"):
        metrics.lease(held=True)
    assert f"cannot write the metrics textfile {tmp_path / 'missing' / FILE_NAME}" in caplog.text
    assert not (tmp_path / "missing").exists()


def test_the_folder_is_a_setting_off_by_default(tmp_path: Path) -> None:
    assert load_settings(ClientSettings, {}, None, {}).metrics_folder is None
    given = load_settings(ClientSettings, {}, None, {"MESH_PROVISIONER_CLIENT_METRICS_FOLDER": str(tmp_path)})
    assert given.metrics_folder == tmp_path


async def test_the_command_line_writes_the_textfile_where_the_setting_says(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan, tmp_path: Path
) -> None:
    folder = tmp_path / "textfile"
    folder.mkdir()
    env = client_env(nats_server.url, plan, MESH_PROVISIONER_CLIENT_METRICS_FOLDER=str(folder))
    code, out, _ = await client("reconcile", env=env)
    assert code == 0, out
    found = figures(folder)
    assert value(found, "mesh_node_modules", state="applied") == 3
    assert value(found, "mesh_node_reconciles_total", outcome="completed") == 1
    assert value(found, "mesh_node_nats_connected") == 1
    code, _, _ = await client("reconcile", env=client_env(nats_server.url, plan))
    assert code == 0
    assert figures(folder) == found, "without the setting, no file is written"
