"""The README's run command end to end: `mesh-provisioner-dev` materializes the examples, tells the
tools where its NATS is (a second shell's commands work without flags), and stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from registry.edge import DEV_CONTEXT, NatsContexts
from tests.helpers import clean_environment

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def test_dev_runs_the_whole_loop_tells_the_tools_where_it_is_and_stops_on_sigterm(tmp_path: Path) -> None:
    env_dir = tmp_path / "state" / "demo" / "env"
    modules = sorted(p.stem for p in EXAMPLES.glob("*.json"))
    environ = clean_environment() | {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    contexts = NatsContexts(tmp_path / "config" / "nats")
    command = [sys.executable, "-m", "mesh_dev.cli", "--state-dir", str(tmp_path / "state"), "--no-postgres"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)
    try:
        deadline = time.monotonic() + 30
        while sorted(p.stem for p in env_dir.glob("*.env")) != modules:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, f"no env files for {modules} in {env_dir}"
            time.sleep(0.1)
        for path in env_dir.glob("*.env"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        context = contexts.read(DEV_CONTEXT)
        assert (context.url.startswith("nats://127.0.0.1:"), context.mesh_provisioner_dev_pid) == (True, process.pid)
        assert stat.S_IMODE(contexts.path(DEV_CONTEXT).stat().st_mode) == 0o600
        second_shell = _second_shell(environ, env_dir)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line] == [], (
        "a healthy start and stop log no warning"
    )
    assert "mesh-provisioner-dev is running" in output
    assert f"the tools find it through the nats context {DEV_CONTEXT}" in output
    assert "  mesh-provisioner query needs --node node-1\n" in output
    assert "applied" in output
    assert second_shell["query"] == {"node-1"}
    assert second_shell["status"] == "node-1"
    assert not contexts.path(DEV_CONTEXT).exists()


def _second_shell(environ: dict[str, str], env_dir: Path) -> dict[str, object]:
    """The README's commands from another shell, without a NATS flag or variable."""
    query = _run(["mesh-provisioner", "query", "needs", "--node", "node-1", "--jsonl"], environ)
    status = _run(
        ["mesh-provisioner-client", "status", "--node", "node-1", "--materialize", str(env_dir), "--json"], environ
    )
    assert query.returncode == 0, query.stderr
    assert status.returncode in (0, 1), status.stderr  # 1: something pending; never 3, the bus unreachable
    return {
        "query": {json.loads(line)["node"] for line in query.stdout.splitlines()},
        "status": json.loads(status.stdout)["node"],
    }


def _run(script_and_args: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A console script of this environment, run from elsewhere than the clone."""
    command = [str(Path(sys.executable).parent / script_and_args[0]), *script_and_args[1:]]
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=60, check=False, cwd=os.sep)
