"""Limits set in the mesh file (`[limits.node]`) are carried in the grants (so grants.json and
`--check` show them) and rendered alike in accounts.conf and in the account JWTs; a kind the file
leaves out keeps its own; a limit below what the party's program needs is refused however given."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provisioner.commands.cli import main
from registry.access import (
    Grants,
    Kind,
    MeshParties,
    Party,
    account_jwt_path,
    claims_of,
    derive_grants,
    issue_grants,
    plan_grants,
    read_mesh_file,
)
from registry.access.limits import PARTY_LIMITS, GivenLimits, PartyLimits
from registry.contract import load_catalogue
from registry.errors import SettingsError
from tests.helpers import DEPLOY

MESH = """
nodes = ["n1", "n2"]
operators = ["ops"]
[providers.postgres]
[limits.node]
connections = 3
subscriptions = 40
payload = 262144
[limits.vault]
payload = 1048576
"""
NODE_LIMITS = PartyLimits(connections=3, subscriptions=40, payload=262144)


def issued(folder: Path, text: str) -> Grants:
    folder.mkdir(exist_ok=True)
    mesh = folder / "mesh.toml"
    mesh.write_text(text)
    return issue_grants(folder / "out", read_mesh_file(mesh).parties(), jwt=True)


def static_limits(out: Path, label: str) -> PartyLimits:
    block = (out / "accounts.conf").read_text().split(f'"{label}" {{', 1)[1].split("\n  }", 1)[0]
    found = {name: int(value) for name, value in re.findall(r"max_(\w+): (\d+)", block)}
    return PartyLimits(**found)


def claimed_limits(out: Path, label: str) -> PartyLimits:
    claimed = claims_of(account_jwt_path(out, label).read_text().strip())["nats"]["limits"]
    payload = None if claimed["payload"] == -1 else claimed["payload"]
    return PartyLimits(
        connections=claimed["conn"], subscriptions=claimed["subs"], payload=payload, leafnodes=claimed["leaf"]
    )


def test_the_files_limits_are_each_nodes_in_grants_json_accounts_conf_and_its_jwt(tmp_path: Path) -> None:
    grants = issued(tmp_path, MESH)
    out = tmp_path / "out"
    for label in ("node-n1", "node-n2"):
        assert next(g.limits for g in grants.parties if g.party.label == label) == NODE_LIMITS
        assert static_limits(out, label) == NODE_LIMITS
        assert claimed_limits(out, label) == NODE_LIMITS
    written = Grants.model_validate_json((out / "grants.json").read_text())
    assert {g.party.label: g.limits for g in written.parties}["node-n1"] == NODE_LIMITS


def test_a_kind_the_file_leaves_out_keeps_its_own_and_a_limit_left_out_too(tmp_path: Path) -> None:
    grants = issued(tmp_path, MESH)
    out = tmp_path / "out"
    limits = {g.party.label: g.limits for g in grants.parties}
    assert limits["operator-ops"] == PARTY_LIMITS[Kind.OPERATOR]
    assert limits["provider-postgres"] == PARTY_LIMITS[Kind.PROVIDER]
    vault = PARTY_LIMITS[Kind.VAULT].model_copy(update={"payload": 1048576})
    assert limits["vault"] == vault
    assert static_limits(out, "vault") == vault and claimed_limits(out, "vault") == vault


def test_the_vaults_payload_left_to_the_server_is_said_so_in_both(tmp_path: Path) -> None:
    issued(tmp_path, 'nodes = ["n1"]\n')
    out = tmp_path / "out"
    assert "max_payload" not in re.sub(r"#.*", "", (out / "accounts.conf").read_text().split('"vault" {', 1)[1])
    assert claimed_limits(out, "vault").payload is None


def test_check_says_which_limits_change_and_how(tmp_path: Path) -> None:
    before = issued(tmp_path, 'nodes = ["n1", "n2"]\n')
    after = issued(tmp_path, 'nodes = ["n1", "n2"]\n[limits.node]\nconnections = 32\n')
    assert plan_grants(before, after).lines() == [
        "~ account node-n1: limits changed: connections 16 -> 32",
        "~ account node-n2: limits changed: connections 16 -> 32",
    ]


def test_grants_without_limits_a_version_wrote_before_read_as_their_kinds(tmp_path: Path) -> None:
    grants = issued(tmp_path, 'nodes = ["n1"]\n')
    dumped = grants.model_dump(mode="json")
    for grant in dumped["parties"]:
        del grant["limits"]
    older = Grants.model_validate(dumped)
    assert [g.held_to for g in older.parties] == [g.limits for g in grants.parties]
    assert plan_grants(older, grants).lines()[0].endswith(": limits changed")


@pytest.mark.parametrize(
    ("kind", "given", "said"),
    [
        pytest.param(Kind.NODE, GivenLimits(connections=1), "connections: 1 is below 2", id="a node's one connection"),
        pytest.param(Kind.VAULT, GivenLimits(subscriptions=9), "subscriptions: 9 is below 20", id="the vault's verbs"),
    ],
)
def test_a_limit_too_low_is_refused_however_given_before_any_seed_is_written(
    tmp_path: Path, kind: Kind, given: GivenLimits, said: str
) -> None:
    with pytest.raises(SettingsError, match=said):
        issue_grants(tmp_path, MeshParties(nodes=["n1"], limits={kind: given}))
    assert list(tmp_path.iterdir()) == []


def test_the_data_account_has_no_limits_in_the_grants() -> None:
    domains = load_catalogue()
    parties = MeshParties(nodes=["n1"])
    grants = derive_grants(domains, nodes=parties.nodes, user_keys={p: f"U{p.label}" for p in parties.all(domains)})
    assert [g.limits for g in grants.data] == [None]
    assert {g.party: g.limits for g in grants.parties}[Party(kind=Kind.NODE, name="n1")] == PARTY_LIMITS[Kind.NODE]


def test_grants_check_says_the_limits_a_mesh_file_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, plain, limited = tmp_path / "out", tmp_path / "plain.toml", tmp_path / "limited.toml"
    plain.write_text('nodes = ["n1"]\n')
    limited.write_text('nodes = ["n1"]\n[limits.node]\nsubscriptions = 500\n')
    assert main(["grants", "--out", str(out), "--mesh", str(plain)]) == 0
    capsys.readouterr()
    assert main(["grants", "--out", str(out), "--mesh", str(limited), "--check"]) == 8
    assert capsys.readouterr().out.splitlines() == [
        "~ account node-n1: limits changed: subscriptions 1000 -> 500",
        f"accounts: 0 added, 0 removed, 1 changed (against {out / 'grants.json'})",
    ]


def test_the_limits_deploy_mesh_toml_documents_read_as_it_says(tmp_path: Path) -> None:
    documented = (DEPLOY / "mesh.toml").read_text()
    example = re.sub(r"^# (\[limits\.node\]|\w+ = \d+)", r"\1", documented, flags=re.MULTILINE)
    assert example != documented
    parties = read_mesh_file(written_to(tmp_path, example)).parties()
    assert parties.limits == {Kind.NODE: GivenLimits(connections=32, subscriptions=2000, payload=262144)}


def written_to(folder: Path, text: str) -> Path:
    path = folder / "mesh.toml"
    path.write_text(text)
    return path
