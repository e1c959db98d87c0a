"""The grants as data: each node gets exactly its own escaped prefix, and issuing reuses keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.access import (
    Grants,
    Kind,
    MeshParties,
    Party,
    account_jwt_path,
    claims_of,
    derive_grants,
    issue_grants,
    load_party_map,
)
from registry.access.limits import PARTY_LIMITS
from registry.contract import buckets, encode_token, load_catalogue, subject_matches
from registry.errors import SettingsError


def grants_for(*nodes: str) -> Grants:
    parties = MeshParties(nodes=nodes, providers=("postgres",), operators=("ops",)).all(load_catalogue())
    return derive_grants(
        load_catalogue(),
        nodes=nodes,
        providers=("postgres",),
        operators=("ops",),
        user_keys={p: f"U{p.label}" for p in parties},
    )


def node_subjects(grants: Grants, node: str) -> list[str]:
    grant = next(g for g in grants.parties if g.party == Party(kind=Kind.NODE, name=node))
    return [i.subject for i in grant.imports]


# Any name a party may have: no control or bidirectional character (registry.access.parties).
NAMES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cf", "Zl", "Zp")), min_size=1, max_size=12
)


@settings(max_examples=200, deadline=None)
@given(NAMES, NAMES, st.text(alphabet="abc.=-_", min_size=1, max_size=6))
def test_a_node_reaches_only_keys_under_its_own_escaped_name(mine: str, other: str, rest: str) -> None:
    if mine == other:
        return
    subjects = node_subjects(grants_for(mine, other), mine)
    for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT):
        others_key = bucket.subject(f"{encode_token(other)}.{encode_token(rest)}")
        mine_key = bucket.subject(f"{encode_token(mine)}.{encode_token(rest)}")
        assert not any(subject_matches(s, others_key) for s in subjects), (mine, other)
        assert any(subject_matches(s, mine_key) for s in subjects), mine


@pytest.mark.parametrize(
    ("node", "never"), [("a", "a=2Eb.x"), ("a.b", "a.x")], ids=["a never reaches a.b", "a.b never reaches a"]
)
def test_dotted_names_are_escaped_like_keys(node: str, never: str) -> None:
    subjects = node_subjects(grants_for("a", "a.b"), node)
    assert not any(subject_matches(s, buckets.NEEDS.subject(never)) for s in subjects)


def test_no_party_but_the_seat_gets_jetstream_api_beyond_direct_gets() -> None:
    for grant in grants_for("n1", "n2").parties:
        for item in grant.imports:
            if item.subject.startswith("$JS."):
                assert item.subject.startswith("$JS.API.DIRECT.GET."), (grant.party.label, item.subject)


def test_the_verbs_are_imported_shared_so_the_responder_learns_who_asks() -> None:
    for grant in grants_for("n1").parties:
        if grant.party.kind in (Kind.VAULT, Kind.WRITER):
            continue  # the vault answers, a writer writes: neither asks a verb
        verbs = [i for i in grant.imports if i.subject == buckets.VERB_SUBJECT]
        assert len(verbs) == 1 and verbs[0].share, grant.party.label
        assert all(i.share for i in grant.imports if i.subject.startswith("mesh-vault.")), grant.party.label


def vault_verbs(grants: Grants) -> dict[str, list[str]]:
    """Each party's vault verbs, by label."""
    return {
        g.party.label: sorted(i.subject for i in g.imports if i.account == "vault" and i.share) for g in grants.parties
    }


def test_each_party_imports_only_the_vault_verbs_it_may_ask() -> None:
    parties = MeshParties(nodes=["n1", "n2"], providers=["postgres"], operators=["ops"], machines={"postgres": ["n2"]})
    grants = issue(parties)
    assert vault_verbs(grants) == {
        "node-n1": ["mesh-vault.secret"],
        "node-n2": ["mesh-vault.consumers", "mesh-vault.secret"],
        "provider-postgres": [],
        "operator-ops": [],
        "writer-config": [],
        "writer-placement": [],
        "vault": [],
    }
    assert grants.wide == ()
    assert grants.exports_of("vault") == {
        ("service", "mesh-vault.consumers", False): {"node-n2"},
        ("service", "mesh-vault.secret", False): {"node-n1", "node-n2"},
    }


def test_a_provider_without_its_machine_named_leaves_every_node_its_consumers_verb_and_says_so() -> None:
    grants = issue(MeshParties(nodes=["n1", "n2"], providers=["postgres"]))
    assert all("mesh-vault.consumers" in vault_verbs(grants)[f"node-{n}"] for n in ("n1", "n2"))
    assert len(grants.wide) == 1 and "'postgres'" in grants.wide[0] and "PROVIDER@NODE" in grants.wide[0]
    assert "mesh-vault.consumers" not in str(vault_verbs(issue(MeshParties(nodes=["n1"]))))  # no provider, no one


