"""The command line, run as a process: settings, commands, output and exit codes."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import buckets
from registry.wire import Bus, Holder, get_direct, node_key
from tests.helpers import NODE, in_own_task
from tests.provisioner_client.cli import CLIENT, client, client_env, slow_action


async def test_reconcile_then_status_say_everything_is_applied(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    env = client_env(nats_server.url, plan)
    code, out, _ = await client("reconcile", env=env)
    assert code == 0, out
    assert f"app: applied -> {plan.materialize / 'app.env'} (written)" in out
    code, out, _ = await client("status", "--json", env=env)
    assert code == 0
    status = json.loads(out)
    assert {m: s["state"] for m, s in status["modules"].items()} == {
        "app": "applied",
        "postgres": "applied",
        "tools": "applied",
    }
    assert status["modules"]["app"]["digest"] == status["modules"]["app"]["on_disk"]
    assert status["modules"]["app"]["action"]["outcome"] == "succeeded"
    (plan.materialize / "app.env").write_text("EDITED=1\n")
    code, out, _ = await client("status", env=env)
    assert code == 7, "a drifted file is not ok"
    assert "(drifted: not what was applied; put back by watch mode or the next reconcile)" in out
    elsewhere = client_env(nats_server.url, plan, MESH_PROVISIONER_CLIENT_MATERIALIZE=str(plan.materialize.parent))
    code, out, _ = await client("status", env=elsewhere)
    assert code == 7, "files not where they were written (a wrong --materialize) are not ok"
    assert f"(not in the env folder used, {plan.materialize.parent / 'app.env'}; wrong --materialize?)" in out
    code, _, _ = await client("reconcile", env=env)
    assert code == 0
    code, out, _ = await client("status", env=env)
    assert code == 0, out


async def test_reconcile_says_its_report_as_json(domains: StandIns, nats_server: LocalNats, plan: ClientPlan) -> None:
    (plan.manifests / "extra.json").write_text(json.dumps({"module": "extra", "env": {"X": "${config:nope}"}}))
    env = client_env(nats_server.url, plan)
    code, out, _ = await client("reconcile", "--json", env=env)
    report = json.loads(out)
    assert (code, report["node"], report["ok"]) == (7, NODE, False)
    assert report["modules"]["app"] | {"change_action": None} == {
        "state": "applied",
        "file": str(plan.materialize / "app.env"),
        "written": True,
        "reasons": [],
        "change_action": None,
    }
    assert report["modules"]["extra"]["state"] == "pending"
    assert report["modules"]["extra"]["reasons"] == ["${config:nope}: no value at mesh-config_values key 'nope'"]
    code, _, err = await client("reconcile", "--watch", "--json", env=env)
    assert code == 2 and "not with --watch" in err


async def test_a_pending_module_exits_7_and_status_shows_why(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    (plan.manifests / "extra.json").write_text(json.dumps({"module": "extra", "env": {"X": "${config:nope}"}}))
    env = client_env(nats_server.url, plan)
    code, out, _ = await client("reconcile", env=env)
    assert code == 7
    assert "extra: pending" in out
    code, out, _ = await client("status", env=env)
    assert code == 7
    assert "extra: pending since " in out
    assert (
        "       File: none written yet\n     Reason: ${config:nope}: no value at mesh-config_values key 'nope'" in out
    )


@pytest.mark.parametrize(
    ("args", "extra", "code", "says"),
    [
        pytest.param(
            ["status"],
            {"MESH_PROVISIONER_CLIENT_NOED": "x"},
            2,
            "unknown environment variable",
            id="a mistyped variable is a usage error",
        ),
        pytest.param(["status", "--config", "/nonexistent.toml"], {}, 2, "not found", id="a missing config"),
        pytest.param(["reconcile", "--backoff-max", "-1"], {}, 2, "backoff_max", id="a bad flag"),
        pytest.param(["status"], {"MESH_PROVISIONER_CLIENT_POLL": "often"}, 2, "--poll", id="a bad variable"),
        pytest.param(["reconcile"], {"NATS_URL": "nats://127.0.0.1:1"}, 3, "127.0.0.1:1", id="no bus is exit 3"),
        pytest.param(
            ["reconcile", "--manifests", "/nonexistent"],
            {"NATS_URL": "nats://127.0.0.1:1"},
            2,
            "/nonexistent: no such folder",
            id="a manifests folder not there is said before connecting",
        ),
    ],
)
async def test_failures_have_their_exit_code_and_one_line(
    tmp_path: Path, args: list[str], extra: dict[str, str], code: int, says: str
) -> None:
    plan = ClientPlan(NODE, tmp_path, tmp_path / "env")
    returned, _, err = await client(*args, env=client_env("nats://127.0.0.1:1", plan, **extra))
    assert returned == code
    last = err.splitlines()[-1]
    assert last.startswith("mesh-provisioner-client: ")
    assert says in last


async def test_watch_mode_exits_cleanly_on_sigterm(domains: StandIns, nats_server: LocalNats, plan: ClientPlan) -> None:
    env = client_env(nats_server.url, plan)
    command = [
        sys.executable,
        "-c",
        "import sys; from provisioner_client.cli import main; sys.exit(main())",
        "reconcile",
        "--watch",
    ]
    async with await anyio.open_process(command, env=env) as process:
        assert process.stderr is not None
        logged = ""
        with anyio.fail_after(10):
            async for chunk in TextReceiveStream(process.stderr):
                logged += chunk
                if "reconciled" in logged:
                    break
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    assert (plan.materialize / "app.env").exists()


async def until_logged(process: Process, text: str) -> str:
    assert process.stderr is not None
    logged = ""
    async for chunk in TextReceiveStream(process.stderr):
        logged += chunk
        if text in logged:
            return logged
    raise AssertionError(f"{text!r} never logged:\n{logged}")


@pytest.mark.parametrize("args", [pytest.param(["--watch"], id="watch"), pytest.param([], id="one-shot")])
async def test_the_first_sigterm_lets_the_running_change_action_finish(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan, tmp_path: Path, args: list[str]
) -> None:
    done = tmp_path / "action-finished"
    slow_action(plan, ["sh", "-c", f"sleep 2; touch {done}"])
    env = client_env(nats_server.url, plan)
    async with await anyio.open_process([*CLIENT, "reconcile", *args], env=env) as process:
        with anyio.fail_after(30):  # a failure guard only
            await until_logged(process, "running the change action of module slow")
            process.send_signal(signal.SIGTERM)
            code = await process.wait()
    assert done.exists()
    assert code == 0


async def test_a_second_sigterm_stops_the_client_at_once(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan, tmp_path: Path
) -> None:
    slow_action(plan, ["sleep", "600"])
    env = client_env(nats_server.url, plan)
    command = [*CLIENT, "reconcile", "--watch", "--shutdown-timeout", "600"]
    async with await anyio.open_process(command, env=env) as process:
        with anyio.fail_after(30):  # a failure guard only: the first signal alone would wait 10 minutes
            await until_logged(process, "running the change action of module slow")
            process.send_signal(signal.SIGTERM)
            logged = await until_logged(process, "SIGTERM received: stopping")
            process.send_signal(signal.SIGTERM)
            code = await process.wait()
    assert code == 1, logged


async def test_a_one_shot_reconcile_is_refused_with_exit_6_naming_the_holder_and_status_needs_no_lease(
    domains: StandIns, bus: Bus, nats_server: LocalNats, plan: ClientPlan
) -> None:
    env = client_env(nats_server.url, plan)
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, WatchTiming(), task_status=task_status))
        item = await get_direct(bus, buckets.LEASES, node_key(NODE))
        assert item is not None
        holder = Holder.model_validate_json(item.value)
        code, _, err = await client("reconcile", env=env)
        status_code, status_out, _ = await client("status", env=env)
        tg.cancel_scope.cancel()
    assert code == 6
    assert f"is held by another client: host {holder.host} pid {os.getpid()} since" in err.splitlines()[-1]
    assert status_code == 0, status_out
    code, out, _ = await client("reconcile", env=env)  # the watch released its lease when it stopped
    assert code == 0, out


@pytest.fixture
async def nats_with_a_password(tmp_path: Path) -> AsyncIterator[LocalNats]:
    users = "authorization { users = [ {user: node, password: first} ] }"
    async with in_own_task(local_nats(tmp_path / "password-nats", users)) as server:
        yield server


async def test_watch_mode_exits_4_when_nats_closes_its_connection_for_good(
    nats_with_a_password: LocalNats, plan: ClientPlan
) -> None:
    """nats-py never reconnects a connection it closed (here an authorization violation
    after the node's password changed and the server reloaded): the client exits for its
    supervisor to restart it, instead of waiting for ever."""
    server = nats_with_a_password
    env = client_env(server.url, plan, NATS_USER="node", NATS_PASSWORD="first")
    command = [sys.executable, "-c", "import sys; from provisioner_client.cli import main; sys.exit(main())"]
    async with await anyio.open_process([*command, "reconcile", "--watch"], env=env) as process:
        await until_logged(process, "connected to nats")
        server.config.write_text(server.config.read_text().replace("password: first", "password: second"))
        server.process.send_signal(signal.SIGHUP)
        with anyio.fail_after(30):  # a failure guard only: without the fix it waits for ever
            code = await process.wait()
    assert code == 4
