"""`mesh-host` as an operator runs it: every command, --json, --state, --root, --dry-run and the exit
codes, on real files under a temporary root, as root and as nobody."""

from __future__ import annotations

import io
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import mesh_host.bundle
import mesh_host.cli
from mesh_host.bundle import Carried
from mesh_host.cli import (
    EXIT_CLOSED_PIPE,
    EXIT_DECLARATION_REFUSED,
    EXIT_FAILED,
    EXIT_LOCAL,
    EXIT_NOTHING_CARRIED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WOULD_CHANGE,
    main,
)
from tests.mesh_host.sandbox import USERS, Machine, as_user, machine_for, snapshot

NODE: dict[str, Any] = {
    "declaration": 1,
    "resources": [
        {"type": "directory", "path": "/etc/app", "mode": "0755", "unknown": "module", "module": "app"},
        {"type": "file", "path": "/etc/app/app.toml", "content": "port = 1\n", "mode": "0640"},
        {"type": "service", "unit": "app.service", "state": "running", "enabled": True},
    ],
}


@dataclass(frozen=True)
class Said:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture(params=USERS)
def machine(request: pytest.FixtureRequest) -> Iterator[Machine]:
    for machine in machine_for(request.param):
        machine.folder("/etc")
        yield machine


def host(machine: Machine, *argv: str, state: bool = True, stdin: str = "") -> Said:
    """`mesh-host ARGV --root ROOT [--state STATE]`, run as the machine's user."""
    where = ["--root", str(machine.root), *(["--state", str(machine.state)] if state else [])]

    def task() -> Said:
        out, err = io.StringIO(), io.StringIO()
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
        try:
            with redirect_stdout(out), redirect_stderr(err):
                code = main([*argv, *where])
        finally:
            sys.stdin = sys.__stdin__
        return Said(code, out.getvalue(), err.getvalue())

    return as_user(machine.user, task)


def declaration(machine: Machine, content: dict[str, object] = NODE) -> str:
    path = machine.base / "node.json"
    path.write_text(json.dumps(content))
    path.chmod(0o644)
    return str(path)


def test_help_says_what_root_is_for_and_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert ended.value.code == 0
    assert "--root DIR prefixes every path with DIR: the declaration's, the default --state and the moved-out" in said
    for code, meaning in mesh_host.cli.EXIT_CODES.items():
        assert f"{code} {meaning}" in said
    for particular in ("a step failed", "another mesh-host holds", "--dry-run: the machine does not match"):
        assert particular in said
    with pytest.raises(SystemExit):
        main(["owned", "--help"])
    assert "--root DIR prefix every path with DIR, for tests and image building" in " ".join(
        capsys.readouterr().out.split()
    )
    for command in ("profile", "inventory", "apply", "reconcile", "bundle", "owned"):
        assert f" {command} " in said


def test_apply_lays_down_then_finds_nothing_to_change(machine: Machine) -> None:
    said = host(machine, "apply", declaration(machine))
    assert said.code == EXIT_OK, said.err
    assert said.out.splitlines() == [
        "resources[0]  /etc/app  created (0755 as the host)",
        "resources[1]  /etc/app/app.toml  created (9 bytes, 0640 as the host)",
        f"note: resources[2]  app.service  skipped: services are applied on the real machine, not under --root "
        f"{machine.root}",
        "changed 2",
    ]
    path = declaration(machine)
    before = snapshot(machine.base)
    again = host(machine, "apply", path, "--json")
    assert again.code == EXIT_OK and again.json["changes"] == [] and again.json["ok"] is True
    assert snapshot(machine.base) == before


def test_a_refused_declaration_changes_nothing_and_says_where(machine: Machine) -> None:
    wrong = {"declaration": 1, "resources": [*NODE["resources"], {"type": "package", "name": "nginx"}]}
    path = declaration(machine, wrong)
    before = snapshot(machine.base)
    said = host(machine, "apply", path)
    assert said.code == EXIT_DECLARATION_REFUSED and said.out == ""
    assert said.err.endswith(
        "node.json: declaration refused whole, nothing was changed:\n"
        "  resources[3].type: 'package' is not a resource type (directory, file, archive, service)\n"
    )
    assert snapshot(machine.base) == before
    said = host(machine, "apply", path, "--json")
    assert said.code == EXIT_DECLARATION_REFUSED
    assert said.json["refused"] == {"source": path, "problems": [
        "resources[3].type: 'package' is not a resource type (directory, file, archive, service)"
    ]}  # fmt: skip