def test_the_vault_has_an_account_of_its_own_that_reads_needs_and_shares_none_with_the_seat() -> None:
    grants = issue(MeshParties(nodes=["n1"]))
    vault = next(g for g in grants.parties if g.party.kind == Kind.VAULT)
    assert vault.account == "vault" and [g.party.kind for g in grants.data] == [Kind.SEAT]
    assert [i.subject for i in vault.imports] == [buckets.NEEDS.direct_get_subject(">")]


@pytest.mark.parametrize(
    ("providers", "wrong"),
    [(["postgres@n9"], "not a node"), (["postgres@"], "names no node")],
    ids=["a machine that is no node", "an empty machine"],
)
def test_a_machine_the_grants_cannot_place_is_a_settings_error(providers: list[str], wrong: str) -> None:
    with pytest.raises(SettingsError, match=wrong):
        issue(MeshParties.named(["n1"], providers, []))


def test_the_command_line_names_a_providers_machines_after_an_at() -> None:
    parties = MeshParties.named(["n1", "n@2"], ["postgres@n@2", "postgres@n1", "redis"], ["ops"])
    assert (list(parties.providers), dict(parties.machines)) == (["postgres", "redis"], {"postgres": ["n@2", "n1"]})


def issue(parties: MeshParties) -> Grants:
    return derive_grants(
        load_catalogue(),
        nodes=parties.nodes,
        providers=parties.providers,
        operators=parties.operators,
        machines=parties.machines,
        writers=parties.writers,
        user_keys={p: f"U{p.label}" for p in parties.all(load_catalogue())},
    )


def test_issuing_again_with_one_more_node_keeps_every_issued_key(tmp_path: Path) -> None:
    first = issue_grants(tmp_path, MeshParties(nodes=["n1"], providers=["postgres"], operators=["ops"]))
    seeds = {p.name: p.read_bytes() for p in tmp_path.glob("*.nk")}
    second = issue_grants(tmp_path, MeshParties(nodes=["n1", "n2"], providers=["postgres"], operators=["ops"]))
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.nk") if p.name in seeds} == seeds
    assert {g.user_key for g in first.parties} <= {g.user_key for g in second.parties}
    assert "node-n2.nk" in {p.name for p in tmp_path.glob("*.nk")}
    assert all(oct(p.stat().st_mode)[-3:] == "600" for p in tmp_path.glob("*.nk"))


def test_the_grants_file_maps_accounts_back_to_parties(tmp_path: Path) -> None:
    issue_grants(tmp_path, MeshParties(nodes=["a.b"], operators=["ops"]))
    parties = load_party_map(tmp_path / "grants.json")
    info = json.dumps({"acc": "node-a=2Eb", "user": "U"})
    assert parties.who_asks({"Nats-Request-Info": info}) == Party(kind=Kind.NODE, name="a.b")
    assert re.search(r'"node-a=2Eb"', (tmp_path / "accounts.conf").read_text())


@pytest.mark.parametrize("kind", [Kind.NODE, Kind.PROVIDER, Kind.OPERATOR, Kind.WRITER], ids=lambda k: k.value)
def test_both_configurations_carry_the_one_table_of_limits(tmp_path: Path, kind: Kind) -> None:
    issue_grants(tmp_path, MeshParties(nodes=["n1"], providers=["postgres"], operators=["ops"]), jwt=True)
    name = {Kind.NODE: "n1", Kind.PROVIDER: "postgres", Kind.OPERATOR: "ops", Kind.WRITER: "config"}[kind]
    label = Party(kind=kind, name=name).label
    limits = PARTY_LIMITS[kind]
    assert limits.payload is not None
    block = (tmp_path / "accounts.conf").read_text().split(f'"{label}" {{', 1)[1].split("\n  }", 1)[0]
    static = dict(re.findall(r"(max_\w+): (\d+)", block))
    claimed = claims_of(account_jwt_path(tmp_path, label).read_text().strip())["nats"]["limits"]
    figures = (limits.connections, limits.subscriptions, limits.payload, limits.leafnodes)
    assert tuple(int(static[f"max_{n}"]) for n in ("connections", "subscriptions", "payload", "leafnodes")) == figures
    assert (claimed["conn"], claimed["subs"], claimed["payload"], claimed["leaf"]) == figures
    assert (claimed["exports"], claimed["wildcards"]) == (0, False)
