"""The built host: one file, the interpreter inside, carrying deploy/host/node.json. Built once per
machine for what it is built from (`python -m mesh_host.build`, tens of seconds of one core: the
file and what the build said are kept in the user's cache, keyed by a hash of the host's sources,
the declaration, the interpreter and the installed distributions, so that a fresh clone of the same
sources takes the file another clone built), copied into an empty folder
and run there with nothing but PATH=/usr/bin:/bin: no virtualenv, no PYTHONPATH, no project on any
path. /proc shows the running process is the file itself, its interpreter the one it unpacked.

The build runs in the xdist group `heavy`: tests that load the machine for long run one after
another on one worker, not beside each other.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from backports import zstd

from mesh_host.build import SOURCE_ROOT
from tests.helpers import DEPLOY, clean_environment
from tests.mesh_host.deployed import DECLARATIONS, bare_machine, content

BUILD_TIMEOUT = 300  # seconds: about 30 alone on this machine's two cores, more beside other tests
pytestmark = [pytest.mark.xdist_group("heavy"), pytest.mark.timeout(BUILD_TIMEOUT + 120)]

CLEAN = {"PATH": "/usr/bin:/bin"}
MAX_SIZE = 64 * 2**20  # a bound that catches a build taking the whole virtualenv along
NODE = DECLARATIONS["node"]
# The declaration as the build is given it, from the checkout's root: the file says where it came from,
# and an absolute path would make each clone's file differ from the others' by that path alone.
GIVEN = NODE.relative_to(DEPLOY.parent)
CLIENT_TOML = "/etc/mesh-provisioner/client.toml"


@dataclass(frozen=True)
class Built:
    file: Path
    said: str  # what the build printed


@dataclass(frozen=True)
class FirstRun:
    """`profile`, the first run of the copied file: its output and its wall-clock time."""

    done: subprocess.CompletedProcess[str]
    seconds: float


def build_inputs() -> str:
    """A hash of everything the file is built from: the host's sources, the declaration it carries
    and its path as given (the file says where it came from), the interpreter, and every installed
    distribution's version (PyInstaller and the dependencies it packs) but pip's: the installer is never
    packed, and scripts/test upgrades it where a virtualenv made by hand keeps the one it came with."""
    digest = hashlib.sha256(f"{sys.version}\n{GIVEN}\n".encode())
    for path in sorted((SOURCE_ROOT / "mesh_host").rglob("*.py")):
        digest.update(f"{path.relative_to(SOURCE_ROOT)}\n".encode() + path.read_bytes())
    digest.update(NODE.read_bytes())
    installed = (d for d in importlib.metadata.distributions() if d.metadata["Name"] != "pip")
    versions = sorted(f"{d.metadata['Name']}=={d.version}" for d in installed)
    digest.update("\n".join(versions).encode())
    return digest.hexdigest()[:32]


def build_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mesh-provisioner-tests"


@pytest.fixture(scope="module")
def built() -> Built:
    """The file built from these inputs, once per machine: a run (or a concurrent one, waiting on
    the lock) that finds it built takes it and what the build said; a failed build keeps nothing."""
    folder = build_cache() / f"mesh-host-{build_inputs()}"
    folder.mkdir(parents=True, exist_ok=True)
    out, said = folder / "mesh-host", folder / "said"
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not said.exists():
            command = [sys.executable, "-m", "mesh_host.build", "--bundle", str(GIVEN), "--out", str(out)]
            done = subprocess.run(
                command,
                cwd=DEPLOY.parent,
                capture_output=True,
                text=True,
                check=False,
                env=clean_environment(),
                timeout=BUILD_TIMEOUT,
            )
            assert done.returncode == 0, done.stderr
            (folder / "said.partial").write_text(done.stdout)
            (folder / "said.partial").replace(said)
    return Built(out, said.read_text())


@pytest.fixture(scope="module")
def copied(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file alone in an empty folder."""
    folder = tmp_path_factory.mktemp("empty")
    shutil.copy2(built.file, folder / "mesh-host")
    return folder / "mesh-host"


@pytest.fixture(scope="module")
def first_run(copied: Path) -> FirstRun:
    started = time.monotonic()
    done = run(copied, "profile")
    return FirstRun(done, time.monotonic() - started)


def run(host: Path, *args: str, env: dict[str, str] = CLEAN) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(host), *args], cwd=host.parent, env=env, capture_output=True, text=True, check=False, timeout=120
    )


def test_the_build_is_one_executable_file_and_says_its_size_and_what_it_carries(built: Built) -> None:
    size = built.file.stat().st_size
    assert os.access(built.file, os.X_OK) and size < MAX_SIZE
    assert built.said.strip() == f"built {built.file}: {size:,} bytes ({size / 2**20:.1f} MiB), carrying {GIVEN}"


def test_profile_runs_in_an_empty_folder_in_a_clean_environment(first_run: FirstRun) -> None:
    done = first_run.done
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    assert lines[0] == f"linux/{machine}"
    assert re.fullmatch(r"cannot be asked to: \[.*\]", lines[-1])
    assert re.search(r"^(yes|no) +privileged +", done.stdout, re.MULTILINE)
    assert first_run.seconds < 30, f"cold start of profile: {first_run.seconds:.2f} s"