def test_a_failed_step_exits_1_printing_what_was_done_before_it(machine: Machine) -> None:
    broken = {"declaration": 1, "resources": [NODE["resources"][0], {
        "type": "file", "path": "/srv/missing/x", "content": "", "mode": "0644"}]}  # fmt: skip
    said = host(machine, "apply", declaration(machine, broken))
    assert said.code == EXIT_FAILED
    assert said.out.splitlines() == ["resources[0]  /etc/app  created (0755 as the host)", "done before it: 1"]
    assert said.err.startswith("mesh-host: resources[1] /srv/missing/x failed: its folder /srv/missing (under ")
    assert said.err.endswith("does not exist: declare it as a directory before; no later step ran\n")
    said = host(machine, "apply", declaration(machine, broken), "--json")
    assert said.json["ok"] is False and said.json["failed"]["where"] == "resources[1]"


def test_a_dry_run_exits_8_while_something_would_change_and_0_once_it_matches(machine: Machine) -> None:
    path = declaration(machine)
    before = snapshot(machine.base)
    said = host(machine, "apply", path, "--dry-run")
    assert said.code == EXIT_WOULD_CHANGE and said.out.splitlines()[-1] == "would change 2"
    assert snapshot(machine.base) == before
    host(machine, "apply", path)
    assert host(machine, "apply", path, "--dry-run").code == EXIT_OK


def test_apply_reads_standard_input(machine: Machine) -> None:
    said = host(machine, "apply", "-", stdin=json.dumps(NODE))
    assert said.code == EXIT_OK and machine.real("/etc/app/app.toml").read_text() == "port = 1\n"
    said = host(machine, "apply", "-", stdin="{")
    assert said.code == EXIT_DECLARATION_REFUSED and said.err.startswith(
        "mesh-host: standard input: declaration refused"
    )
    said = host(machine, "apply", "-", stdin=" " * (8 * 1024 * 1024 + 1))  # read no further than the bound
    assert said.code == EXIT_DECLARATION_REFUSED and "larger than the 8388608 bytes a declaration may be" in said.err


def test_owned_lists_the_footprint_and_the_modules_files(machine: Machine) -> None:
    assert (
        host(machine, "owned").out == "this host owns nothing: it has applied nothing here (or all of it was removed)\n"
    )
    host(machine, "apply", declaration(machine))
    machine.stranger("/etc/app/theirs.toml")
    said = host(machine, "owned")
    assert said.code == EXIT_OK
    assert said.out.splitlines() == [
        "directory  /etc/app  created 0755  unknown=module of module app",
        "  app's  /etc/app/theirs.toml",
        "file       /etc/app/app.toml  created 0640",
    ]
    owned = host(machine, "owned", "--json").json["owned"]
    assert [entry["path"] for entry in owned] == ["/etc/app", "/etc/app/app.toml"]


def test_the_state_defaults_inside_the_root(machine: Machine) -> None:
    assert host(machine, "apply", declaration(machine), state=False).code == EXIT_OK
    home = pwd.getpwnam(machine.user).pw_dir.lstrip("/") if machine.user != "root" else ""
    inside = "var/lib/mesh-host" if machine.privileged else os.path.join(home, ".local/state/mesh-host")  # home "": /
    assert (machine.root / inside / "footprint.json").is_file() and not machine.state.exists()
    assert "/etc/app/app.toml" in host(machine, "owned", state=False).out


def test_a_footprint_that_is_not_ours_exits_12(machine: Machine) -> None:
    machine.state.mkdir()
    (machine.state / "footprint.json").write_text("{")
    machine.give(machine.state / "footprint.json")
    said = host(machine, "apply", declaration(machine))
    assert said.code == EXIT_LOCAL and "not a footprint this host reads" in said.err
    assert not machine.real("/etc/app").exists()


