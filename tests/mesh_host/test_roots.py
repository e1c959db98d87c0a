"""--root: a machine path found under the root, its folders' links followed inside the root only."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from mesh_host.applying.roots import MACHINE, Root, RootError, default_state, moved_folder


def test_the_machine_root_is_the_path_itself() -> None:
    assert Root().real(PurePosixPath("/etc/app/x")) == Path("/etc/app/x") and Root(MACHINE).is_machine


def test_a_path_is_prefixed_with_the_root(tmp_path: Path) -> None:
    assert Root(tmp_path).real(PurePosixPath("/etc/app/x")) == tmp_path / "etc/app/x"


def test_an_absolute_link_among_the_folders_is_taken_from_the_root_not_the_machine(tmp_path: Path) -> None:
    (tmp_path / "usr/etc").mkdir(parents=True)
    os.symlink("/usr/etc", tmp_path / "etc")
    assert Root(tmp_path).real(PurePosixPath("/etc/app.toml")) == tmp_path / "usr/etc/app.toml"


def test_a_relative_link_and_its_dots_stay_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "usr/lib").mkdir(parents=True)
    os.symlink("usr/lib", tmp_path / "lib")
    os.symlink("../../../../..", tmp_path / "usr/up")
    root = Root(tmp_path)
    assert root.real(PurePosixPath("/lib/systemd")) == tmp_path / "usr/lib/systemd"
    assert root.real(PurePosixPath("/usr/up/etc/shadow")) == tmp_path / "etc/shadow"


def test_the_last_part_is_never_followed(tmp_path: Path) -> None:
    os.symlink("/etc/passwd", tmp_path / "x")
    assert Root(tmp_path).real(PurePosixPath("/x")) == tmp_path / "x"


def test_a_loop_of_links_is_an_error_naming_the_path(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(RootError, match="/a/x: more than 40 links"):
        Root(tmp_path).real(PurePosixPath("/a/x"))


def test_makedirs_makes_the_missing_folders_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    os.symlink("/data", tmp_path / "home")
    made = Root(tmp_path).makedirs(PurePosixPath("/home/op/.local/state"))
    assert made == tmp_path / "data/op/.local/state" and made.is_dir()


def test_the_default_state_and_the_moved_out_folder() -> None:
    home = PurePosixPath("/home/op")
    assert default_state(home, privileged=True) == PurePosixPath("/var/lib/mesh-host")
    assert default_state(home, privileged=False) == PurePosixPath("/home/op/.local/state/mesh-host")
    assert moved_folder(home, "app") == PurePosixPath("/home/op/.local/state/mesh-moved/app")
