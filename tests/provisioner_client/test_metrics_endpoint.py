"""The node's figures served at /metrics by a watching client (`metrics_listen`), on a real bus:
the same series as the textfile, the connection's state read at the scrape."""

from __future__ import annotations

import json
import re
import signal
import socket
import urllib.request
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from pydantic import ValidationError

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import StandIns
from provisioner_client.metrics import NodeMetrics
from provisioner_client.reconcile import ClientPlan
from provisioner_client.settings import ClientSettings
from provisioner_client.watch.watching import WatchTiming, watch
from registry.edge import load_settings
from registry.wire import BusOptions, connect
from tests.helpers import NODE, Reports, restartable_nats, serving
from tests.prometheus import Figures, samples
from tests.prometheus import sample as value
from tests.provisioner_client.cli import CLIENT, client, client_env

TIMING = WatchTiming(debounce=timedelta(seconds=0.1), poll=timedelta(seconds=0.2), drift_poll=timedelta(seconds=0.2))
BOUND = 10.0
SERVED = re.compile(r"metrics served at http://127\.0\.0\.1:(\d+)/metrics")
UNREACHABLE = "nats://127.0.0.1:1"


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=BOUND) as answer:  # noqa: S310 -- a loopback URL the test made
        assert answer.status == 200
        text: str = answer.read().decode()
        return text


