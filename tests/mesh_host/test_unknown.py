"""How a declared directory treats what the host did not write (`unknown`), and `knows`: real files
under a temporary root, as root and as nobody."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import pytest

from mesh_host.applying.owned import owned
from mesh_host.applying.roots import Root
from tests.mesh_host.sandbox import HOME, USERS, Machine, as_user, machine_for, snapshot

MOVED = f"{HOME}/.local/state/mesh-moved/app"


@pytest.fixture(params=USERS)
def machine(request: pytest.FixtureRequest) -> Iterator[Machine]:
    yield from machine_for(request.param)


def app(unknown: str, *more: Mapping[str, object], knows: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "declaration": 1,
        "resources": [
            {"type": "directory", "path": "/etc/app", "mode": "0755", "unknown": unknown, "module": "app",
             "knows": list(knows)},
            *more,
        ],
    }  # fmt: skip


def file(path: str) -> dict[str, object]:
    return {"type": "file", "path": path, "content": "ours\n", "mode": "0644"}


def test_program_everything_in_it_is_the_programs_nothing_is_moved(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(app("program"))
    machine.stranger("/etc/app/data/db")
    machine.stranger("/etc/app/run.pid")
    before = snapshot(machine.root)
    assert machine.apply(app("program")).changes == ()
    assert snapshot(machine.root) == before


def test_module_a_file_it_did_not_write_is_kept_and_owned_lists_it_as_the_modules(machine: Machine) -> None:
    machine.folder("/etc")
    declaration = app("module", file("/etc/app/app.toml"), knows=("/etc/app/local.toml",))
    machine.apply(declaration)
    machine.stranger("/etc/app/extra.toml")
    machine.stranger("/etc/app/local.toml")
    machine.stranger("/etc/app/plugins/one.toml")
    assert machine.apply(declaration).changes == ()
    assert machine.real("/etc/app/extra.toml").exists() and machine.real("/etc/app/plugins/one.toml").exists()
    holding = as_user(machine.user, lambda: owned(Root(machine.root), machine.state))
    assert holding.modules == {"/etc/app": ("/etc/app/extra.toml", "/etc/app/plugins")}
    assert holding.render().splitlines() == [
        "directory  /etc/app  created 0755  unknown=module of module app",
        "  known      /etc/app/local.toml",
        "  app's  /etc/app/extra.toml",
        "  app's  /etc/app/plugins",
        "file       /etc/app/app.toml  created 0644",
    ]
    assert holding.as_json()["owned"][0]["modules_files"] == ["/etc/app/extra.toml", "/etc/app/plugins"]  # type: ignore[index]


def test_move_out_moves_what_the_host_did_not_write_and_lists_it(machine: Machine) -> None:
    machine.folder("/etc")
    declaration = app("move-out", file("/etc/app/app.toml"))
    machine.apply(declaration)
    machine.stranger("/etc/app/old.conf", "left behind\n")
    machine.stranger("/etc/app/cache/a", "a\n")
    report = machine.apply(declaration)
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/etc/app/cache", f"moved out to {MOVED}/etc/app/cache"),
        ("/etc/app/old.conf", f"moved out to {MOVED}/etc/app/old.conf"),
    ]
    assert sorted(path.name for path in machine.real("/etc/app").iterdir()) == ["app.toml"]
    assert machine.real(f"{MOVED}/etc/app/old.conf").read_text() == "left behind\n"
    assert machine.real(f"{MOVED}/etc/app/cache/a").read_text() == "a\n"
    listed = [json.loads(line) for line in machine.real(f"{MOVED}/moved.jsonl").read_text().splitlines()]
    assert [(line["from"], line["to"]) for line in listed] == [
        ("/etc/app/cache", f"{MOVED}/etc/app/cache"),
        ("/etc/app/old.conf", f"{MOVED}/etc/app/old.conf"),
    ]
    assert machine.apply(declaration).changes == ()


def test_move_out_keeps_what_it_knows_and_looks_into_a_folder_holding_it(machine: Machine) -> None:
    machine.folder("/etc")
    declaration = app("move-out", knows=("/etc/app/local.toml", "/etc/app/keys/node.creds"))
    machine.apply(declaration)
    machine.stranger("/etc/app/local.toml")
    machine.stranger("/etc/app/keys/node.creds")
    machine.stranger("/etc/app/keys/old.creds")
    report = machine.apply(declaration)
    assert [event.subject for event in report.changes] == ["/etc/app/keys/old.creds"]
    assert machine.real("/etc/app/local.toml").exists() and machine.real("/etc/app/keys/node.creds").exists()


def test_move_out_leaves_a_declared_folder_inside_to_its_own_policy(machine: Machine) -> None:
    machine.folder("/etc")
    inner = {"type": "directory", "path": "/etc/app/modules", "mode": "0755", "unknown": "module", "module": "mods"}
    declaration = app("move-out", inner)
    machine.apply(declaration)
    machine.stranger("/etc/app/modules/someone.toml")
    assert machine.apply(declaration).changes == ()
    assert machine.real("/etc/app/modules/someone.toml").exists()


def test_a_name_moved_out_twice_is_kept_twice(machine: Machine) -> None:
    machine.folder("/etc")
    declaration = app("move-out")
    machine.apply(declaration)
    machine.stranger("/etc/app/x", "first\n")
    machine.apply(declaration)
    machine.stranger("/etc/app/x", "second\n")
    report = machine.apply(declaration)
    assert report.changes[0].what == f"moved out to {MOVED}/etc/app/x.1"
    assert machine.real(f"{MOVED}/etc/app/x").read_text() == "first\n"
    assert machine.real(f"{MOVED}/etc/app/x.1").read_text() == "second\n"
    assert len(json.loads("[" + ",".join(machine.real(f"{MOVED}/moved.jsonl").read_text().splitlines()) + "]")) == 2


def test_a_dry_run_says_what_it_would_move_and_moves_nothing(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(app("move-out"))
    machine.stranger("/etc/app/x")
    before = snapshot(machine.base)
    report = machine.apply(app("move-out"), dry_run=True)
    assert [event.what for event in report.changes] == [f"would be moved out to {MOVED}/etc/app/x"]
    assert snapshot(machine.base) == before


def test_a_folder_on_the_way_taken_by_a_file_moved_out_before_takes_a_suffix(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(app("move-out"))
    machine.stranger("/etc/app/sub", "a file first\n")
    machine.apply(app("move-out"))
    machine.stranger("/etc/app/sub/keep")  # then a folder, the module's, holding what it knows
    machine.stranger("/etc/app/sub/old.conf", "later\n")
    report = machine.apply(app("move-out", knows=("/etc/app/sub/keep",)))
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/etc/app/sub/old.conf", f"moved out to {MOVED}/etc/app/sub.1/old.conf")
    ]
    assert machine.real(f"{MOVED}/etc/app/sub").read_text() == "a file first\n"
    assert machine.real(f"{MOVED}/etc/app/sub.1/old.conf").read_text() == "later\n"
