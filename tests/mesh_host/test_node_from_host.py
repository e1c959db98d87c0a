"""A node raised by mesh-host: `mesh-host apply deploy/host/node.json --root DIR`, then the node
client started as the unit the host laid down starts it, on the settings file it laid down, and
it reconciles against a local seat (deploy/'s grants and development keys, node n1).

Under --root the client's paths are the machine's paths under DIR: the test reads the unit's
ExecStart, client.toml and the seed drop-in as laid down, and gives the client each path they
name prefixed with DIR (--config, --manifests, --materialize, and NATS_NKEY as the drop-in sets
it); the node name comes from the file itself. Only --watch is left out (one reconcile, then exit)
and the server's URL given, as the operator edits [nats] url. Services are skipped under --root:
the host says so, and the test starts the client itself.
"""

from __future__ import annotations

import json
import shlex
import shutil
import stat
import sys
import tomllib
from pathlib import Path

import anyio

from mesh_dev.standins import CONFIG
from registry.wire import BusOptions, connect, put
from tests.helpers import DEPLOY, clean_environment, serving, sh_env
from tests.mesh_host.deployed import DECLARATIONS, bare_machine, unit_settings

KEYS = DEPLOY / "dev-keys"
CLIENT_UNIT = Path("etc/systemd/system/mesh-provisioner-client.service")
SEED_DROPIN = Path("etc/systemd/system/mesh-provisioner-client.service.d/seed.conf")
MANIFEST = {"module": "hello", "env": {"GREETING": "${config:greeting}", "PRICE": "costs $$5"}}


def under(root: Path, machine_path: str) -> Path:
    return root / machine_path.lstrip("/")


async def mesh_host(*args: str) -> str:
    done = await anyio.run_process([sys.executable, "-m", "mesh_host.cli", *args], env=clean_environment(), check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    return done.stdout.decode()


def client_command(root: Path, url: str) -> tuple[list[str], dict[str, str]]:
    """The client as the laid-down unit starts it, every path it names taken under `root`."""
    argv = shlex.split(unit_settings((root / CLIENT_UNIT).read_text())["ExecStart"][0])
    config = argv[argv.index("--config") + 1]
    settings = tomllib.loads(under(root, config).read_text())
    command = [
        str(Path(sys.executable).parent / Path(argv[0]).name),
        *(arg for arg in argv[1:] if arg != "--watch"),
        "--manifests",
        str(under(root, settings["manifests"])),
        "--materialize",
        str(under(root, settings["materialize"])),
        "--nats-url",
        url,
    ]
    command[command.index(config)] = str(under(root, config))
    (credential,) = unit_settings((root / SEED_DROPIN).read_text())["LoadCredential"]
    seed = credential.split(":", 1)[1]
    return command, clean_environment() | {"NATS_NKEY": str(under(root, seed))}


async def test_a_node_laid_down_by_mesh_host_reconciles_against_a_local_seat(deploy_nats: str, tmp_path: Path) -> None:
    root, state = bare_machine(tmp_path / "root"), tmp_path / "state"
    applied = await mesh_host("apply", str(DECLARATIONS["node"]), "--root", str(root), "--state", str(state))
    assert "mesh-provisioner-client.service" in applied and "skipped" in applied
    settings = tomllib.loads((root / "etc/mesh-provisioner/client.toml").read_text())
    assert settings["node"] == "n1"
    # The operator's part: the seed (never carried by a declaration) and a module's manifest.
    seed = under(root, settings["nats"]["nkey"])
    shutil.copyfile(KEYS / "node-n1.nk", seed)
    seed.chmod(0o600)
    (under(root, settings["manifests"]) / "hello.json").write_text(json.dumps(MANIFEST))

    seat = BusOptions(servers=(deploy_nats,), name="seat", nkey_seed=KEYS / "seat.nk")
    grants = DEPLOY / "mesh" / "grants.json"
    async with serving(deploy_nats, bus_options=seat, grants_file=grants), connect(seat) as writer:
        await put(writer, CONFIG, "greeting", b'"hello from the seat"')
        command, env = client_command(root, deploy_nats)
        with anyio.fail_after(60):
            done = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    env_file = under(root, settings["materialize"]) / "hello.env"
    assert sh_env(env_file) == {"GREETING": "hello from the seat", "PRICE": "costs $5"}
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    # The client's folder is its own (`program`): applying again changes nothing and moves nothing.
    again = await mesh_host("apply", str(DECLARATIONS["node"]), "--root", str(root), "--state", str(state))
    assert "nothing to change" in again
    assert env_file.exists()
