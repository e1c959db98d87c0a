"""The README's run command end to end: `mesh-provisioner-dev` materializes the examples and stops cleanly."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "deploy" / "examples"


def test_dev_runs_the_whole_loop_and_stops_on_sigterm(tmp_path: Path) -> None:
    env_dir = tmp_path / "state" / "demo" / "env"
    modules = sorted(p.stem for p in EXAMPLES.glob("*.json"))
    command = [sys.executable, "-m", "mesh_dev.cli", "--state-dir", str(tmp_path / "state")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while sorted(p.stem for p in env_dir.glob("*.env")) != modules:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, f"no env files for {modules} in {env_dir}"
            time.sleep(0.1)
        for path in env_dir.glob("*.env"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "mesh-provisioner-dev is running" in output
    assert "applied" in output
