"""The descriptor-walking primitives, on real files: a link is never followed below the trusted folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mesh_host.applying import safe_fs
from mesh_host.applying.safe_fs import LinkRefused, NotAFolder, closing


def tree(base: Path) -> Path:
    (base / "app/sub").mkdir(parents=True)
    (base / "app/sub/f").write_text("f\n")
    (base / "victim").mkdir()
    (base / "victim/secret").write_text("secret\n")
    (base / "victim/secret").chmod(0o600)
    os.symlink(base / "victim", base / "app/link")
    return base


def test_a_folder_is_walked_into_and_a_link_on_the_way_is_refused(tmp_path: Path) -> None:
    tree(tmp_path)
    with closing(safe_fs.open_folder(tmp_path, ["app", "sub"])) as sub:
        assert safe_fs.listing(sub) == [("f", False)]
    with pytest.raises(LinkRefused, match="a symbolic link stands at a folder on its way"):
        safe_fs.open_folder(tmp_path, ["app", "link"])
    with pytest.raises(NotAFolder, match="a file stands where a folder is walked into"):
        safe_fs.open_folder(tmp_path, ["app", "sub", "f"])


def test_the_mode_and_owner_of_a_link_are_never_set_nor_of_where_it_leads(tmp_path: Path) -> None:
    tree(tmp_path)
    with closing(safe_fs.open_folder(tmp_path, ["app"])) as app:
        with pytest.raises(LinkRefused):
            safe_fs.set_attributes(app, "link", 0o777, None, folder=True)
        safe_fs.set_attributes(app, "sub", 0o750, (os.getuid(), os.getgid()), folder=True)
    assert stat.S_IMODE((tmp_path / "victim").stat().st_mode) != 0o777
    assert stat.S_IMODE((tmp_path / "app/sub").stat().st_mode) == 0o750


def test_a_folder_held_is_worked_in_wherever_it_was_moved(tmp_path: Path) -> None:
    tree(tmp_path)
    with closing(safe_fs.open_folder(tmp_path, ["app", "sub"])) as sub:
        (tmp_path / "app/sub").rename(tmp_path / "app/away")
        os.symlink(tmp_path / "victim", tmp_path / "app/sub")
        safe_fs.write_at(sub, "new", b"n\n", 0o644, None)
        safe_fs.remove_file(sub, "f")
    assert sorted(os.listdir(tmp_path / "app/away")) == ["new"]
    assert sorted(os.listdir(tmp_path / "victim")) == ["secret"]


def test_a_tree_is_copied_with_its_links_as_links_and_removed(tmp_path: Path) -> None:
    tree(tmp_path)
    with closing(safe_fs.open_folder(tmp_path)) as top:
        safe_fs.copy_tree(top, "app", top, "copy")
        assert os.readlink(tmp_path / "copy/link") == str(tmp_path / "victim")
        assert (tmp_path / "copy/sub/f").read_text() == "f\n"
        safe_fs.remove_tree(top, "copy")
        safe_fs.remove_tree(top, "app")
    assert sorted(os.listdir(tmp_path)) == ["victim"]
    assert (tmp_path / "victim/secret").read_text() == "secret\n"
