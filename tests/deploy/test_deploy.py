"""`deploy/` is generated, not hand-written: one source of truth for what each party may do."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import anyio
import pytest

from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from provisioner_client.settings import ClientSettings
from registry.contract import buckets
from registry.edge import load_settings
from registry.wire import BusOptions, ask, connect, get_latest, put
from tests.deploy.units import UNITS, unit_settings, verify
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


# --- the client unit's metrics drop-in ------------------------------------------------------------

DROP_IN = DEPLOY / "systemd" / f"{UNITS['client'].name}.d" / "metrics.conf"
TEXTFILE_FOLDER = Path("/var/lib/prometheus/node-exporter")  # Debian's prometheus-node-exporter


@pytest.fixture
def root_with_drop_in(system_root: Path) -> Path:
    """`system_root` with the drop-in where deploy/systemd's layout puts it, beside the client's unit."""
    installed = system_root / "etc/systemd/system" / DROP_IN.parent.name / DROP_IN.name
    installed.parent.mkdir()
    shutil.copyfile(DROP_IN, installed)
    return installed


def _drop_in_environment(text: str) -> dict[str, str]:
    """Each `Environment=NAME=value` of the drop-in, commented ones included (the endpoint's)."""
    found = re.findall(r"^#?Environment=(\w+)=(\S+)$", text, flags=re.MULTILINE)
    return dict(found)


def test_the_metrics_drop_in_opens_to_the_client_the_folder_its_variable_names() -> None:
    found = unit_settings(DROP_IN)
    environment = _drop_in_environment(DROP_IN.read_text())
    assert found["ReadWritePaths"] == [f"-{TEXTFILE_FOLDER}"]
    assert found["Environment"] == [f"MESH_PROVISIONER_CLIENT_METRICS_FOLDER={TEXTFILE_FOLDER}"]
    settings = load_settings(ClientSettings, {}, None, environment)  # the endpoint's line too, uncommented
    assert (settings.metrics_folder, settings.metrics_listen) == (TEXTFILE_FOLDER, "9465")
    assert f"dpkg-statoverride --update --add root {unit_settings(UNITS['client'])['Group'][0]} 0775" in (
        DROP_IN.read_text()
    )


def test_systemd_analyze_verify_accepts_the_client_unit_with_the_metrics_drop_in(
    analyze: str, system_root: Path, root_with_drop_in: Path
) -> None:
    done = verify(analyze, system_root, UNITS["client"].name)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    command = [analyze, "security", "--offline=yes", "--threshold=20", f"--root={system_root}"]
    unit = f"/etc/systemd/system/{UNITS['client'].name}"
    rated = subprocess.run([*command, unit], capture_output=True, text=True, check=False, timeout=60)
    assert rated.returncode == 0, rated.stdout[-2000:] + rated.stderr


def test_verify_reads_the_drop_in(analyze: str, system_root: Path, root_with_drop_in: Path) -> None:
    """The check above could pass without reading the drop-in: the same harness sees its faults."""
    root_with_drop_in.write_text(root_with_drop_in.read_text().replace("ReadWritePaths=", "ReadWritePath="))
    done = verify(analyze, system_root, UNITS["client"].name)
    assert re.search(rf"{DROP_IN.name}:\d+: Unknown key 'ReadWritePath' in section \[Service\]", done.stderr)
