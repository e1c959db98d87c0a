"""Text another party wrote never acts on a node's terminal, static and JWT.

A hold's reason is another party's text: the seat copies a node's failed claim's reason into it, an
operator writes their own. Here the seat's account writes a hold whose reason carries ESC
sequences (clear the screen, set the window title), the 8-bit CSI U+009B and the right-to-left
override U+202E; n2's `mesh-provisioner-client reconcile` and `status` are run as processes on
n2's own grants, and the bytes they print are judged: on a pipe and on a terminal (a pty), the
reason is there, every such character written as an escape, none of them as itself.
"""

from __future__ import annotations

import json
import os
import pty
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

from mesh_dev.standins import ASSIGNMENT, ASSIGNMENTS, CONFIG
from provisioner.seat.buckets import ensure_bucket
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.access import Kind
from registry.contract import fleet, to_json
from registry.wire import BucketConfig, Bus, put
from tests.isolation import JwtMesh, Mesh, party

EVIL = "exit 1\x1b[2J\x1b]0;owned\x07 \x9b31m red \u202eevil"
ACTED_ON = ("\x1b", "\x07", "\x9b", "\u202e")
SHOWN = "exit 1\\x1b[2J\\x1b]0;owned\\x07 \\x9b31m red \\u202eevil"
COLOURS = re.compile("\x1b\\[[0-9;]*m")
CLIENT = [sys.executable, "-c", "import sys; from provisioner_client.cli import main; sys.exit(main())"]


def plan_of(tmp_path: Path) -> ClientPlan:
    manifests = tmp_path / "n2" / "manifests"
    manifests.mkdir(parents=True)
    web = {"module": "web", "env": {"LOG_LEVEL": "${config:log-level}"}, "rollout": {"budget": 1}}
    (manifests / "web.json").write_text(json.dumps(web))
    return ClientPlan("n2", manifests, tmp_path / "n2" / "env", timedelta(seconds=2))


def env_of(mesh: Mesh, plan: ClientPlan) -> dict[str, str]:
    """The client's settings, on n2's own key or creds."""
    if isinstance(mesh, JwtMesh):
        login = {"NATS_CREDS": str(mesh.options(party(Kind.NODE, "n2")).creds)}
    else:
        login = {"NATS_NKEY": str(mesh.options(party(Kind.NODE, "n2")).nkey_seed)}
    return {
        "PATH": os.environ.get("PATH", ""),
        "NATS_URL": mesh.server.url,
        "MESH_PROVISIONER_CLIENT_NODE": "n2",
        "MESH_PROVISIONER_CLIENT_MANIFESTS": str(plan.manifests),
        "MESH_PROVISIONER_CLIENT_MATERIALIZE": str(plan.materialize),
        "MESH_PROVISIONER_CLIENT_CONFIG": "",
        **login,
    }


async def on_a_pipe(env: dict[str, str], *args: str) -> bytes:
    done = await anyio.run_process([*CLIENT, *args], env=env, check=False)
    return bytes(done.stdout)


async def on_a_terminal(env: dict[str, str], *args: str) -> bytes:
    """What the command writes to a terminal: its stdout is a pty, read until it closes."""
    main, terminal = pty.openpty()
    try:
        process = await anyio.open_process([*CLIENT, *args], env=env, stdout=terminal)
    finally:
        os.close(terminal)
    read = b""
    try:
        while chunk := await anyio.to_thread.run_sync(_read_some, main):
            read += chunk
    finally:
        os.close(main)
        await process.wait()
    return read


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the pty's other side closed: all was read
        return b""


async def seeded(seat: Bus, level: str) -> None:
    await ensure_bucket(seat, CONFIG, BucketConfig())
    await ensure_bucket(seat, ASSIGNMENTS, BucketConfig())
    await put(seat, CONFIG, "log-level", json.dumps(level).encode())
    await put(seat, ASSIGNMENTS, ASSIGNMENT.build(node="n2", module="web"), b'{"plan":{}}')


def judged(printed: bytes) -> str:
    """What was printed, once the status marks' own colours (SGR sequences) are taken out: none of
    the characters a terminal acts on is left."""
    text = COLOURS.sub("", printed.decode())
    assert not [char for char in ACTED_ON if char in text], printed
    return text


async def test_a_holds_reason_reaches_the_clients_summary_and_status_escaped(mesh: Mesh, tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    env = env_of(mesh, plan)
    async with mesh.connect(party(Kind.SEAT)) as seat, mesh.connect(party(Kind.NODE, "n2")) as n2:
        await seeded(seat, "info")
        assert (await reconcile(n2, plan)).ok  # the first env file needs no slot
        await put(seat, CONFIG, "log-level", b'"debug"')
        hold = fleet.Hold(state="paused", since=datetime.now(UTC), by="seat", reason=EVIL, node="n1")
        await put(seat, fleet.FLEET, fleet.hold_key("web"), to_json(hold))

    summary = judged(await on_a_pipe(env, "reconcile"))
    assert f"  reason: rollout: paused by seat after the change of node n1 failed: {SHOWN}" in summary, summary
    assert SHOWN in judged(await on_a_terminal(env, "reconcile"))
    assert SHOWN in judged(await on_a_pipe(env, "status"))
    assert SHOWN in judged(await on_a_terminal(env, "status"))
    as_json = judged(await on_a_terminal(env, "status", "--json"))
    assert json.loads(as_json)["modules"]["web"]["reasons"] == [
        f"rollout: paused by seat after the change of node n1 failed: {EVIL}"
    ]
    assert as_json.isascii()
