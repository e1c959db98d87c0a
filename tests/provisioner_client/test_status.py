"""`mesh-provisioner-client status`, run as a process against a real nats-server: the exact text,
its exit codes, nothing logged but warnings, and its settings read from the unit's file."""

from __future__ import annotations

import io
import json
import re
import socket
from datetime import timedelta
from pathlib import Path

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan
from provisioner_client.status import NodeStatus
from provisioner_client.status_view import print_status, status_text
from provisioner_client.watch.holding import node_lease
from registry.wire import Bus
from tests.helpers import NODE
from tests.provisioner_client.cli import client, client_env, slow_action

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
ACTION = "sh -c echo 'module app: env file changed': succeeded, exit code 0, finished <time>"


def shown(out: str, plan: ClientPlan) -> str:
    """`out` with what changes from run to run named instead: times, the env folder, host and pid."""
    out = TIME.sub("<time>", out).replace(str(plan.materialize), "<env>")
    out = re.sub(r"renewed \d+ s ago", "renewed <n> s ago", out)
    return re.sub(r"host \S+ pid \d+", "host <host> pid <pid>", out)


async def test_all_applied_and_in_place_reads_like_systemctl_status_and_exits_0(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    env = client_env(nats_server.url, plan)
    code, out, _ = await client("reconcile", env=env)
    assert code == 0, out
    code, out, err = await client("status", env=env)
    assert (code, err) == (0, ""), err
    assert (
        shown(out, plan)
        == f"""\
● node {NODE}: 3 modules, 3 applied
     Client: not running (no client holds the lease of node {NODE})
   Settings: none (no file read)
  Env files: <env>

● app: applied since <time>
       File: <env>/app.env (in place)
     Action: {ACTION}

● postgres: applied since <time>
       File: <env>/postgres.env (in place)

● tools: applied since <time>
       File: <env>/tools.env (in place)
"""
    )


async def test_pending_drifted_and_missing_are_shown_with_the_running_client_and_exit_7(
    domains: StandIns, bus: Bus, nats_server: LocalNats, plan: ClientPlan
) -> None:
    (plan.manifests / "extra.json").write_text(json.dumps({"module": "extra", "env": {"X": "${config:nope}"}}))
    env = client_env(nats_server.url, plan)
    code, _, _ = await client("reconcile", env=env)
    assert code == 7
    (plan.materialize / "app.env").write_text("EDITED=1\n")
    (plan.materialize / "postgres.env").unlink()
    lease = node_lease(bus, NODE, timedelta(seconds=15))
    await lease.try_take()
    try:
        code, out, err = await client("status", env=env)
        json_code, as_json, _ = await client("status", "--json", env=env)
    finally:
        await lease.release()
    assert (code, err) == (7, "")
    assert (
        shown(out, plan)
        == f"""\
× node {NODE}: 4 modules, 3 applied, 1 pending, 2 files drifted or missing
     Client: running on host <host> pid <pid> since <time> (lease renewed <n> s ago)
   Settings: none (no file read)
  Env files: <env>

× app: applied since <time>
       File: <env>/app.env (drifted: not what was applied; put back by watch mode or the next reconcile)
     Action: {ACTION}

○ extra: pending since <time>
       File: none written yet
     Reason: ${{config:nope}}: no value at mesh-config_values key 'nope'

× postgres: applied since <time>
       File: <env>/postgres.env (missing: put back by watch mode or the next reconcile)

● tools: applied since <time>
       File: <env>/tools.env (in place)
"""
    )
    assert f"running on host {socket.gethostname()} pid " in out
    document = json.loads(as_json)
    assert json_code == 7
    assert document["client"]["running"] is True
    assert {m: s["file_state"] for m, s in document["modules"].items()} == {
        "app": "drifted",
        "extra": "none",
        "postgres": "missing",
        "tools": "in place",
    }
    assert all(s["since"] for s in document["modules"].values())


async def test_a_node_with_nothing_recorded_says_so_and_how_it_may_be_wrong(
    provisioned: Bus, nats_server: LocalNats, plan: ClientPlan
) -> None:
    code, out, err = await client("status", "--node", "n1", env=client_env(nats_server.url, plan))
    assert (code, err) == (0, "")
    assert (
        shown(out, plan)
        == """\
○ node n1: no modules recorded in mesh-provisioner_applied (has it reconciled? is the node name right?)
     Client: not running (no client holds the lease of node n1)
   Settings: none (no file read)
  Env files: <env>
"""
    )


async def test_status_and_reconcile_take_their_settings_from_the_units_file(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan, tmp_path: Path
) -> None:
    config = tmp_path / "client.toml"
    config.write_text(
        f'node = "{NODE}"\nmanifests = "{plan.manifests}"\nmaterialize = "{plan.materialize}"\nverb_timeout = 1\n'
        f'\n[nats]\nurl = "{nats_server.url}"\n'
    )
    env = {"PATH": "/usr/bin:/bin", "MESH_PROVISIONER_CLIENT_CONFIG": str(config)}
    code, out, _ = await client("reconcile", env=env)
    assert code == 0, out
    code, out, err = await client("status", env=env)
    assert (code, err) == (0, "")
    assert f"   Settings: {config}\n  Env files: {plan.materialize}\n" in out


async def test_no_node_anywhere_is_exit_2_saying_where_it_looked(tmp_path: Path) -> None:
    config = tmp_path / "client.toml"
    config.write_text("refresh = 10\n")
    env = {"PATH": "/usr/bin:/bin", "MESH_PROVISIONER_CLIENT_CONFIG": str(config)}
    code, _, err = await client("status", env=env)
    assert code == 2
    assert err == (
        "mesh-provisioner-client: settings: no node given: not by --node, nor MESH_PROVISIONER_CLIENT_NODE, "
        f"nor the settings file {config}\n"
    )


async def test_an_asked_log_level_is_kept_by_status(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    env = client_env(nats_server.url, plan, MESH_PROVISIONER_CLIENT_LOG_LEVEL="INFO")
    code, _, err = await client("status", env=env)
    assert code == 0
    assert "INFO" in err, "status is quiet by default only"


async def test_a_failed_change_action_is_shown_and_exits_7_until_one_succeeds(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    slow_action(plan, ["sh", "-c", "exit 3"])
    env = client_env(nats_server.url, plan)
    code, _, _ = await client("reconcile", env=env)
    assert code == 7
    code, out, _ = await client("status", env=env)
    assert code == 7, "the service may not run what the file holds"
    assert shown(out, plan).endswith(f"""\
× node {NODE}: 1 modules, 1 applied, 1 change actions failed
     Client: not running (no client holds the lease of node {NODE})
   Settings: none (no file read)
  Env files: <env>

× slow: applied since <time>
       File: <env>/slow.env (in place)
     Action: sh -c exit 3: failed, exit code 3, finished <time>
""")


async def test_files_that_cannot_be_judged_are_said_so_and_exit_7(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    """As another user than the client's would find them: the digest key unreadable."""
    env = client_env(nats_server.url, plan)
    code, _, _ = await client("reconcile", env=env)
    assert code == 0
    (plan.materialize / ".mesh-provisioner-client.key").write_bytes(b"short")
    code, out, _ = await client("status", env=env)
    assert code == 7, "never in place unless judged so"
    unknown = (
        f"(unknown: digest key {plan.materialize / '.mesh-provisioner-client.key'}: is not 32 bytes long; remove "
        "it and a new one is made (every module's digest changes once); run status as the client's user)"
    )
    assert f"○ node {NODE}: 3 modules, 3 applied, 3 files not judged\n" in out
    assert f"       File: {plan.materialize / 'app.env'} {unknown}\n" in out


async def test_a_file_whose_mode_changed_is_drifted_as_the_drift_watch_and_reconcile_judge_it(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan
) -> None:
    """The same bytes at mode 0644 are not in place: watch mode and the next reconcile put it back."""
    env = client_env(nats_server.url, plan)
    code, _, _ = await client("reconcile", env=env)
    assert code == 0
    (plan.materialize / "app.env").chmod(0o644)
    code, as_json, _ = await client("status", "--json", env=env)
    assert code == 7
    assert json.loads(as_json)["modules"]["app"]["file_state"] == "drifted"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_marks_are_coloured_on_a_terminal_and_plain_elsewhere() -> None:
    status = NodeStatus("n1", {}, {})
    terminal, pipe = _Terminal(), io.StringIO()
    print_status(status, terminal)
    print_status(status, pipe)
    assert terminal.getvalue().startswith("\x1b[33m○\x1b[0m node n1: no modules recorded")
    assert "\x1b" not in pipe.getvalue()
    assert pipe.getvalue() == status_text(status) + "\n"
