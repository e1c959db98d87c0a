"""The footprint: what the host applied and no longer declares it removes; what it did not create it
never removes. Real files under a temporary root, as root and as nobody."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from mesh_host.applying import apply as apply_module
from mesh_host.applying.footprint import OwnedDirectory
from tests.mesh_host.sandbox import USERS, Machine, machine_for


@pytest.fixture(params=USERS)
def machine(request: pytest.FixtureRequest) -> Iterator[Machine]:
    yield from machine_for(request.param)


def folder(path: str, **more: object) -> dict[str, object]:
    return {"type": "directory", "path": path, "mode": "0755", "unknown": "module", "module": "app"} | more


def file(path: str, content: str = "x\n") -> dict[str, object]:
    return {"type": "file", "path": path, "content": content, "mode": "0644"}


def declared(*resources: dict[str, object]) -> dict[str, object]:
    return {"declaration": 1, "resources": list(resources)}


def test_a_file_and_a_folder_no_longer_declared_are_removed_last_applied_first(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(folder("/etc/app"), file("/etc/app/a"), file("/etc/keep")))
    report = machine.apply(declared(file("/etc/keep")))
    assert [(event.where, event.subject, event.what) for event in report.changes] == [
        ("no longer declared", "/etc/app/a", "removed"),
        ("no longer declared", "/etc/app", "removed"),
    ]
    assert not machine.real("/etc/app").exists() and machine.real("/etc/keep").exists()
    assert [owned.key for owned in machine.footprint().owned] == [("file", "/etc/keep")]
    assert machine.apply(declared(file("/etc/keep"))).changes == ()


def test_a_folder_holding_what_is_not_the_hosts_is_kept_until_it_is_empty(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(folder("/etc/app"), file("/etc/app/a")))
    machine.stranger("/etc/app/someone.conf")
    report = machine.apply(declared())
    assert [event.what for event in report.changes] == ["removed"]  # its own file
    assert [event.what for event in report.notes] == [
        "kept: it holds what is not the host's (someone.conf); removed once empty"
    ]
    assert machine.real("/etc/app/someone.conf").exists()
    assert machine.footprint().owned == (
        OwnedDirectory(path="/etc/app", created=True, mode=0o755, unknown="module", module="app", declared=False),
    )
    assert machine.apply(declared()).changes == ()  # still kept, nothing changed
    machine.real("/etc/app/someone.conf").unlink()
    assert [event.what for event in machine.apply(declared()).changes] == ["removed"]
    assert not machine.real("/etc/app").exists() and machine.footprint().owned == ()


def test_a_folder_there_before_is_adopted_for_mode_and_owner_and_never_removed(machine: Machine) -> None:
    machine.folder("/etc/app", mode=0o777)
    report = machine.apply(declared(folder("/etc/app"), file("/etc/app/a")))
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/etc/app", "mode 0777 -> 0755"),
        ("/etc/app/a", "created (2 bytes, 0644 as the host)"),
    ]
    assert machine.footprint().entry(("directory", "/etc/app")).created is False  # type: ignore[union-attr]
    report = machine.apply(declared())
    assert [event.subject for event in report.changes] == ["/etc/app/a"]
    assert [(event.subject, event.what) for event in report.notes] == [
        ("/etc/app", "released: left as it is, it was there before the host")
    ]
    assert machine.real("/etc/app").is_dir() and machine.footprint().owned == ()


def test_a_file_there_before_is_taken_over_while_declared_and_left_in_place_after(machine: Machine) -> None:
    machine.stranger("/etc/app.toml", "theirs\n")
    report = machine.apply(declared(file("/etc/app.toml", "ours\n")))
    assert [event.what for event in report.changes] == ["rewritten (5 bytes declared)"]
    report = machine.apply(declared())
    assert report.changes == () and machine.real("/etc/app.toml").read_text() == "ours\n"
    assert report.notes[0].what == "released: left as it is, it was there before the host"


def test_a_known_file_no_longer_declared_is_kept_whatever_the_policy(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(folder("/etc/app", unknown="move-out"), file("/etc/app/local.toml")))
    report = machine.apply(declared(folder("/etc/app", unknown="move-out", knows=["/etc/app/local.toml"])))
    assert report.changes == () and machine.real("/etc/app/local.toml").exists()
    assert report.notes[0].what == "released: left in place, resources[0] (/etc/app) knows it"


def test_a_file_replaced_by_hand_with_a_folder_is_not_removed(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(file("/etc/a")))
    machine.real("/etc/a").unlink()
    machine.folder("/etc/a")
    report = machine.apply(declared())
    assert report.changes == () and machine.real("/etc/a").is_dir()
    assert report.notes[0].what == "released: a directory stands there now, not the file the host wrote"


def test_a_path_declared_as_a_folder_then_as_a_file_is_replaced(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(folder("/etc/a")))
    report = machine.apply(declared(file("/etc/a")))
    assert [(event.where, event.what) for event in report.changes] == [
        ("no longer declared", "removed"),
        ("resources[0]", "created (2 bytes, 0644 as the host)"),
    ]
    assert machine.real("/etc/a").is_file()


def test_a_dry_run_says_what_it_would_remove_and_removes_nothing(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(folder("/etc/app"), file("/etc/app/a")))
    report = machine.apply(declared(), dry_run=True)
    assert [event.what for event in report.changes] == ["would be removed", "would be removed"]
    assert machine.real("/etc/app/a").exists() and len(machine.footprint().owned) == 2


def test_a_file_the_host_created_then_edited_by_hand_is_left_in_place(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(file("/etc/a", "ours\n")))
    machine.real("/etc/a").write_text("edited by the operator\n")
    report = machine.apply(declared())
    assert report.changes == () and machine.real("/etc/a").read_text() == "edited by the operator\n"
    assert report.notes[0].what == "released: left in place, its content is no longer what the host wrote"
    assert machine.footprint().owned == ()


def test_a_link_planted_among_its_folders_does_not_make_the_host_delete_what_it_reaches(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(declared(folder("/etc/app"), folder("/etc/app/sub"), file("/etc/app/sub/x.conf")))
    machine.real("/etc/app/sub/x.conf").unlink()
    machine.real("/etc/app/sub").rmdir()
    machine.real("/etc/app/sub").symlink_to("/srv")  # the module, which owns /etc/app, plants it
    machine.stranger("/srv/x.conf", "the operator's\n")
    report = machine.apply(declared(folder("/etc/app")))
    assert report.changes == ()
    assert machine.real("/srv/x.conf").read_text() == "the operator's\n"
    assert [(event.subject, event.what) for event in report.notes] == [
        (
            "/etc/app/sub/x.conf",
            "released: a symbolic link stands at its folder /etc/app/sub: the host follows no link it did not make",
        ),
        ("/etc/app/sub", "released: a symbolic link stands there now"),
    ]
    assert machine.footprint().owned == (
        OwnedDirectory(path="/etc/app", created=True, mode=0o755, unknown="module", module="app"),
    )


def test_a_file_grown_past_what_the_host_writes_is_released_without_being_read(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.folder("/etc")
    machine.apply(declared(file("/etc/a")))
    os.truncate(machine.real("/etc/a"), 1 << 40)  # a terabyte, sparse: reading it whole would take the apply long

    def never(real: object) -> str:
        raise AssertionError(f"{real} was read")  # raised in the applying process, whichever user it is

    monkeypatch.setattr(apply_module, "_digest", never)
    report = machine.apply(declared())
    assert report.notes[0].what == "released: left in place, its content is no longer what the host wrote"
    assert machine.real("/etc/a").stat().st_size == 1 << 40
