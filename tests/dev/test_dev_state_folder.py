"""The dev loop owns its state folder: a second loop on it is refused before it touches anything,
the first keeps answering, and the banner's commands work as printed in a fresh shell."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mesh_dev.ownership import LOCK_FILE, StateInUse, owned
from registry.edge import DEV_CONTEXT, NatsContexts
from tests.helpers import clean_environment

READY = "Ctrl-C stops\n"  # the demo's summary line, printed once every example is applied
SECOND_SHELL = re.compile(r"^(?:Ask it from another terminal:|.*from another terminal:)\n((?:  \S.*\n)+)", re.M)


def test_a_second_owner_is_refused_and_the_lock_file_is_left_as_it_was(tmp_path: Path) -> None:
    with owned(tmp_path) as fd:
        held = (tmp_path / LOCK_FILE).read_bytes()
        with pytest.raises(StateInUse) as refused, owned(tmp_path):
            pytest.fail("a second owner was let in")
        assert (tmp_path / LOCK_FILE).read_bytes() == held
        assert f"(pid {os.getpid()})" in str(refused.value), str(refused.value)
        assert fd >= 0
    with owned(tmp_path):  # released with its descriptor: a lock file left behind never blocks
        pass


def test_a_lock_file_left_by_a_killed_loop_does_not_block(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("999999 mesh-provisioner-dev --state-dir gone\n")
    with owned(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().startswith(f"{os.getpid()} ")


def test_a_second_loop_on_the_same_folder_is_refused_and_the_first_still_answers(tmp_path: Path) -> None:
    state, config = tmp_path / "state", tmp_path / "config"
    environ = clean_environment() | {"XDG_CONFIG_HOME": str(config)}
    command = [str(Path(sys.executable).parent / "mesh-provisioner-dev"), "--state-dir", "state", "--no-postgres"]
    output = tmp_path / "first.out"
    with output.open("w") as out:
        first = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True, env=environ, cwd=tmp_path)
    try:
        banner = _until_ready(first, output)
        before = _kept(state, config)
        second = subprocess.run(
            command, capture_output=True, text=True, env=environ, cwd=tmp_path, timeout=60, check=False
        )
        assert second.returncode == 6, second.stderr
        assert f"mesh-provisioner-dev --state-dir state --no-postgres (pid {first.pid})" in second.stderr
        assert "nothing was changed" in second.stderr
        assert second.stdout == ""
        assert _kept(state, config) == before, "the refused loop rewrote or removed a file"
        assert len(_servers_on(state)) == 1, "a second nats-server on the same store"
        reset = Path(__file__).resolve().parents[2] / "scripts" / "run"
        refused = subprocess.run(
            [str(reset), "--reset", "--state-dir", str(state)], capture_output=True, text=True, timeout=60, check=False
        )
        assert (refused.returncode, "nothing was removed" in refused.stderr) == (6, True), refused.stderr
        assert _kept(state, config) == before, "--reset touched the folder of a running loop"
        shells = _second_shell_blocks(banner)
        assert any("mesh-provisioner query needs --node node-1" in block for block in shells), banner
        assert any("mesh-provisioner-client status --config" in block for block in shells), banner
        answers = [_in_a_fresh_shell(block, tmp_path, config) for block in shells]
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    assert first.returncode == 0, output.read_text()
    for block, done in zip(shells, answers, strict=True):
        assert done.returncode == 0, f"{block}\n{done.stdout}{done.stderr}"
    assert "node-1" in "".join(done.stdout for done in answers)


def _until_ready(process: subprocess.Popen[str], output: Path) -> str:
    deadline = time.monotonic() + 60
    while READY not in (text := output.read_text()):
        assert process.poll() is None, text
        assert time.monotonic() < deadline, f"the demo never said it was watching:\n{text}"
        time.sleep(0.1)
    return text


def _kept(state: Path, config: Path) -> dict[str, tuple[int, bytes]]:
    """What a second loop could rewrite or remove, each file's mtime and content: its settings files,
    the lock and the nats context (JetStream's own files change as the first loop works)."""
    files = [state / LOCK_FILE, state / "nats" / "nats-server.conf", state / "demo" / "client.toml"]
    files += [state / "demo" / "seeded", NatsContexts(config / "nats").path(DEV_CONTEXT)]
    return {str(path): (path.stat().st_mtime_ns, path.read_bytes()) for path in files}


def _servers_on(state: Path) -> list[int]:
    """The nats-servers running with `state`'s configuration."""
    conf = str(Path("state") / "nats" / "nats-server.conf")
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
            cwd = Path(cmdline.parent / "cwd").resolve()
        except OSError:
            continue
        if any(w.decode(errors="replace") == conf for w in words) and cwd == state.parent:
            found.append(int(cmdline.parent.name))
    return found


def _second_shell_blocks(banner: str) -> list[str]:
    return list(SECOND_SHELL.findall(banner))


def _in_a_fresh_shell(block: str, home: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """`block`'s commands as printed, in a login-less bash that never saw the virtualenv: from the
    home folder, with the system's PATH."""
    script = "set -e\n" + "".join(line.strip() + "\n" for line in block.splitlines())
    environ = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "XDG_CONFIG_HOME": str(config)}
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        capture_output=True,
        text=True,
        env=environ,
        cwd=home,
        timeout=120,
        check=False,
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """scripts/run and pyproject.toml in a folder of their own, its .venv's programs stand-ins that
    say how they were called (pip's network and a real start are not what is judged here)."""
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "scripts").mkdir()
    shutil.copy2(root / "scripts" / "run", tmp_path / "scripts" / "run")
    shutil.copy2(root / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "mesh-provisioner-dev"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/calls"\n')
        (bin_dir / name).chmod(0o755)
    return tmp_path


def test_scripts_run_installs_once_says_what_and_again_only_when_pyproject_changes(checkout: Path) -> None:
    def run() -> tuple[str, list[str]]:
        (checkout / "calls").unlink(missing_ok=True)
        done = subprocess.run(
            [str(checkout / "scripts" / "run"), "--nope"], capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout, (checkout / "calls").read_text().splitlines()

    first, calls = run()
    assert "== installing mesh-provisioner (editable, extras local,postgres" in first
    assert calls[-2:] == ["python -m pip install --quiet -e .[local,postgres]", "mesh-provisioner-dev --nope"]
    again, calls = run()
    assert (again, calls) == ("", ["mesh-provisioner-dev --nope"]), "nothing changed: straight to the program"
    with (checkout / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n# a change\n")
    changed, calls = run()
    assert "== installing" in changed
    assert calls[-1] == "mesh-provisioner-dev --nope"


def test_a_mistyped_flag_is_answered_with_a_short_usage() -> None:
    program = Path(sys.executable).parent / "mesh-provisioner-dev"
    done = subprocess.run([str(program), "--nope"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "usage: mesh-provisioner-dev [--state-dir PATH] [--no-demo] [--no-postgres] [--config PATH] [server settings]",
        "mesh-provisioner-dev: error: unrecognized arguments: --nope; did you mean --no-demo?",
    ]
