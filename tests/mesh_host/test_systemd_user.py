"""Service steps against a real systemd: a `systemd --user` manager of this test's own.

This machine's PID 1 is not systemd, and `systemd --user` refuses to start where
/run/systemd/system is missing (sd_booted). The manager runs in a private mount namespace
(`unshare --mount`) with a tmpfs over /run/systemd holding that folder, so nothing of the machine's
/run changes; its runtime, config and home folders are scratch ones. systemctl reaches it from
that namespace (`nsenter`: outside, it finds no /run/systemd/system and says "offline"), with
`--user` and XDG_RUNTIME_DIR (the runner below adds these: the host's own argv is otherwise run
as it is). The unit file is the declaration's, written by the host under --root into the
manager's own unit folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

import anyio
import pytest

from mesh_host.applying.apply import Host, Report, apply
from mesh_host.applying.roots import Root
from mesh_host.declaration import parse_declaration
from mesh_host.runner import DEFAULT_TIMEOUT, Ran, Runner, run
from tests.helpers import until

MANAGER = "mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system && exec {systemd} --user"
UNITS = PurePosixPath("/home/operator/.config/systemd/user")  # the manager's unit folder, under the root
UNIT = "mesh-host-probe.service"
UNIT_TEXT = "[Service]\nExecStart=/bin/sleep 600\n[Install]\nWantedBy=default.target\n"


def user_manager(runtime: Path, pid: int) -> Runner:
    """systemctl, run in the manager's mount namespace (where /run/systemd/system is), with --user."""

    def runner(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> Ran:
        assert argv[0] == "systemctl", argv
        command = ["nsenter", f"--target={pid}", "--mount", "systemctl", "--user", *argv[1:]]
        return run(command, timeout=timeout, env=os.environ | {"XDG_RUNTIME_DIR": str(runtime)})

    return runner


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[tuple[Path, Runner]]:
    systemd = shutil.which("systemd") or "/lib/systemd/systemd"
    if os.geteuid() != 0 or not Path(systemd).exists() or not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("a systemd --user manager in a mount namespace needs root, systemd and unshare")
    root, runtime = tmp_path / "root", tmp_path / "run"
    (root / UNITS.relative_to("/")).mkdir(parents=True)
    runtime.mkdir(mode=0o700)
    env = os.environ | {
        "XDG_RUNTIME_DIR": str(runtime),
        "HOME": str(root / "home/operator"),
        "XDG_CONFIG_HOME": str(root / "home/operator/.config"),
    }
    started = subprocess.Popen(  # our own argv
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", MANAGER.format(systemd=systemd)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runner = user_manager(runtime, started.pid)
    try:
        if not anyio.run(
            until, lambda: runner(["systemctl", "is-system-running"]).stdout.strip() in ("running", "degraded"), 20.0
        ):
            pytest.skip(f"systemd --user did not come up here (exit {started.poll()})")
        yield root, runner
    finally:
        started.terminate()
        try:
            started.wait(timeout=20)
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait()


def applied(root: Path, runner: Runner, *resources: Mapping[str, object]) -> Report:
    text = json.dumps({"declaration": 1, "resources": list(resources)})
    host = Host(Root(root), root.parent / "state", PurePosixPath("/home/operator"), runner, services=True)
    return apply(parse_declaration(text, "test.json"), host)


def service(state: str, *, enabled: bool) -> dict[str, object]:
    return {"type": "service", "unit": UNIT, "state": state, "enabled": enabled}


def shown(runner: Runner) -> str:
    return runner(["systemctl", "show", "--property=ActiveState,UnitFileState", "--", UNIT]).stdout


def test_a_real_systemd_starts_enables_stops_and_returns_a_unit(manager: tuple[Path, Runner]) -> None:
    root, runner = manager
    unit_file = {"type": "file", "path": str(UNITS / UNIT), "content": UNIT_TEXT, "mode": "0644"}
    report = applied(root, runner, unit_file, service("running", enabled=True))
    assert [(event.subject, event.what) for event in report.changes][1:] == [(UNIT, "enabled"), (UNIT, "started")]
    assert shown(runner) == "ActiveState=active\nUnitFileState=enabled\n"
    assert applied(root, runner, unit_file, service("running", enabled=True)).changes == ()
    report = applied(root, runner, unit_file, service("stopped", enabled=False))
    assert [event.what for event in report.changes] == ["disabled", "stopped"]
    assert shown(runner) == "ActiveState=inactive\nUnitFileState=disabled\n"
    applied(root, runner, unit_file, service("running", enabled=True))
    report = applied(root, runner, unit_file)  # no longer declared: returned to how the host found it
    assert [event.what for event in report.changes] == [
        "disabled (as the host found it)",
        "stopped (as the host found it)",
    ]
    assert shown(runner) == "ActiveState=inactive\nUnitFileState=disabled\n"
