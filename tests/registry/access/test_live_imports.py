"""Live updates are imported from where each bucket's stream republishes its writes
(`$KVR.<bucket>.<scope>`) onto the keys' own subjects (`$KV.<bucket>.<scope>`): exactly the keys
the party may get, never onto a subject it writes, rendered as `to` (static) and `local_subject`
(JWT)."""

from __future__ import annotations

from registry.access import Grants, Kind, MeshParties, Party, derive_grants
from registry.access.accounts_conf import render_accounts
from registry.access.grants import Import, verb_subjects
from registry.access.jwt_auth import data_account, party_account
from registry.contract import Bucket, KeyShape, buckets, load_catalogue, subject_matches

N1 = Party(kind=Kind.NODE, name="n1")


def grants_for(*nodes: str) -> Grants:
    parties = MeshParties(nodes=nodes, providers=("postgres",), operators=("ops",)).all(load_catalogue())
    return derive_grants(
        load_catalogue(),
        nodes=nodes,
        providers=("postgres",),
        operators=("ops",),
        user_keys={p: f"U{p.label}" for p in parties},
        account_keys={p: f"A{p.label}" for p in parties},
    )


def live_imports(grants: Grants, who: Party) -> list[Import]:
    grant = next(g for g in grants.parties if g.party == who)
    return [i for i in grant.imports if i.kind == "stream"]


def bucket_and_scope(item: Import) -> tuple[Bucket, str]:
    prefix, name, scope = item.subject.split(".", 2)
    assert prefix == buckets.LIVE_PREFIX, item.subject
    return Bucket(name, KeyShape("<key>")), scope


def test_a_node_follows_live_exactly_what_it_may_get_onto_the_keys_own_subjects() -> None:
    grants = grants_for("n1", "n2")
    followed = {(item.subject, item.to) for item in live_imports(grants, N1)}
    assert followed == {
        ("$KVR.mesh-provisioner_registry.>", "$KV.mesh-provisioner_registry.>"),
        ("$KVR.mesh-config_values.>", "$KV.mesh-config_values.>"),
        ("$KVR.mesh-controller_assignments.n1.>", "$KV.mesh-controller_assignments.n1.>"),
        ("$KVR.postgres_bound.n1.>", "$KV.postgres_bound.n1.>"),
        # the fleet, which it writes its claims into, where the stream republishes it (registry.contract.fleet)
        ("$KVR.mesh-provisioner_fleet.>", None),
    }


def test_every_live_import_is_no_wider_than_the_partys_gets_and_lands_on_no_subject_it_writes() -> None:
    grants = grants_for("n1", "n2")
    for grant in grants.parties:
        services = [i.subject for i in grant.imports if i.kind == "service"]
        for item in live_imports(grants, grant.party):
            bucket, scope = bucket_and_scope(item)
            lands = item.to or item.subject
            assert lands in (bucket.subject(scope), bucket.live_subject(scope)), item
            assert bucket.direct_get_subject(scope) in services, (grant.party.label, item.subject)
            echoes = [s for s in services if subject_matches(s, lands) or subject_matches(lands, s)]
            assert echoes == [], (grant.party.label, lands, echoes)


def test_a_static_account_imports_the_republished_writes_onto_the_keys_subjects() -> None:
    rendered = render_accounts(grants_for("n1"), verb_subjects(load_catalogue()))
    registry = '{stream: {account: "MESH", subject: "$KVR.mesh-provisioner_registry.>"}, '
    assert registry + 'to: "$KV.mesh-provisioner_registry.>"}' in rendered
    assert '{stream: "$KVR.mesh-controller_assignments.n1.>", accounts: ["node-n1"]}' in rendered
    assert '{stream: {account: "MESH", subject: "$KV.' not in rendered, "a live import that misses others' writes"


def test_a_jwt_account_imports_them_as_its_local_subject_from_the_data_accounts_export() -> None:
    grants = grants_for("n1")
    grant = next(g for g in grants.parties if g.party == N1)
    imports = party_account(grant, grants.exports_of(grant.account), {"MESH": "AMESH", "vault": "Avault"})["imports"]
    streams = {(i["subject"], i.get("local_subject")) for i in imports if i["type"] == "stream"}
    assert ("$KVR.postgres_bound.n1.>", "$KV.postgres_bound.n1.>") in streams
    # the fleet's alone is taken where it is republished: the node writes claims onto its `$KV.` subjects
    assert {subject for subject, local in streams if local is None} == {"$KVR.mesh-provisioner_fleet.>"}
    exported = {(e["subject"], e["type"]) for e in data_account(grants)["exports"]}
    assert ("$KVR.postgres_bound.>", "stream") in exported
    assert not any(subject.startswith("$KV.") for subject, kind in exported if kind == "stream")
