"""deploy/host: the declarations that raise this project's node and seat are ones the host accepts,
carry deploy/'s own units and settings byte for byte (written from them by
deploy/host/declarations.py), declare every folder the settings name with its policy explained,
and lay down nothing that needs the client's user before the declaration itself makes it. A node
that runs the postgres module (`node --postgres`) gets the postgres provisioner from it too."""

from __future__ import annotations

import json
import shlex
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from mesh_host.declaration import Directory, File, Service, parse_declaration
from provisioner.seat.settings import ServerSettings
from provisioner_client.settings import DEFAULT_CONFIG, ClientSettings
from registry.edge import load_settings
from tests.helpers import DEPLOY, clean_environment
from tests.mesh_host.deployed import DECLARATIONS, HOST, bare_machine, content, resources, unit_settings

GENERATOR = HOST / "declarations.py"
CLIENT_UNIT = "/etc/systemd/system/mesh-provisioner-client.service"
SYSUSERS_UNIT = "/etc/systemd/system/mesh-provisioner-sysusers.service"
SEED_DROPIN = "/etc/systemd/system/mesh-provisioner-client.service.d/seed.conf"
SEAT_UNIT = "/etc/systemd/system/mesh-provisioner.service"
POSTGRES_UNIT = "/etc/systemd/system/mesh-postgres-provisioner.service"
POSTGRES_DROPINS = "/etc/systemd/system/mesh-postgres-provisioner.service.d"
CARRIED = {
    "node": {
        "/usr/lib/sysusers.d/mesh-provisioner.conf": DEPLOY / "systemd" / "mesh-provisioner.sysusers.conf",
        str(DEFAULT_CONFIG): DEPLOY / "settings" / "client.toml",
        CLIENT_UNIT: DEPLOY / "systemd" / "mesh-provisioner-client.service",
        SYSUSERS_UNIT: HOST / "systemd" / "mesh-provisioner-sysusers.service",
        SEED_DROPIN: HOST / "systemd" / "mesh-provisioner-client-seed.conf",
    },
    "seat": {
        "/etc/mesh-provisioner/server.toml": DEPLOY / "settings" / "server.toml",
        SEAT_UNIT: DEPLOY / "systemd" / "mesh-provisioner.service",
    },
}


def _generate(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(GENERATOR), *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, env=clean_environment(), timeout=60)


def test_the_shipped_declarations_are_what_deploy_says() -> None:
    done = _generate("--check")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("role", list(DECLARATIONS))
def test_each_declaration_is_one_the_host_accepts(role: str) -> None:
    declaration = parse_declaration(DECLARATIONS[role].read_text(), str(DECLARATIONS[role]))
    assert declaration.resources


@pytest.mark.parametrize("role", list(CARRIED))
def test_each_carried_unit_and_settings_file_is_deploys_own_byte_for_byte(role: str) -> None:
    files = {path: r for path, r in resources(role).items() if r["type"] == "file"}
    assert sorted(files) == sorted(CARRIED[role]), "a file declared without its source here, or the reverse"
    for path, source in CARRIED[role].items():
        assert content(role, path) == source.read_text(), f"{path} drifted from {source}"


def test_the_node_declares_the_folders_its_client_toml_and_unit_name() -> None:
    declared = resources("node")
    settings = tomllib.loads(content("node", str(DEFAULT_CONFIG)))
    unit = unit_settings(content("node", CLIENT_UNIT))
    argv = shlex.split(unit["ExecStart"][0])
    assert argv[argv.index("--config") + 1] == str(DEFAULT_CONFIG)
    defaults = ClientSettings.model_fields
    assert settings["manifests"] == str(defaults["manifests"].default)
    assert settings["materialize"] == str(defaults["materialize"].default)
    manifests, materialize = declared[settings["manifests"]], declared[settings["materialize"]]
    assert (manifests["type"], manifests["unknown"]) == ("directory", "module")
    # The env files are the client's: the host writes nothing there and moves nothing out.
    assert (materialize["type"], materialize["unknown"]) == ("directory", "program")
    assert [f"/run/{folder}" for folder in unit["RuntimeDirectory"]] == [settings["materialize"]]
    assert f"{int(materialize['mode'], 8):04o}" == unit["RuntimeDirectoryMode"][0]


