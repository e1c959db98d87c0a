"""deploy/ for a real deployment: the systemd units as systemd reads them, their paths against the
programs' defaults, the polkit rule as polkit runs it, the container definitions.

`systemd-analyze verify` runs on a temporary root holding the units, systemd's own units and the
console scripts of this virtualenv at the units' `/opt/mesh-provisioner/bin/` (verify refuses an
`ExecStart=` it cannot find). `./scripts/test` installs systemd-analyze and `node` (which runs the
polkit rule as polkit does) before any test runs: without them these tests fail, saying so.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from examples.postgres_provisioner.cli import build_parser as postgres_provisioner_parser
from provisioner.seat.settings import ServerSettings
from provisioner_client.settings import DEFAULT_CONFIG, ClientSettings
from registry.edge import load_settings
from tests.deploy.units import PROGRAMS, UNITS, unit_settings, verify
from tests.helpers import clean_environment, sh_env

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
# Where each unit's install steps are: the provider's with its example program.
INSTALLED_BY = {
    "seat": DEPLOY / "README.md",
    "client": DEPLOY / "README.md",
    "provider": ROOT / "examples" / "postgres_provisioner" / "README.md",
}
SETTINGS = {"seat": DEPLOY / "settings" / "server.toml", "client": DEPLOY / "settings" / "client.toml"}
CONTAINERS = {
    "seat": DEPLOY / "container" / "Containerfile.seat",
    "client": DEPLOY / "container" / "Containerfile.client",
}
SEAT_CONFIG = Path("/etc/mesh-provisioner/server.toml")  # `serve` reads no file by default: the unit names it


def exec_start(unit: Path) -> list[str]:
    (command,) = unit_settings(unit)["ExecStart"]
    return shlex.split(command)


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


# --- systemd-analyze -------------------------------------------------------------------------------


def test_systemd_analyze_verify_accepts_every_unit_without_a_warning(analyze: str, system_root: Path) -> None:
    done = verify(analyze, system_root, *(unit.name for unit in UNITS.values()))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_verify_here_does_report_a_misspelt_setting_and_a_missing_program(analyze: str, system_root: Path) -> None:
    """The check above could pass by looking at nothing: the same harness does see faults."""
    unit = system_root / "etc/systemd/system" / UNITS["seat"].name
    unit.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSystem=strictest"))
    (system_root / PROGRAMS.relative_to("/") / "mesh-provisioner-client").unlink()
    done = verify(analyze, system_root, UNITS["seat"].name, UNITS["client"].name)
    assert "Failed to parse protect system value" in done.stderr
    assert "mesh-provisioner-client is not executable" in done.stderr
    assert done.returncode != 0


@pytest.mark.parametrize("role", list(UNITS))
def test_systemd_analyze_security_rates_each_unit_at_most_2_of_10(analyze: str, system_root: Path, role: str) -> None:
    unit = f"/etc/systemd/system/{UNITS[role].name}"
    command = [analyze, "security", "--offline=yes", "--threshold=20", f"--root={system_root}", unit]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr


def test_the_sysusers_file_creates_the_client_units_user(analyze: str, tmp_path: Path) -> None:
    """`analyze` installs systemd where it is missing, systemd-sysusers with it: never a silent skip."""
    sysusers = shutil.which("systemd-sysusers")
    assert sysusers is not None, f"systemd-sysusers is missing beside {analyze}"
    (tmp_path / "etc").mkdir()
    conf = DEPLOY / "systemd" / "mesh-provisioner.sysusers.conf"
    command = [sysusers, f"--root={tmp_path}", "--dry-run", str(conf)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    user = unit_settings(UNITS["client"])["User"]
    assert f"Creating user '{user[0]}'" in done.stderr + done.stdout


# --- the units' hardening and paths against the programs' defaults ------------------------------------


@pytest.mark.parametrize("role", list(UNITS))
def test_each_unit_is_sandboxed_and_restarted_on_failure_only(role: str) -> None:
    found = unit_settings(UNITS[role])
    wanted = {
        "ProtectSystem": ["strict"],
        "NoNewPrivileges": ["yes"],
        "CapabilityBoundingSet": [""],
        "Restart": ["on-failure"],
        "PrivateTmp": ["yes"],
        "ProtectHome": ["yes"],
    }
    assert {key: found.get(key) for key in wanted} == wanted
    assert found.get("DynamicUser") == ["yes"] or found.get("User") == ["mesh-provisioner"]
    assert "ReadWritePaths" not in found  # what it writes is a directory systemd makes for it, nothing else


def test_the_client_unit_writes_env_files_where_the_client_writes_them_by_default_and_keeps_them() -> None:
    found = unit_settings(UNITS["client"])
    materialize = ClientSettings.model_fields["materialize"].default
    assert [Path("/run") / d for d in found["RuntimeDirectory"]] == [materialize]
    assert found["RuntimeDirectoryPreserve"] == ["yes"]
    argv = exec_start(UNITS["client"])
    assert argv[0] == str(PROGRAMS / "mesh-provisioner-client")
    assert argv[1:3] == ["reconcile", "--watch"]
    assert Path(option(argv, "--config")) == DEFAULT_CONFIG
    assert "--manifests" not in argv and "--materialize" not in argv and "--node" not in argv  # client.toml's


def test_the_provider_unit_applies_the_postgres_modules_env_file_as_the_client_writes_it() -> None:
    """The postgres module's file where the client unit writes it, read as the user that owns it
    (mode 0600), the flags its program takes, and PostgreSQL over its socket with no password."""
    found, client = unit_settings(UNITS["provider"]), unit_settings(UNITS["client"])
    argv = exec_start(UNITS["provider"])
    assert argv[0] == str(PROGRAMS / "mesh-postgres-provisioner")
    module = json.loads((DEPLOY / "examples" / "postgres.json").read_text())["module"]
    assert Path(option(argv, "--env-file")) == ClientSettings.model_fields["materialize"].default / f"{module}.env"
    assert (found["User"], found["Group"]) == (client["User"], client["Group"])
    args = postgres_provisioner_parser().parse_args(argv[1:])
    assert (args.watch, args.dsn, args.log_format) == (True, "host=/run/postgresql dbname=postgres", "json")
    assert "LoadCredential" not in found and "password" not in args.dsn


def test_the_seat_unit_reads_its_settings_file_and_its_seed_as_a_credential() -> None:
    found = unit_settings(UNITS["seat"])
    argv = exec_start(UNITS["seat"])
    assert argv[:2] == [str(PROGRAMS / "mesh-provisioner"), "serve"]
    assert Path(option(argv, "--config")) == SEAT_CONFIG
    (credential,) = found["LoadCredential"]
    name, source = credential.split(":", 1)
    assert (source, found["Environment"]) == ("/etc/mesh-provisioner/keys/seat.nk", [f"NATS_NKEY=%d/{name}"])


def test_client_toml_names_the_clients_default_folders_and_parses_as_its_settings() -> None:
    settings = load_settings(ClientSettings, {}, SETTINGS["client"], {})
    defaults = ClientSettings.model_fields
    assert (settings.manifests, settings.materialize) == (
        defaults["manifests"].default,
        defaults["materialize"].default,
    )
    assert tomllib.loads(SETTINGS["client"].read_text())["nats"]["nkey"] == "/etc/mesh-provisioner/keys/node.nk"


def test_server_toml_parses_as_the_seats_settings_and_names_the_grants_and_domains_files() -> None:
    settings = load_settings(ServerSettings, {}, SETTINGS["seat"], {})
    assert settings.grants_file == Path("/etc/mesh-provisioner/grants.json")
    assert settings.domains_file == Path("/etc/mesh-provisioner/domains.toml")


def _decided_paths() -> set[Path]:
    """Every path the deployment may name, from the programs' defaults and the settings files."""
    client = ClientSettings.model_fields
    seat = load_settings(ServerSettings, {}, SETTINGS["seat"], {})
    assert seat.grants_file is not None and seat.domains_file is not None
    return {
        DEFAULT_CONFIG,
        SEAT_CONFIG,
        client["manifests"].default,
        client["materialize"].default,
        seat.grants_file,
        seat.domains_file,
        Path("/etc/mesh-provisioner/keys"),
        Path("/etc/mesh-provisioner/mesh.toml"),  # the controller's mesh file (`grants --mesh`)
        Path("/var/lib/mesh-host"),  # mesh-host's footprint (its --state as root)
    }