async def scrape(port: int) -> Figures:
    return samples(await anyio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/metrics"))


def reconciles(found: Figures) -> tuple[float, float]:
    """Reconciles completed and failed."""
    name = "mesh_node_reconciles_total"
    return value(found, name, outcome="completed"), value(found, name, outcome="failed")


async def scrape_until(port: int, name: str, wanted: float) -> Figures:
    with anyio.fail_after(BOUND):
        while value(found := await scrape(port), name) != wanted:
            await anyio.sleep(0.05)
    return found


def one_plain_module(plan: ClientPlan) -> None:
    """The plan's only module: no placeholder, so that the seat alone serves it."""
    for path in plan.manifests.glob("*.json"):
        path.unlink()
    (plan.manifests / "plain.json").write_text(json.dumps({"module": "plain", "env": {"GREETING": "hello"}}))


async def test_a_watching_node_serves_its_series_and_says_at_the_next_scrape_that_nats_is_gone(
    plan: ClientPlan, tmp_path: Path
) -> None:
    one_plain_module(plan)
    reports = Reports(BOUND)
    metrics = NodeMetrics(NODE)  # the endpoint alone: no textfile folder
    async with restartable_nats(tmp_path / "nats") as nats, serving(nats.url):
        options = BusOptions(servers=(nats.url,), name=NODE, reconnect_wait=timedelta(seconds=0.2))
        async with connect(options) as bus, anyio.create_task_group() as tg:
            metrics.track_connection(lambda: bus.connected)
            port = await tg.start(metrics.serve, "0")
            await tg.start(
                lambda task_status: watch(
                    bus, plan, TIMING, on_report=reports, metrics=metrics, task_status=task_status
                )
            )
            await reports.until(lambda: len(reports.all) >= 2, "the resync once its buckets are followed")
            up = await scrape(port)
            await nats.stop()
            down = await scrape_until(port, "mesh_node_nats_connected", 0)
            await nats.start()
            back = await scrape_until(port, "mesh_node_nats_connected", 1)
            tg.cancel_scope.cancel()
    assert metrics.path is None
    assert value(up, "mesh_node_info", node=NODE) == 1
    assert value(up, "mesh_node_modules", state="applied") == 1
    assert value(up, "mesh_node_lease_held") == 1
    assert value(up, "mesh_node_nats_connected") == 1
    assert value(up, "mesh_node_reconcile_last_ok") == 1
    # No reconcile ended between the two scrapes: the 0 was read from the connection at the scrape.
    assert reconciles(down) == reconciles(up)
    assert value(down, "mesh_node_reconcile_last_timestamp_seconds") == value(
        up, "mesh_node_reconcile_last_timestamp_seconds"
    )
    assert value(back, "mesh_node_info", node=NODE) == 1


async def test_the_endpoint_and_the_textfile_show_the_same_series(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan, tmp_path: Path
) -> None:
    folder = tmp_path / "textfile"
    folder.mkdir()
    reports = Reports(BOUND)
    async with connect(BusOptions(servers=(nats_server.url,), name=NODE)) as bus:
        metrics = NodeMetrics(NODE, folder, connected=lambda: bus.connected)
        async with anyio.create_task_group() as tg:
            port = await tg.start(metrics.serve, "127.0.0.1:0")
            await tg.start(
                lambda task_status: watch(
                    bus, plan, TIMING, on_report=reports, metrics=metrics, task_status=task_status
                )
            )
            served = await scrape(port)
            tg.cancel_scope.cancel()
    assert set(served) == set(samples((folder / "mesh_provisioner_client.prom").read_text()))
    assert value(served, "mesh_node_modules", state="applied") == 3


async def until_served(process: Process) -> int:
    """The port the client logged it serves its metrics on."""
    assert process.stderr is not None
    logged = ""
    with anyio.fail_after(BOUND):
        async for chunk in TextReceiveStream(process.stderr):
            logged += chunk
            if found := SERVED.search(logged):
                return int(found.group(1))
    raise AssertionError(f"no endpoint logged:\n{logged}")


async def test_the_command_line_serves_the_node_in_watch_mode_and_stops_it_with_the_client(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    env = client_env(nats_server.url, plan, MESH_PROVISIONER_CLIENT_METRICS_LISTEN="0")
    async with await anyio.open_process([*CLIENT, "reconcile", "--watch"], env=env) as process:
        port = await until_served(process)
        found = await scrape_until(port, "mesh_node_reconcile_last_ok", 1)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(BOUND):
            code = await process.wait()
    assert code == 0
    assert value(found, "mesh_node_modules", state="applied") == 3
    assert value(found, "mesh_node_nats_connected") == 1
    with pytest.raises(OSError, match="refused"):
        fetch(f"http://127.0.0.1:{port}/metrics")  # stopped with the client


async def test_a_node_that_cannot_reach_its_bus_is_served_saying_so(plan: ClientPlan) -> None:
    env = client_env(UNREACHABLE, plan, MESH_PROVISIONER_CLIENT_METRICS_LISTEN="127.0.0.1:0")
    async with await anyio.open_process([*CLIENT, "reconcile", "--watch"], env=env) as process:
        try:
            found = await scrape(await until_served(process))
        finally:
            process.kill()  # still trying to connect: a stop would wait out its grace
    assert value(found, "mesh_node_nats_connected") == 0
    assert value(found, "mesh_node_lease_held") == 0
    assert reconciles(found) == (0, 0)


async def test_a_port_already_taken_is_a_settings_error_with_exit_2(plan: ClientPlan) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = client_env(UNREACHABLE, plan, MESH_PROVISIONER_CLIENT_METRICS_LISTEN=f"127.0.0.1:{port}")
        with anyio.fail_after(BOUND):  # refused before connecting: the bus is never waited for
            code, _, err = await client("reconcile", "--watch", env=env)
    assert code == 2
    assert err.splitlines()[-1] == (
        f"mesh-provisioner-client: metrics_listen: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


@pytest.mark.parametrize("listen", ["localhost", "host:port", "1:2:3", "9465 ", "70000"])
async def test_a_listen_address_out_of_shape_is_a_settings_error_naming_the_setting(
    plan: ClientPlan, listen: str
) -> None:
    env = client_env(UNREACHABLE, plan, MESH_PROVISIONER_CLIENT_METRICS_LISTEN=listen)
    code, _, err = await client("reconcile", "--watch", env=env)
    last = err.splitlines()[-1]
    assert code == 2
    assert last.startswith("mesh-provisioner-client: settings")
    assert f"metrics_listen: {listen!r}" in last
    assert "flag --metrics-listen, env MESH_PROVISIONER_CLIENT_METRICS_LISTEN" in last


async def test_a_one_shot_reconcile_says_it_serves_no_endpoint_and_reconciles(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    env = client_env(nats_server.url, plan, MESH_PROVISIONER_CLIENT_METRICS_LISTEN="9465")
    code, out, err = await client("reconcile", env=env)
    assert code == 0, out
    assert "metrics_listen 9465 is served by reconcile --watch only: this one-shot reconcile serves no endpoint" in err


def test_the_setting_is_off_by_default_and_read_from_the_environment() -> None:
    assert load_settings(ClientSettings, {}, None, {}).metrics_listen is None
    given = load_settings(ClientSettings, {}, None, {"MESH_PROVISIONER_CLIENT_METRICS_LISTEN": "[::1]:9465"})
    assert given.metrics_listen == "[::1]:9465"
    with pytest.raises(ValidationError, match="metrics_listen"):
        ClientSettings(metrics_listen="65536")


async def test_the_help_shows_the_setting(plan: ClientPlan) -> None:
    code, out, _ = await client("reconcile", "--help", env=client_env(UNREACHABLE, plan))
    assert code == 0
    assert "--metrics-listen" in out
    assert "PORT (on 127.0.0.1) or HOST:PORT" in " ".join(out.split())