def test_the_node_seed_is_known_and_handed_over_as_a_credential_from_where_client_toml_names_it() -> None:
    declared = resources("node")
    nkey = tomllib.loads(content("node", str(DEFAULT_CONFIG)))["nats"]["nkey"]
    dropin = unit_settings(content("node", SEED_DROPIN))
    (credential,) = dropin["LoadCredential"]
    name, source = credential.split(":", 1)
    assert source == nkey
    assert dropin["Environment"] == [f"NATS_NKEY=%d/{name}"]
    keys = declared[str(PurePosixPath(nkey).parent)]
    assert nkey in keys["knows"] and keys["mode"] == "0700"


def test_the_node_makes_the_clients_user_before_starting_it_and_names_no_owner_before_it_exists() -> None:
    """The host looks every owner up before its first step: an owner naming the user the
    declaration makes would refuse the first apply on a bare machine."""
    listed = [r.get("path") or r["unit"] for r in json.loads(DECLARATIONS["node"].read_text())["resources"]]
    declared = resources("node")
    client = unit_settings(content("node", CLIENT_UNIT))
    user = client["User"][0]
    assert {r.get("owner") for r in declared.values()} <= {"root:root", None}
    sysusers = unit_settings(content("node", SYSUSERS_UNIT))
    conf = "/usr/lib/sysusers.d/mesh-provisioner.conf"
    assert shlex.split(sysusers["ExecStart"][0])[1:] == [conf]
    assert f"u {user} " in content("node", conf)
    assert sysusers["Before"] == ["mesh-provisioner-client.service"]
    assert sysusers["RemainAfterExit"] == ["yes"]  # active once run: judged running, not started again
    order = [listed.index(p) for p in (conf, SYSUSERS_UNIT, "mesh-provisioner-sysusers.service")]
    assert order == sorted(order) and order[-1] < listed.index("mesh-provisioner-client.service")


def test_the_seat_knows_the_files_the_controller_and_the_operator_put_beside_its_settings() -> None:
    declared = resources("seat")
    settings = load_settings(ServerSettings, {}, DEPLOY / "settings" / "server.toml", {})
    assert settings.grants_file is not None and settings.domains_file is not None
    knows = declared["/etc/mesh-provisioner"]["knows"]
    assert {str(settings.grants_file), str(settings.domains_file)} <= set(knows)
    (credential,) = unit_settings(content("seat", SEAT_UNIT))["LoadCredential"]
    seed = credential.split(":", 1)[1]
    assert seed in declared[str(PurePosixPath(seed).parent)]["knows"]


