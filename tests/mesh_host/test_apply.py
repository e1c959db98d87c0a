"""Apply on real files under a temporary root, as root and as nobody: it lays down, converges, returns
what drifted, stops at a failed step saying what it had done, and a dry run changes nothing."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh_host.applying import apply as apply_module
from mesh_host.applying.apply import ApplyFailed
from mesh_host.applying.footprint import FILE, OwnedDirectory, OwnedFile
from tests.mesh_host.sandbox import USERS, Machine, machine_for, snapshot

OWNER = "nobody:nogroup"  # root gives it away; nobody is it already


@pytest.fixture(params=USERS)
def machine(request: pytest.FixtureRequest) -> Iterator[Machine]:
    yield from machine_for(request.param)


def app(*more: dict[str, object]) -> dict[str, object]:
    return {
        "declaration": 1,
        "resources": [
            {"type": "directory", "path": "/etc/app", "mode": "0750", "owner": OWNER, "unknown": "module",
             "module": "app"},
            {"type": "file", "path": "/etc/app/app.toml", "content": "port = 1\n", "mode": "0640", "owner": OWNER},
            {"type": "directory", "path": "/etc/app/conf.d", "mode": "2770", "unknown": "module", "module": "app"},
            {"type": "file", "path": "/etc/app/conf.d/env", "content": "A=1\n", "mode": "0600"},
            *more,
        ],
    }  # fmt: skip


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_an_apply_lays_down_each_resource_with_its_mode_and_owner(machine: Machine) -> None:
    machine.folder("/etc")
    report = machine.apply(app())
    assert [(event.where, event.subject) for event in report.changes] == [
        ("resources[0]", "/etc/app"),
        ("resources[1]", "/etc/app/app.toml"),
        ("resources[2]", "/etc/app/conf.d"),
        ("resources[3]", "/etc/app/conf.d/env"),
    ]
    assert report.changes[0].what == "created (0750 nobody:nogroup)"
    assert machine.real("/etc/app/app.toml").read_text() == "port = 1\n"
    assert (mode(machine.real("/etc/app")), mode(machine.real("/etc/app/app.toml"))) == (0o750, 0o640)
    assert (mode(machine.real("/etc/app/conf.d")), mode(machine.real("/etc/app/conf.d/env"))) == (0o2770, 0o600)
    for path in ("/etc/app", "/etc/app/app.toml"):
        owner = machine.real(path).lstat()
        assert (owner.st_uid, owner.st_gid) == (65534, 65534)  # declared
    owner = machine.real("/etc/app/conf.d/env").lstat()  # not declared: the host's own
    assert (owner.st_uid, owner.st_gid) == ((0, 0) if machine.privileged else (65534, 65534))
    footprint = machine.footprint()
    assert [(owned.key, getattr(owned, "created", None)) for owned in footprint.owned] == [
        (("directory", "/etc/app"), True),
        (("file", "/etc/app/app.toml"), True),
        (("directory", "/etc/app/conf.d"), True),
        (("file", "/etc/app/conf.d/env"), True),
    ]


def test_applying_twice_changes_nothing_the_second_time(machine: Machine) -> None:
    machine.folder("/etc")
    assert machine.apply(app()).changes
    before = snapshot(machine.base)
    again = machine.apply(app())
    assert again.changes == () and again.render() == "nothing to change: the machine matches"
    assert snapshot(machine.base) == before  # no inode, mode, owner, size or mtime moved, the footprint's neither


def test_a_drifted_file_is_returned_its_content_and_mode(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(app())
    toml = machine.real("/etc/app/app.toml")
    toml.write_text("port = 2\n")
    toml.chmod(0o666)
    machine.real("/etc/app/conf.d/env").chmod(0o644)
    report = machine.apply(app())
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/etc/app/app.toml", "rewritten (9 bytes declared)"),
        ("/etc/app/app.toml", "mode 0666 -> 0640"),
        ("/etc/app/conf.d/env", "mode 0644 -> 0600"),
    ]
    assert (
        toml.read_text() == "port = 1\n" and mode(toml) == 0o640 and mode(machine.real("/etc/app/conf.d/env")) == 0o600
    )
    assert machine.apply(app()).changes == ()


def test_a_drifted_directory_mode_is_returned_and_maintained(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(app())
    machine.real("/etc/app/conf.d").chmod(0o777)
    report = machine.apply(app())
    assert [(event.subject, event.what) for event in report.changes] == [("/etc/app/conf.d", "mode 0777 -> 2770")]
    assert mode(machine.real("/etc/app/conf.d")) == 0o2770


def test_a_drifted_owner_is_returned(machine: Machine) -> None:
    if not machine.privileged:
        pytest.skip("only root can give a file away to make it drift")
    machine.folder("/etc")
    machine.apply(app())
    os.chown(machine.real("/etc/app/app.toml"), 0, 0)
    os.chown(machine.real("/etc/app"), 0, 0)
    report = machine.apply(app())
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/etc/app", "owner root:root -> nobody:nogroup"),
        ("/etc/app/app.toml", "owner root:root -> nobody:nogroup"),
    ]
    assert machine.real("/etc/app/app.toml").stat().st_uid == 65534 and mode(machine.real("/etc/app")) == 0o750


def test_a_file_removed_by_hand_is_written_again(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(app())
    machine.real("/etc/app/app.toml").unlink()
    report = machine.apply(app())
    assert [event.what for event in report.changes] == ["created (9 bytes, 0640 nobody:nogroup)"]
    assert machine.footprint().entry(("file", "/etc/app/app.toml")) == OwnedFile(
        path="/etc/app/app.toml",
        created=True,
        mode=0o640,
        owner=OWNER,
        sha256=hashlib.sha256(b"port = 1\n").hexdigest(),
    )


def test_a_failed_step_stops_the_apply_carrying_what_was_done_and_the_footprint_has_it(machine: Machine) -> None:
    machine.folder("/etc")
    declaration = {
        "declaration": 1,
        "resources": [
            {"type": "directory", "path": "/etc/app", "mode": "0755", "unknown": "program"},
            {"type": "file", "path": "/etc/app.toml", "content": "a\n", "mode": "0644"},
            {"type": "file", "path": "/srv/missing/b", "content": "b\n", "mode": "0644"},
            {"type": "directory", "path": "/etc/later", "mode": "0755", "unknown": "program"},
        ],
    }
    with pytest.raises(ApplyFailed) as failed:
        machine.apply(declaration)
    error = failed.value
    assert (error.where, error.subject) == ("resources[2]", "/srv/missing/b")
    assert "its folder /srv/missing (under" in error.why and "does not exist" in error.why
    assert [event.where for event in error.done.changes] == ["resources[0]", "resources[1]"]
    assert "done before it: resources[0]  /etc/app  created" in str(error)
    assert not machine.real("/etc/later").exists()
    assert [owned.key for owned in machine.footprint().owned] == [("directory", "/etc/app"), ("file", "/etc/app.toml")]


def test_an_owner_the_host_cannot_give_fails_the_step_saying_why(machine: Machine) -> None:
    if machine.privileged:
        pytest.skip("root can give a file to anyone")
    machine.folder("/etc")
    declaration = {"declaration": 1, "resources": [
        {"type": "file", "path": "/etc/a", "content": "a\n", "mode": "0644"},
        {"type": "file", "path": "/etc/b", "content": "b\n", "mode": "0644", "owner": "root:root"},
    ]}  # fmt: skip
    with pytest.raises(ApplyFailed) as failed:
        machine.apply(declaration)
    assert failed.value.where == "resources[1]"
    assert (
        failed.value.why
        == "cannot give it to root:root: Operation not permitted (the host runs as uid 65534, not root)"
    )
    assert not machine.real("/etc/b").exists() and not list(machine.real("/etc").glob(".b.*"))
    assert [event.subject for event in failed.value.done.changes] == ["/etc/a"]


def test_an_owner_this_machine_lacks_fails_before_any_change(machine: Machine) -> None:
    machine.folder("/etc")
    declaration = app({"type": "file", "path": "/etc/x", "content": "", "mode": "0644", "owner": "no-such-user-here"})
    before = snapshot(machine.base)
    with pytest.raises(ApplyFailed) as failed:
        machine.apply(declaration)
    assert failed.value.where == "resources[4].owner" and failed.value.done.changes == ()
    assert "no user 'no-such-user-here' on this machine; nothing was changed" in failed.value.why
    assert snapshot(machine.base) == before


def test_something_else_where_a_file_goes_fails_the_step(machine: Machine) -> None:
    machine.folder("/etc/app.toml")
    declaration = {
        "declaration": 1,
        "resources": [{"type": "file", "path": "/etc/app.toml", "content": "", "mode": "0644"}],
    }
    with pytest.raises(ApplyFailed, match="a directory stands where the file goes"):
        machine.apply(declaration)


def test_a_link_where_a_file_goes_is_not_followed(machine: Machine) -> None:
    machine.folder("/etc")
    outside = machine.stranger("/srv/outside", "untouched\n")
    os.symlink(outside, machine.real("/etc/app.toml"))
    declaration = {
        "declaration": 1,
        "resources": [{"type": "file", "path": "/etc/app.toml", "content": "", "mode": "0644"}],
    }
    with pytest.raises(ApplyFailed, match="a symbolic link stands where the file goes: the host follows no link"):
        machine.apply(declaration)
    assert outside.read_text() == "untouched\n" and mode(outside) == 0o644


def test_a_link_among_the_folders_is_followed_inside_the_root(machine: Machine) -> None:
    machine.folder("/usr/etc")
    os.symlink("/usr/etc", machine.real("/etc"))  # absolute, as in an image: the root's /usr/etc, not the machine's
    declaration = {
        "declaration": 1,
        "resources": [{"type": "file", "path": "/etc/app.toml", "content": "x", "mode": "0644"}],
    }
    machine.apply(declaration)
    assert machine.real("/usr/etc/app.toml").read_text() == "x"


def test_a_dry_run_says_what_it_would_change_and_changes_nothing(machine: Machine) -> None:
    machine.folder("/etc")
    before = snapshot(machine.base)
    report = machine.apply(app(), dry_run=True)
    assert [event.what for event in report.changes] == [
        "would be created (0750 nobody:nogroup)",
        "would be created (9 bytes, 0640 nobody:nogroup)",
        "would be created (2770 as the host)",
        "would be created (4 bytes, 0600 as the host)",
    ]
    assert report.render().endswith("would change 4")
    assert snapshot(machine.base) == before and not machine.state.exists()
    machine.apply(app())
    machine.real("/etc/app/app.toml").chmod(0o600)
    before = snapshot(machine.base)
    assert [event.what for event in machine.apply(app(), dry_run=True).changes] == ["would be mode 0600 -> 0640"]
    assert snapshot(machine.base) == before


def test_a_dry_run_fails_where_the_apply_would(machine: Machine) -> None:
    declaration = {"declaration": 1, "resources": [{"type": "file", "path": "/etc/x", "content": "", "mode": "0644"}]}
    with pytest.raises(ApplyFailed) as failed:
        machine.apply(declaration, dry_run=True)
    assert str(failed.value).startswith("resources[0] /etc/x would fail: its folder /etc (under")


def test_the_footprint_is_written_once_per_change_never_for_nothing(machine: Machine) -> None:
    machine.folder("/etc")
    machine.apply(app())
    written = (machine.state / FILE).stat().st_ino
    machine.apply(app())
    assert (machine.state / FILE).stat().st_ino == written
    entry = machine.footprint().entry(("directory", "/etc/app"))
    assert entry == OwnedDirectory(
        path="/etc/app", created=True, mode=0o750, owner=OWNER, unknown="module", module="app"
    )


def test_a_link_planted_among_the_folders_of_a_declared_directory_is_not_followed(machine: Machine) -> None:
    machine.folder("/etc/app")
    machine.folder("/srv")
    os.symlink("/srv", machine.real("/etc/app/sub"))  # the module, which writes in /etc/app, plants it
    declaration = {
        "declaration": 1,
        "resources": [
            {"type": "directory", "path": "/etc/app", "mode": "0755", "unknown": "module", "module": "app"},
            {"type": "file", "path": "/etc/app/sub/x.conf", "content": "x", "mode": "0644"},
        ],
    }
    with pytest.raises(
        ApplyFailed, match=r"a symbolic link stands at its folder /etc/app/sub \(under .*\): the host follows no link"
    ):
        machine.apply(declaration)
    assert not machine.real("/srv/x.conf").exists()


def test_a_link_swapped_in_after_the_host_looked_is_not_chmodded(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.folder("/etc/app", mode=0o700)
    outside = machine.stranger("/srv/secret", "theirs\n", mode=0o600)
    judged = apply_module._differences

    def swapping(now: os.stat_result, mode: int, ids: object) -> list[str]:
        machine.real("/etc/app").rmdir()  # the module swaps the folder for a link between look and chmod
        os.symlink("/srv/secret", machine.real("/etc/app"))
        return judged(now, mode, ids)  # type: ignore[arg-type]

    monkeypatch.setattr(apply_module, "_differences", swapping)
    declaration = {
        "declaration": 1,
        "resources": [{"type": "directory", "path": "/etc/app", "mode": "0777", "unknown": "module", "module": "app"}],
    }
    with pytest.raises(ApplyFailed, match="a symbolic link stands there now: the host follows no link it did not make"):
        machine.apply(declaration)
    assert mode(outside) == 0o600
