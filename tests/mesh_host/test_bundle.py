"""What a built host carries (mesh_host.bundle), and what the build refuses to carry (mesh_host.build),
without building: the one build of the suite is tests/mesh_host/test_single_file.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mesh_host.build import BuildRefused, build, read_declaration
from mesh_host.bundle import BUNDLED, DECLARATION, MAX_DECLARATION, SOURCE, BundleBroken, carried, stage

NOTHING = json.dumps({"declaration": 1, "resources": []})


def test_this_source_tree_is_a_default_build_carrying_nothing() -> None:
    assert not BUNDLED.exists(), "a build staged its bundle into the source tree"
    assert carried() is None


def test_a_staged_bundle_is_carried_as_given_with_where_it_came_from(tmp_path: Path) -> None:
    folder = stage(tmp_path, NOTHING, "/srv/decl/node.json")
    assert folder.name == BUNDLED.name
    found = carried(folder)
    assert found is not None
    assert (found.text, found.source) == (NOTHING, "/srv/decl/node.json")
    assert len(found.sha256) == 64


def test_a_bundle_larger_than_the_bound_is_broken_not_read_whole(tmp_path: Path) -> None:
    folder = stage(tmp_path, "x" * (MAX_DECLARATION + 1), "big.json")
    with pytest.raises(BundleBroken, match=f"larger than {MAX_DECLARATION} bytes"):
        carried(folder)


def test_a_bundle_without_its_declaration_or_not_utf8_is_broken(tmp_path: Path) -> None:
    folder = stage(tmp_path, NOTHING, "node.json")
    (folder / DECLARATION).write_bytes(b"\xff\xfe{}")
    with pytest.raises(BundleBroken, match="not UTF-8"):
        carried(folder)
    (folder / DECLARATION).unlink()
    with pytest.raises(BundleBroken, match="cannot be read"):
        carried(folder)


def test_a_bundle_whose_source_was_not_recorded_says_so(tmp_path: Path) -> None:
    folder = stage(tmp_path, NOTHING, "node.json")
    (folder / SOURCE).unlink()
    found = carried(folder)
    assert found is not None and found.source == "(not recorded by the build)"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (json.dumps({"declaration": 2, "resources": []}).encode(), "declaration"),
        (b"{not json", "refuse"),
        (b"\xff\xfe", "not UTF-8"),
        (b" " * (MAX_DECLARATION + 1), "larger than"),
    ],
    ids=["another version", "not JSON", "not UTF-8", "too large"],
)
def test_the_build_refuses_a_declaration_the_host_would_refuse_and_builds_nothing(
    tmp_path: Path, content: bytes, said: str
) -> None:
    given = tmp_path / "node.json"
    given.write_bytes(content)
    with pytest.raises(BuildRefused, match=said):
        read_declaration(given)
    out = tmp_path / "dist" / "mesh-host"
    with pytest.raises(BuildRefused):
        build(out, given)
    assert not out.exists() and not out.parent.exists()