@pytest.fixture(scope="module")
def postgres_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """n2's declaration, the node running the postgres module (deploy/README.md's provider node)."""
    out = tmp_path_factory.mktemp("postgres-node") / "n2.json"
    done = _generate("node", "--node", "n2", "--nats-url", "nats://nats1:4222", "--postgres", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("role", [*DECLARATIONS, "postgres-node"])
def test_the_readme_gives_the_reason_for_each_directorys_policy(role: str, request: pytest.FixtureRequest) -> None:
    readme = (HOST / "README.md").read_text()
    path = request.getfixturevalue("postgres_node") if role == "postgres-node" else DECLARATIONS[role]
    declaration = parse_declaration(path.read_text(), role)
    for resource in declaration.resources:
        if isinstance(resource, Directory):
            row = next((line for line in readme.splitlines() if line.startswith(f"| `{resource.path}` ")), "")
            assert f"`{resource.unknown}`" in row, f"deploy/host/README.md gives no row for {resource.path}"


def test_one_nodes_declaration_names_that_node_and_server_and_is_otherwise_the_shipped_one(tmp_path: Path) -> None:
    out = tmp_path / "n7.json"
    done = _generate("node", "--node", "n7", "--nats-url", "nats://10.0.0.9:4222", "--out", str(out))
    assert done.returncode == 0, done.stderr
    declaration = parse_declaration(out.read_text(), str(out))
    (settings_file,) = [r for r in declaration.resources if isinstance(r, File) and r.path == str(DEFAULT_CONFIG)]
    settings = tomllib.loads(settings_file.content)
    assert (settings["node"], settings["nats"]["url"]) == ("n7", "nats://10.0.0.9:4222")
    shipped = json.loads(DECLARATIONS["node"].read_text())
    mine = json.loads(out.read_text())
    for resource in (*shipped["resources"], *mine["resources"]):
        if resource.get("path") == str(DEFAULT_CONFIG):
            resource["content"] = "(one node's)"
    assert mine == shipped
    assert [r.unit for r in declaration.resources if isinstance(r, Service)] == [
        "mesh-provisioner-sysusers.service",
        "mesh-provisioner-client.service",
    ]


def test_a_value_that_would_break_client_toml_is_refused() -> None:
    done = _generate("node", "--node", 'n1"\nurl = "x')
    assert done.returncode != 0 and "without quotes" in done.stderr


# --- the node that runs the postgres module -----------------------------------------------------------


def _listed(path: Path) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(path.read_text())["resources"]
    return listed


def test_the_postgres_node_is_that_node_with_the_provisioner_after_its_client(
    postgres_node: Path, tmp_path: Path
) -> None:
    assert parse_declaration(postgres_node.read_text(), str(postgres_node)).resources
    plain = tmp_path / "n2.json"
    assert _generate("node", "--node", "n2", "--nats-url", "nats://nats1:4222", "--out", str(plain)).returncode == 0
    listed, before = _listed(postgres_node), _listed(plain)
    assert listed[: len(before)] == before, "--postgres changed what the node already declared"
    unit = DEPLOY / "systemd" / "mesh-postgres-provisioner.service"
    assert listed[len(before) :] == [
        {"type": "file", "path": POSTGRES_UNIT, "content": unit.read_text(), "mode": "0644", "owner": "root:root"},
        {
            "type": "directory",
            "path": POSTGRES_DROPINS,
            "mode": "0755",
            "owner": "root:root",
            "unknown": "module",
            "module": "mesh-provisioner",
        },
        {"type": "service", "unit": unit.name, "state": "running", "enabled": True},
    ]


def test_the_provisioner_starts_as_the_user_the_node_made_on_the_env_file_its_client_writes(
    postgres_node: Path,
) -> None:
    """Its unit runs as the client's user, made by the sysusers oneshot before it, and reads the
    postgres module's env file in the folder the declaration leaves to the client (`program`)."""
    listed = _listed(postgres_node)
    declared = {r.get("path") or r["unit"]: r for r in listed}
    provisioner = unit_settings(declared[POSTGRES_UNIT]["content"])
    client = unit_settings(declared[CLIENT_UNIT]["content"])
    assert provisioner["User"] == client["User"]
    services = [r["unit"] for r in listed if r["type"] == "service"]
    assert services == [PurePosixPath(u).name for u in (SYSUSERS_UNIT, CLIENT_UNIT, POSTGRES_UNIT)]
    assert PurePosixPath(CLIENT_UNIT).name in provisioner["After"][0].split()
    argv = shlex.split(provisioner["ExecStart"][0])
    env_file = PurePosixPath(argv[argv.index("--env-file") + 1])
    module = json.loads((DEPLOY / "examples" / "postgres.json").read_text())["module"]
    assert env_file.name == f"{module}.env"
    assert declared[str(env_file.parent)]["unknown"] == "program"
    assert {r.get("owner") for r in listed} <= {"root:root", None}


def test_postgres_is_a_nodes_option() -> None:
    done = _generate("seat", "--postgres")
    assert done.returncode == 2 and "--postgres is a node's" in done.stderr


def _mesh_host(*args: str) -> str:
    command = [sys.executable, "-m", "mesh_host.cli", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=clean_environment(), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_mesh_host_lays_the_provisioner_down_and_keeps_the_operators_dropin(
    postgres_node: Path, tmp_path: Path
) -> None:
    root, state = bare_machine(tmp_path / "root"), tmp_path / "state"
    given = ("--root", str(root), "--state", str(state))
    said = _mesh_host("apply", str(postgres_node), *given)
    unit = root / POSTGRES_UNIT.lstrip("/")
    assert unit.read_bytes() == (DEPLOY / "systemd" / "mesh-postgres-provisioner.service").read_bytes()
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    dropins = root / POSTGRES_DROPINS.lstrip("/")
    assert stat.S_IMODE(dropins.stat().st_mode) == 0o755
    assert "mesh-postgres-provisioner.service  skipped: services are applied on the real machine" in said
    # Another database is the operator's drop-in: kept by the next apply and listed as the module's.
    dsn = dropins / "dsn.conf"
    dsn.write_text(
        '[Service]\nExecStart=\nExecStart=/opt/mesh-provisioner/bin/mesh-postgres-provisioner --dsn "host=db1"\n'
    )
    assert "nothing to change" in _mesh_host("apply", str(postgres_node), *given)
    assert dsn.exists()
    (entry,) = [
        e for e in json.loads(_mesh_host("owned", "--json", *given))["owned"] if e.get("path") == POSTGRES_DROPINS
    ]
    assert (entry["module"], entry["modules_files"]) == ("mesh-provisioner", [f"{POSTGRES_DROPINS}/dsn.conf"])


# --- the units deploy/host adds, as systemd reads them ------------------------------------------------


@pytest.fixture
def unit_root(tmp_path: Path) -> Path:
    """A root for `systemd-analyze verify`: systemd's own units, the node's units as the host lays
    them down, and the programs they run (verify refuses an ExecStart= it cannot find)."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: scripts/test installs it (apt-get install systemd)")
    own = next((d for d in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if d.is_dir()), None)
    sysusers = shutil.which("systemd-sysusers")
    if own is None or sysusers is None:
        pytest.fail("systemd's own units or systemd-sysusers are missing: scripts/test installs them (systemd)")
    root = tmp_path / "root"
    shutil.copytree(own, root / "usr/lib/systemd/system", symlinks=True)
    for path in (CLIENT_UNIT, SYSUSERS_UNIT, SEED_DROPIN):
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(content("node", path))
    programs = {CLIENT_UNIT: Path(sys.executable).parent / "mesh-provisioner-client", SYSUSERS_UNIT: Path(sysusers)}
    for unit, program in programs.items():
        runs = root / shlex.split(unit_settings(content("node", unit))["ExecStart"][0])[0].lstrip("/")
        runs.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(program, runs)
    return root


def _verify(root: Path) -> subprocess.CompletedProcess[str]:
    command = ["systemd-analyze", "verify", "--man=no", f"--root={root}", SYSUSERS_UNIT, CLIENT_UNIT]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


def test_systemd_analyze_verify_accepts_the_units_deploy_host_adds_without_a_warning(unit_root: Path) -> None:
    done = _verify(unit_root)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_verify_here_does_read_the_seed_dropin(unit_root: Path) -> None:
    """The check above could pass by looking at nothing: the same harness sees a fault in the drop-in."""
    dropin = unit_root / SEED_DROPIN.lstrip("/")
    dropin.write_text(dropin.read_text().replace("LoadCredential=", "LoadCredentials="))
    assert "Unknown key 'LoadCredentials'" in _verify(unit_root).stderr