def test_bundle_prints_the_declaration_it_carries_and_where_it_came_from(copied: Path) -> None:
    text = NODE.read_text()
    done = run(copied, "bundle")
    assert done.returncode == 0, done.stderr
    heading, _, shown = done.stdout.partition("\n\n")
    assert heading == f"carries the declaration from {GIVEN} (sha256 {hashlib.sha256(text.encode()).hexdigest()})"
    assert json.loads(shown) == json.loads(text)
    carried = json.loads(run(copied, "bundle", "--json").stdout)["carried"]
    assert (carried["text"], carried["source"]) == (text, str(GIVEN))


def test_reconcile_applies_what_it_carries_under_a_temporary_root_and_owns_it(copied: Path, tmp_path: Path) -> None:
    root, state = bare_machine(tmp_path / "root"), tmp_path / "state"
    done = run(copied, "reconcile", "--root", str(root), "--state", str(state))
    assert done.returncode == 0, done.stderr
    assert "mesh-provisioner-client.service  skipped" in done.stdout  # services need the real machine
    assert (root / CLIENT_TOML.lstrip("/")).read_text() == content("node", CLIENT_TOML)
    assert (root / "run/mesh-provisioner/env").is_dir()
    again = run(copied, "reconcile", "--root", str(root), "--state", str(state))
    assert again.returncode == 0 and "nothing to change" in again.stdout, again.stdout + again.stderr
    owned = run(copied, "owned", "--root", str(root), "--state", str(state))
    assert owned.returncode == 0 and CLIENT_TOML in owned.stdout, owned.stdout + owned.stderr


def test_inventory_and_help_run_too(copied: Path) -> None:
    """Every command runs from the file: a module it needs and the build left out would fail here."""
    inventory = run(copied, "inventory", "--json")
    assert inventory.returncode == 0 and json.loads(inventory.stdout), inventory.stderr
    helped = run(copied, "--help")
    assert helped.returncode == 0 and "--root" in helped.stdout, helped.stderr


def test_the_file_holds_the_archive_resource_and_reads_zstd(copied: Path, tmp_path: Path) -> None:
    """zstd is read by a library the build must carry (backports.zstd before Python 3.14)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as written:
        info = tarfile.TarInfo("bin/tool")
        info.size, info.mode = 5, 0o755
        written.addfile(info, io.BytesIO(b"tool\n"))
    root = tmp_path / "root"
    (root / "opt").mkdir(parents=True)
    source = root / "tool.tar.zst"
    source.write_bytes(zstd.compress(buffer.getvalue()))
    resource = {"id": "tool", "type": "archive", "path": "/opt/tool", "source": "/tool.tar.zst",
                "sha256": hashlib.sha256(source.read_bytes()).hexdigest(), "mode": "0755"}  # fmt: skip
    declared = tmp_path / "tool.json"
    declared.write_text(json.dumps({"declaration": 1, "resources": [resource]}))
    done = run(copied, "apply", str(declared), "--root", str(root), "--state", str(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == "tool  /opt/tool  unpacked 2 members (5 bytes of files)"
    assert (root / "opt/tool/bin/tool").read_bytes() == b"tool\n"


def _children(pid: int) -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                yield int(entry.name)


def _interpreter_loaded(pid: int, within: float = 30.0) -> tuple[int, str]:
    """The process under `pid` that loaded libpython (the one-file loader's child), and its maps."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for candidate in (pid, *_children(pid)):
            try:
                maps = Path(f"/proc/{candidate}/maps").read_text()
            except OSError:
                continue
            if "libpython" in maps:
                return candidate, maps
        time.sleep(0.05)
    raise AssertionError(f"no process under {pid} loaded libpython within {within} s")


def test_the_running_process_is_the_file_itself_with_the_interpreter_it_carries(copied: Path, tmp_path: Path) -> None:
    """`apply -` waits on its standard input: meanwhile /proc shows what runs."""
    root = bare_machine(tmp_path / "root")
    command = [str(copied), "apply", "-", "--root", str(root), "--state", str(tmp_path / "state")]
    with subprocess.Popen(
        command, cwd=copied.parent, env=CLEAN, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            pid, maps = _interpreter_loaded(process.pid)
            assert Path(f"/proc/{pid}/exe").resolve() == copied.resolve()
            mapped = {line.split(None, 5)[5] for line in maps.splitlines() if len(line.split(None, 5)) == 6}
            (libpython,) = {path for path in mapped if "libpython" in path}
            environments = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path("/usr/lib/python3")}
            assert not [p for p in mapped if any(Path(p).is_relative_to(e) for e in environments)]
            assert Path(libpython).parent.name.startswith("_MEI"), libpython  # unpacked from the file
            out, _ = process.communicate(json.dumps({"declaration": 1, "resources": []}), timeout=60)
        finally:
            process.kill()
    assert process.returncode == 0 and "nothing to change" in out