def test_reconcile_in_a_default_build_refuses_saying_so(machine: Machine) -> None:
    said = host(machine, "reconcile")
    assert said.code == EXIT_NOTHING_CARRIED
    assert said.err.startswith("mesh-host: this host carries no declaration (a default build): nothing to reconcile")
    assert host(machine, "reconcile", "--json").json == {"ok": False, "error": said.err[11:-1], "carried": None}
    said = host(machine, "bundle")
    assert (said.code, said.out) == (EXIT_OK, "this host carries no declaration: a default build (reconcile refuses)\n")


def test_reconcile_applies_what_the_host_carries(machine: Machine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mesh_host.bundle, "carried", lambda: Carried(json.dumps(NODE), "deploy/host/node.json"))
    said = host(machine, "reconcile")
    assert said.code == EXIT_OK and machine.real("/etc/app/app.toml").read_text() == "port = 1\n"
    said = host(machine, "bundle")
    assert said.out.startswith("carries the declaration from deploy/host/node.json (sha256 ")
    assert json.loads(said.out.split("\n\n", 1)[1]) == NODE
    assert host(machine, "bundle", "--json").json["carried"]["source"] == "deploy/host/node.json"


def test_a_carried_declaration_the_host_refuses_is_said_by_bundle_and_reconcile(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mesh_host.bundle, "carried", lambda: Carried('{"declaration": 2}', "old.json"))
    said = host(machine, "bundle")
    assert (
        said.code == EXIT_DECLARATION_REFUSED
        and "the declaration carried from old.json: declaration refused" in said.err
    )
    assert host(machine, "reconcile").code == EXIT_DECLARATION_REFUSED


def test_options_come_after_the_command_as_in_every_program(machine: Machine) -> None:
    host(machine, "apply", declaration(machine))
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["owned", "--json", "--root", str(machine.root), "--state", str(machine.state)])
    assert code == EXIT_OK and len(json.loads(out.getvalue())["owned"]) == 2
    err = io.StringIO()
    with pytest.raises(SystemExit) as ended, redirect_stderr(err):
        main(["--json", "owned", "--root", str(machine.root), "--state", str(machine.state)])
    assert ended.value.code == EXIT_USAGE
    assert "--json goes after the command (mesh-host COMMAND --json)" in err.getvalue()


def test_a_root_that_is_not_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as ended, redirect_stderr(io.StringIO()):
        main(["owned", "--root", str(tmp_path / "absent")])
    assert ended.value.code == EXIT_USAGE


def test_a_service_on_this_machine_fails_the_apply_saying_why(tmp_path: Path) -> None:
    unit = {"type": "service", "unit": "mesh-host-test-no-such-unit.service", "state": "running", "enabled": True}
    path = tmp_path / "svc.json"
    path.write_text(json.dumps({"declaration": 1, "resources": [unit]}))
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = main(["apply", str(path), "--state", str(tmp_path / "state")])
    assert code == EXIT_FAILED
    assert err.getvalue().startswith("mesh-host: resources[0] mesh-host-test-no-such-unit.service failed: ")
    if Path("/run/systemd/system").is_dir():  # systemd is PID 1 here: the unit is judged, and is not there
        assert "no such unit here (LoadState=not-found" in err.getvalue()
    else:
        assert "systemctl show: systemctl " in err.getvalue()


def test_a_closed_stdout_ends_quietly_with_141(tmp_path: Path) -> None:
    reading, writing = os.pipe()
    os.close(reading)
    command = [sys.executable, "-m", "mesh_host.cli", "owned", "--state", str(tmp_path), "--root", str(tmp_path)]
    ended = subprocess.run(command, stdout=writing, stderr=subprocess.PIPE, text=True, check=False)
    os.close(writing)
    assert (ended.returncode, ended.stderr) == (EXIT_CLOSED_PIPE, "")


def test_profile_and_inventory_print_what_this_machine_is(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile"]) == EXIT_OK
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"linux/{text.splitlines()[0].split('/')[1]}" and "cannot be asked to: [" in text
    assert main(["profile", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["platform"].startswith("linux/")
    assert main(["inventory", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)