MESH_PATH = re.compile(r"/(?:etc|run|var/lib|var/run|opt)/mesh[\w.-]*(?:/[\w.<>%-]+)*")
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    DEPLOY / "README.md",
    *UNITS.values(),
    INSTALLED_BY["provider"],
    *SETTINGS.values(),
    *CONTAINERS.values(),
    DEPLOY / "polkit" / "50-mesh-provisioner-client.rules",
]


def _mesh_paths(document: Path) -> Iterator[Path]:
    for match in MESH_PATH.finditer(document.read_text()):
        yield Path(match.group(0).rstrip("."))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_in_the_readmes_units_and_images_is_one_of_the_decided_ones(document: Path) -> None:
    decided = _decided_paths()
    allowed = [*decided, PROGRAMS.parent, Path("/etc/mesh-provisioner/nats-ca.pem")]  # the last in comments
    strays = sorted({str(p) for p in _mesh_paths(document) if not any(p == a or a in p.parents for a in allowed)})
    assert strays == []


def test_the_readmes_name_every_decided_path() -> None:
    readmes = "".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), DEPLOY / "README.md"])
    assert [str(p) for p in sorted(_decided_paths()) if str(p) not in readmes] == []


# --- the polkit rule, run as polkit runs it ------------------------------------------------------------

