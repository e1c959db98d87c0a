"""A resource's id: its stable name in messages and the footprint, and a path changed under it is
the resource moved, not removed and made again. A directory without `unknown` leaves what the host
did not write alone. Real files under a temporary root, as root and as nobody."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mesh_host.applying.apply import ApplyFailed
from mesh_host.applying.footprint import OwnedFile
from mesh_host.applying.owned import owned
from mesh_host.applying.roots import Root
from tests.mesh_host.sandbox import USERS, Machine, as_user, machine_for, snapshot


@pytest.fixture(params=USERS)
def machine(request: pytest.FixtureRequest) -> Iterator[Machine]:
    for machine in machine_for(request.param):
        machine.folder("/etc")
        yield machine


def folder(path: str, id_: str = "mesh-etc") -> dict[str, object]:
    return {"id": id_, "type": "directory", "path": path, "mode": "0755"}


def conf(path: str, content: str = "role = anchor\n") -> dict[str, object]:
    return {"id": "node-conf", "type": "file", "path": path, "content": content, "mode": "0640"}


def declared(*resources: dict[str, object]) -> dict[str, object]:
    return {"declaration": 1, "resources": list(resources)}


def test_a_file_renamed_under_its_id_is_moved_not_removed_and_made_again(machine: Machine) -> None:
    machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/node.conf")))
    inode = machine.real("/etc/mesh/node.conf").stat().st_ino
    report = machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/anchor.conf")))
    assert [(event.where, event.subject, event.what) for event in report.changes] == [
        ("node-conf", "/etc/mesh/anchor.conf", "moved from /etc/mesh/node.conf")
    ]
    assert machine.real("/etc/mesh/anchor.conf").stat().st_ino == inode
    assert not machine.real("/etc/mesh/node.conf").exists()
    entry = machine.footprint().entry(("file", "/etc/mesh/anchor.conf"))
    assert isinstance(entry, OwnedFile) and entry.id == "node-conf" and entry.created is True
    assert [o.key for o in machine.footprint().owned] == [("directory", "/etc/mesh"), ("file", "/etc/mesh/anchor.conf")]
    assert machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/anchor.conf"))).changes == ()
    report = machine.apply(declared())
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/etc/mesh/anchor.conf", "removed"),
        ("/etc/mesh", "removed"),
    ]


def test_a_folder_moved_under_its_id_carries_what_it_holds(machine: Machine) -> None:
    machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/node.conf")))
    machine.stranger("/etc/mesh/operator.pem")
    moved = declared(folder("/etc/mesh-host"), conf("/etc/mesh-host/node.conf", "role = leaf\n"))
    before = snapshot(machine.base)
    dry = machine.apply(moved, dry_run=True)
    assert [(event.subject, event.what) for event in dry.changes] == [
        ("/etc/mesh-host", "would be moved from /etc/mesh"),
        ("/etc/mesh-host/node.conf", "would be rewritten (12 bytes declared)"),
    ]
    assert snapshot(machine.base) == before
    report = machine.apply(moved)
    assert [(event.where, event.subject, event.what) for event in report.changes] == [
        ("mesh-etc", "/etc/mesh-host", "moved from /etc/mesh"),
        ("node-conf", "/etc/mesh-host/node.conf", "rewritten (12 bytes declared)"),
    ]
    assert machine.real("/etc/mesh-host/operator.pem").exists() and not machine.real("/etc/mesh").exists()
    assert machine.apply(moved).changes == ()


def test_a_move_where_both_paths_stand_fails_the_step_and_chooses_neither(machine: Machine) -> None:
    machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/node.conf")))
    machine.stranger("/etc/mesh/anchor.conf", "the operator's\n")
    with pytest.raises(ApplyFailed) as failed:
        machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/anchor.conf")))
    assert failed.value.where == "node-conf"
    assert "node-conf was at /etc/mesh/node.conf (under" in failed.value.why
    assert "something stands at both paths" in failed.value.why
    assert machine.real("/etc/mesh/anchor.conf").read_text() == "the operator's\n"
    assert machine.real("/etc/mesh/node.conf").read_text() == "role = anchor\n"


def test_a_directory_without_unknown_leaves_what_the_host_did_not_write_and_holds_declared_resources(
    machine: Machine,
) -> None:
    machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/node.conf")))
    machine.stranger("/etc/mesh/operator.pem")
    machine.stranger("/etc/mesh/sub/x")
    before = snapshot(machine.root)
    assert machine.apply(declared(folder("/etc/mesh"), conf("/etc/mesh/node.conf"))).changes == ()
    assert snapshot(machine.root) == before
    holding = as_user(machine.user, lambda: owned(Root(machine.root), machine.state))
    assert holding.render().splitlines() == [
        "directory  mesh-etc  /etc/mesh  created 0755",
        "file       node-conf  /etc/mesh/node.conf  created 0640",
    ]
