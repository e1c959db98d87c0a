"""`deploy/` is generated, not hand-written: one source of truth for what each party may do."""

from __future__ import annotations

import shutil
import sys
from functools import partial
from pathlib import Path

import anyio

from provisioner.seat.server import run_server
from provisioner.settings import ServerSettings
from registry.contract import buckets
from registry.wire import BusOptions, ask, connect, get_latest, put
from tests.helpers import DEPLOY, clean_environment

GENERATE = ["--node", "n1", "--node", "n2", "--provider", "postgres", "--operator", "ops"]


async def test_deploy_mesh_is_exactly_what_the_grants_command_writes(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    shutil.copytree(DEPLOY / "dev-keys", keys)
    command = [
        sys.executable,
        "-m",
        "provisioner.commands.cli",
        "grants",
        "--out",
        str(tmp_path / "out"),
        "--keys",
        str(keys),
    ]
    result = await anyio.run_process([*command, *GENERATE], env=clean_environment(), check=False)
    assert result.returncode == 0, result.stderr.decode()
    for name in ("accounts.conf", "grants.json"):
        assert (tmp_path / "out" / name).read_text() == (DEPLOY / "mesh" / name).read_text(), name
    assert sorted(p.name for p in keys.glob("*.nk")) == sorted(p.name for p in (DEPLOY / "dev-keys").glob("*.nk"))


async def test_the_deploy_configuration_runs_the_seat_and_a_node_on_the_development_keys(
    deploy_nats: str, tmp_path: Path
) -> None:
    seat = BusOptions(servers=(deploy_nats,), name="seat", nkey_seed=DEPLOY / "dev-keys" / "seat.nk")
    settings = ServerSettings(grants_file=DEPLOY / "mesh" / "grants.json", providers=["postgres"])
    stop = anyio.Event()
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(run_server, bus_options=seat, settings=settings, stop=stop))
        node = BusOptions(servers=(deploy_nats,), name="n1", nkey_seed=DEPLOY / "dev-keys" / "node-n1.nk")
        async with connect(node) as n1:
            await put(n1, buckets.NEEDS, "n1.web.config.x", b'{"placeholder":"${config:x}"}')
            answer = await ask(n1, {"what": "needs"})
            assert [e["key"] for e in answer["entries"]] == ["n1.web.config.x"]
            assert await get_latest(n1, buckets.NEEDS, "n1.web.config.x") is not None
        stop.set()