POLKIT_HARNESS = """
const fs = require("fs");
const rules = [];
const polkit = {Result: {YES: "yes", NO: "no", NOT_HANDLED: null}, addRule: (rule) => rules.push(rule)};
new Function("polkit", fs.readFileSync(process.argv[2], "utf8"))(polkit);
const asked = JSON.parse(process.argv[3]);
console.log(JSON.stringify(asked.map(([id, user, unit, verb]) =>
    rules.map((rule) => rule({id, lookup: (k) => ({unit, verb})[k]}, {user})).find((r) => r != null) ?? null)));
"""
NODE_MISSING = (
    "node is not installed, so the polkit rule cannot be run: install it (Debian: sudo apt-get install nodejs; "
    "./scripts/test does so when run as root)"
)
MANAGE = "org.freedesktop.systemd1.manage-units"
ASKED = {
    (MANAGE, "mesh-provisioner", "app.service", "try-restart"): "yes",
    (MANAGE, "mesh-provisioner", "app.service", "restart"): "yes",
    (MANAGE, "mesh-provisioner", "postgres.service", "reload-or-try-restart"): "yes",
    (MANAGE, "mesh-provisioner", "app.service", "stop"): None,
    (MANAGE, "mesh-provisioner", "app.service", "start"): None,
    (MANAGE, "mesh-provisioner", "sshd.service", "restart"): None,
    (MANAGE, "someone", "app.service", "try-restart"): None,
    ("org.freedesktop.systemd1.manage-unit-files", "mesh-provisioner", "app.service", "enable"): None,
}


def test_the_polkit_rule_lets_the_client_restart_its_listed_units_and_nothing_else(tmp_path: Path) -> None:
    node = shutil.which("node") or shutil.which("nodejs") or pytest.fail(NODE_MISSING)
    harness = tmp_path / "harness.js"
    harness.write_text(POLKIT_HARNESS)
    rule = DEPLOY / "polkit" / "50-mesh-provisioner-client.rules"
    done = subprocess.run([node, harness, rule, json.dumps(list(ASKED))], capture_output=True, text=True, check=True)
    assert dict(zip(ASKED, json.loads(done.stdout), strict=True)) == ASKED


# --- container definitions ---------------------------------------------------------------------------


