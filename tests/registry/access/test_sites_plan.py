"""`grants --check` compares the sites too: what issuing the sites again would change, said line by
line from sites.json before and after, with exit 8 when something would change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.commands.cli import main
from registry.access import plan_sites, read_sites_file, sites_json

NODES = 'nodes = ["n1", "n2", "n3"]\n[hub]\nleafnodes = ["nats-leaf://hub.example.org:7422"]\n'
HOME = '[sites.home]\nnodes = ["n1"]\n'


def check(tmp_path: Path, mesh_text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    mesh = tmp_path / "mesh.toml"
    mesh.write_text(mesh_text)
    code = main(["grants", "--mesh", str(mesh), "--out", str(tmp_path / "out"), "--check"])
    return code, capsys.readouterr().out.splitlines()


def issue(tmp_path: Path, mesh_text: str, capsys: pytest.CaptureFixture[str]) -> None:
    mesh = tmp_path / "mesh.toml"
    mesh.write_text(mesh_text)
    assert main(["grants", "--mesh", str(mesh), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()


def test_the_same_sites_change_nothing_and_check_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issue(tmp_path, NODES + HOME, capsys)
    before = sites_json(tmp_path / "out").read_bytes()
    code, lines = check(tmp_path, NODES + HOME, capsys)
    assert code == 0
    assert lines[-1].startswith("sites: nothing would change (against ")
    assert sites_json(tmp_path / "out").read_bytes() == before


def test_a_node_moved_to_a_site_widens_its_link_and_narrows_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issue(tmp_path, NODES + HOME, capsys)
    code, lines = check(tmp_path, NODES + '[sites.home]\nnodes = ["n1", "n2"]\n', capsys)
    assert code == 8
    assert "~ site home: + node n2" in lines
    link = next(line for line in lines if line.startswith("~ site home link leaf-home-data: "))
    assert "publish widened: + $JS.hub.API.$KV.mesh-provisioner_needs.n2.>" in link
    assert "narrowed" not in link
    said = [line for line in lines if line.startswith(("~ site ", "+ site ", "- site "))]
    assert lines[-1] == f"sites: {len(said)} changes (against {sites_json(tmp_path / 'out')})"
    assert "~ account site-home: speaks for changed: + n2" in lines  # the site's account at the hub


def test_a_site_added_and_one_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue(tmp_path, NODES + HOME, capsys)
    code, lines = check(tmp_path, NODES + '[sites.office]\nnodes = ["n3"]\n', capsys)
    assert code == 8
    assert "+ site office: 1 node (n3)" in lines
    assert "- site home" in lines


def test_sites_dropped_from_the_mesh_are_said_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue(tmp_path, NODES + HOME, capsys)
    code, lines = check(tmp_path, NODES, capsys)
    assert code == 8
    assert "- site home" in lines


def test_without_sites_nothing_is_said_of_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue(tmp_path, 'nodes = ["n1"]\n', capsys)
    code, lines = check(tmp_path, 'nodes = ["n1"]\n', capsys)
    assert code == 0
    assert not any(line.startswith("sites:") for line in lines)


def test_a_hub_change_and_a_link_narrowed_are_told(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue(tmp_path, NODES + '[sites.home]\nnodes = ["n1", "n2"]\n', capsys)
    before = read_sites_file(sites_json(tmp_path / "out"))
    issue(tmp_path, NODES.replace("hub.example.org", "hub2.example.org") + HOME, capsys)
    after = read_sites_file(sites_json(tmp_path / "out"))
    changes = plan_sites(before, after).changes
    assert changes[0] == ("~ hub: urls ('nats-leaf://hub.example.org:7422',) -> ('nats-leaf://hub2.example.org:7422',)")
    assert "~ site home: - node n2" in changes
    assert any("publish narrowed: - $JS.hub.API.$KV.mesh-provisioner_needs.n2.>" in line for line in changes)
    assert plan_sites(after, after).unchanged


def test_check_says_the_same_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue(tmp_path, NODES + HOME, capsys)
    code, lines = check(tmp_path, NODES + '[sites.office]\nnodes = ["n3"]\n', capsys)
    mesh = tmp_path / "mesh.toml"
    as_json = main(["grants", "--mesh", str(mesh), "--out", str(tmp_path / "out"), "--check", "--json"])
    said = json.loads(capsys.readouterr().out)
    assert as_json == code == 8
    assert [*said["grants"]["changes"], *said["sites"]["changes"]] == lines[:-2]
    assert f"{said['grants']['summary']} (against {said['grants']['against']})" == lines[-2]
    assert said["sites"]["against"] == str(sites_json(tmp_path / "out"))
    assert main(["grants", "--mesh", str(mesh), "--out", str(tmp_path / "out"), "--json"]) == 2
    assert "--json: applies only with --check" in capsys.readouterr().err
