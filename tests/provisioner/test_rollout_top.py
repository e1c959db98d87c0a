"""`mesh-provisioner top` shows the rollouts held: a line per held module under the
summary, its reason escaped (a seat's hold carries words a node wrote), against a real seat."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import anyio

from mesh_dev.local_nats import LocalNats
from registry.contract import fleet
from registry.wire import Bus, put
from tests.helpers import clean_environment

SINCE = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


async def top_once(url: str) -> tuple[int, str]:
    command = [sys.executable, "-m", "provisioner.commands.cli", "top", "--once", "--nats-url", url]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    return result.returncode, result.stdout.decode()


async def test_top_shows_each_held_rollout_under_the_summary(server: LocalNats, bus: Bus) -> None:
    code, out = await top_once(server.url)
    assert (code, out.splitlines()[1].split()[:2]) == (0, ["NODE", "VERDICT"])  # nothing held: no line
    paused = fleet.Hold(state="paused", since=SINCE, by="seat", reason="change c1 failed: \x1b]0;x\x07", node="n1")
    aborted = fleet.Hold(state="aborted", since=SINCE, by="ops@host", reason="bad value")
    await put(bus, fleet.FLEET, fleet.hold_key("web"), paused.model_dump_json().encode())
    await put(bus, fleet.FLEET, fleet.hold_key("a.b"), aborted.model_dump_json().encode())
    code, out = await top_once(server.url)
    lines = [line[22:] for line in out.splitlines()[1:3]]
    assert code == 0
    assert lines == [
        "rollout of a.b aborted by ops@host since 2026-06-01T12:00:00Z (bad value)",
        "rollout of web paused by seat since 2026-06-01T12:00:00Z (node n1: change c1 failed: \\x1b]0;x\\x07)",
    ]