def _instructions(containerfile: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", containerfile.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


@pytest.mark.parametrize("role", list(CONTAINERS))
def test_each_container_definition_builds_from_python_slim_runs_our_program_and_not_as_root(role: str) -> None:
    steps = _instructions(CONTAINERS[role])
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    bases = [arguments.split()[0] for op, arguments in steps if op == "FROM"]
    assert bases and set(bases) == {"python:3.11-slim"}
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM") :]
    users = [arguments for op, arguments in final if op == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    (entrypoint,) = [json.loads(arguments) for op, arguments in final if op == "ENTRYPOINT"]
    assert entrypoint == [{"seat": "mesh-provisioner", "client": "mesh-provisioner-client"}[role]]
    assert entrypoint[0] in scripts
    (command,) = [json.loads(arguments) for op, arguments in final if op == "CMD"]
    assert Path(option(command, "--config")) == {"seat": SEAT_CONFIG, "client": DEFAULT_CONFIG}[role]
    for op, arguments in steps:
        if op == "COPY" and not arguments.startswith("--from"):
            *sources, _ = arguments.split()
            assert [s for s in sources if not (ROOT / s).exists()] == []
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = {s.strip("./") for op, arguments in steps if op == "COPY" for s in arguments.split()[:-1]}
    assert {p.rstrip("*") for p in packages["include"]} <= copied


def _builder() -> list[str] | None:
    for tool in ("podman", "docker"):
        found = shutil.which(tool)
        if found and subprocess.run([found, "info"], capture_output=True, check=False).returncode == 0:
            return [found]
    return None


@pytest.mark.parametrize("role", list(CONTAINERS))
def test_each_container_image_builds_where_a_builder_is_available(role: str) -> None:
    builder = _builder() or pytest.skip("no working podman or docker here: the definitions are linted above")
    command = [*builder, "build", "-f", str(CONTAINERS[role]), "-t", f"mesh-provisioner-{role}:test", str(ROOT)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    run = [*builder, "run", "--rm", f"mesh-provisioner-{role}:test", "--help"]
    assert subprocess.run(run, capture_output=True, check=False, timeout=120).returncode == 0


# --- deploy/README.md's install steps ------------------------------------------------------------------

INSTALL = re.compile(r"^\s*install -D -m (?P<mode>0[0-7]{3})(?: -g (?P<group>\S+))? (?P<source>\S+) (?P<target>\S+)$")


def _install_steps(readme: Path = DEPLOY / "README.md") -> list[re.Match[str]]:
    return [m for line in readme.read_text().splitlines() if (m := INSTALL.match(line))]


def test_deploy_readme_installs_every_deploy_file_it_names_and_each_unit_settings_file_and_seed() -> None:
    steps = _install_steps()
    sources = [m["source"] for m in steps if m["source"].startswith("deploy/")]
    assert [s for s in sources if not (ROOT / s).is_file()] == []
    targets = {m["target"]: m for m in steps}
    for role in ("seat", "client"):
        assert f"/etc/systemd/system/{UNITS[role].name}" in targets
    assert targets[str(DEFAULT_CONFIG)]["source"] == "deploy/settings/client.toml"
    assert targets[str(SEAT_CONFIG)]["source"] == "deploy/settings/server.toml"
    seat_seed = unit_settings(UNITS["seat"])["LoadCredential"][0].split(":", 1)[1]
    assert targets[seat_seed]["mode"] == "0600"
    node_seed = tomllib.loads(SETTINGS["client"].read_text())["nats"]["nkey"]
    # Read by the client's user through its group, never by others.
    assert (targets[node_seed]["mode"], targets[node_seed]["group"]) == (
        "0640",
        unit_settings(UNITS["client"])["Group"][0],
    )


def test_the_postgres_provisioners_readme_installs_its_unit_from_deploy() -> None:
    steps = _install_steps(INSTALLED_BY["provider"])
    assert [m["source"] for m in steps if not (ROOT / m["source"]).is_file()] == []
    unit = UNITS["provider"]
    targets = {m["target"]: m["source"] for m in steps}
    assert targets[f"/etc/systemd/system/{unit.name}"] == str(unit.relative_to(ROOT))


# --- the seat and a node, started as the units start them, from deploy/settings -----------------------


def _as_installed(settings: Path, replacements: dict[str, str], to: Path) -> Path:
    """`settings` with its machine paths and URL pointed at this test's."""
    text = settings.read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    to.write_text(text)
    return to


def _argv(role: str, replaced: dict[str, str]) -> list[str]:
    """The unit's ExecStart, its program taken from this virtualenv and `replaced` options' values changed."""
    argv = exec_start(UNITS[role])
    argv[0] = str(Path(sys.executable).parent / Path(argv[0]).name)
    for name, value in replaced.items():
        argv[argv.index(name) + 1] = value
    return argv


async def test_the_seat_and_a_node_run_from_the_deploy_settings_files_as_the_units_start_them(
    deploy_nats: str, tmp_path: Path
) -> None:
    """The seat's ExecStart with server.toml and its seed through NATS_NKEY (as LoadCredential hands
    it over), a node's one-shot reconcile and status with client.toml, on the generated accounts."""
    keys = DEPLOY / "dev-keys"
    server_toml = _as_installed(
        SETTINGS["seat"],
        {
            "nats://nats.example:4222": deploy_nats,
            "/etc/mesh-provisioner/grants.json": str(DEPLOY / "mesh" / "grants.json"),
            "/etc/mesh-provisioner/domains.toml": str(DEPLOY / "domains.toml"),
        },
        tmp_path / "server.toml",
    )
    credentials = tmp_path / "credentials"  # what %d names for the unit
    credentials.mkdir(mode=0o700)
    shutil.copyfile(keys / "seat.nk", credentials / "seat.nk")
    seat_env = {**clean_environment(), "NATS_NKEY": str(credentials / "seat.nk")}

    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "hello.json").write_text('{"module": "hello", "env": {"GREETING": "hello"}}')
    client_toml = _as_installed(
        SETTINGS["client"],
        {
            'node = "n1"': 'node = "n1"',
            "nats://nats.example:4222": deploy_nats,
            '"/etc/mesh-provisioner/keys/node.nk"': json.dumps(str(keys / "node-n1.nk")),
            '"/etc/mesh-provisioner/modules"': json.dumps(str(tmp_path / "modules")),
            '"/run/mesh-provisioner/env"': json.dumps(str(tmp_path / "env")),
        },
        tmp_path / "client.toml",
    )
    client = _argv("client", {"--config": str(client_toml)})

    async with (
        await anyio.open_process(_argv("seat", {"--config": str(server_toml)}), env=seat_env) as seat,
        await anyio.open_process(client, env=clean_environment()) as node,
    ):
        try:
            with anyio.fail_after(60):  # the client waits for the seat's buckets and verb by itself
                while not (tmp_path / "env" / "hello.env").exists():
                    await anyio.sleep(0.2)
            assert sh_env(tmp_path / "env" / "hello.env") == {"GREETING": "hello"}
            status = await anyio.run_process(
                [client[0], "status", "--config", str(client_toml)], env=clean_environment(), check=False
            )
            assert status.returncode == 0, status.stdout.decode() + status.stderr.decode()
            assert "hello: applied" in status.stdout.decode()
            # deploy/README.md, step 6: the operator asks on its own account.
            operator = ["--nkey", str(keys / "operator-ops.nk"), "-s", deploy_nats]
            query = [str(Path(sys.executable).parent / "mesh-provisioner"), "query", "applied", *operator]
            asked = await anyio.run_process(query, env=clean_environment(), check=False)
            assert asked.returncode == 0, asked.stderr.decode()
            assert re.search(r"^n1\s+hello\s+applied\s", asked.stdout.decode(), re.MULTILINE), asked.stdout.decode()
            # MemoryDenyWriteExecute=yes refuses a mapping both writable and executable.
            assert _writable_and_executable(seat.pid) == [] and _writable_and_executable(node.pid) == []
        finally:
            for process in (node, seat):
                process.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                codes = (await node.wait(), await seat.wait())
    assert codes == (0, 0)  # a clean stop, which Restart=on-failure leaves stopped


def _writable_and_executable(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return [line for line in maps if line.split()[1].startswith("rwx")]


def test_the_images_build_stage_copies_enough_to_build_the_package_with_our_console_scripts(tmp_path: Path) -> None:
    """The build stage's COPY instructions replayed into an empty context, and the wheel built from
    it: a source the image forgets (README.md, a package) fails here, without a container builder."""
    steps = _instructions(CONTAINERS["seat"])
    build = steps[: next(i for i, (op, _) in enumerate(steps[1:], 1) if op == "FROM")]
    assert build == _instructions(CONTAINERS["client"])[: len(build)], "both images build the same way"
    context = tmp_path / "src"
    for op, arguments in build:
        if op == "COPY":
            *sources, target = arguments.split()
            for source in sources:  # a folder to its target, files into the target folder
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, context / target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    (context / target).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / source, context / target / Path(source).name)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "out"), str(context)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("mesh_provisioner-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    for containerfile in CONTAINERS.values():
        (entrypoint,) = [json.loads(a) for op, a in _instructions(containerfile) if op == "ENTRYPOINT"]
        assert f"\n{entrypoint[0]} = " in scripts
    packages = {name.split("/", 1)[0] for name in names if name.endswith(".py")}
    assert {"registry", "provisioner", "provisioner_client", "mesh_dev", "examples"} <= packages
