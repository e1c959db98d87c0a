"""What `grants --check` reports: the difference of two grants, account by account, and what a
resolver must be told to hold exactly the issued accounts. Pure: no file, no bus."""

from __future__ import annotations

from collections.abc import Sequence

from registry.access import (
    AccountGrant,
    Grants,
    Kind,
    Nkey,
    Party,
    derive_grants,
    encode_jwt,
    plan_grants,
    plan_resolver,
)
from registry.access.grants import Import
from registry.access.plan import compare_accounts, describe_import
from registry.contract import load_catalogue


class _KeyOf(dict[Party, str]):
    """Every party's made-up user key, whoever `derive_grants` issues a grant to."""

    def __init__(self, suffix: str = "") -> None:
        super().__init__()
        self.suffix = suffix

    def __missing__(self, party: Party) -> str:
        return f"U{party.label}{self.suffix}"


def grants_for(
    nodes: Sequence[str],
    *,
    machines: dict[str, Sequence[str]] | None = None,
    operators: Sequence[str] = ("ops",),
    key_suffix: str = "",
) -> Grants:
    return derive_grants(
        load_catalogue(),
        nodes=nodes,
        providers=("postgres",),
        operators=operators,
        machines=machines,
        user_keys=_KeyOf(key_suffix),
    )


def grant_of(grants: Grants, label: str) -> AccountGrant:
    return next(g for g in (*grants.data, *grants.parties) if g.party.label == label)


def test_the_same_grants_change_nothing() -> None:
    plan = plan_grants(grants_for(["n1", "n2"]), grants_for(["n1", "n2"]))
    assert plan.unchanged
    assert plan.lines() == []
    assert plan.summary() == "nothing would change"


def test_nothing_issued_yet_adds_every_account() -> None:
    after = grants_for(["n1"])
    plan = plan_grants(None, after)
    assert [g.party.label for g in plan.added] == sorted(g.party.label for g in (*after.data, *after.parties))
    assert not plan.removed and not plan.changed


def test_a_node_added_and_one_removed_are_said_and_nothing_else() -> None:
    plan = plan_grants(grants_for(["n1", "n2"]), grants_for(["n1", "n3"]))
    assert [g.party for g in plan.added] == [Party(kind=Kind.NODE, name="n3")]
    assert [g.party for g in plan.removed] == [Party(kind=Kind.NODE, name="n2")]
    assert plan.changed == ()
    assert plan.lines()[:2] == [f"+ account node-n3: {len(plan.added[0].imports)} imports", "- account node-n2"]
    assert plan.summary() == "accounts: 1 added, 1 removed, 0 changed"


def test_naming_a_providers_machine_narrows_the_other_nodes_and_drops_the_note() -> None:
    wide, narrow = grants_for(["n1", "n2"]), grants_for(["n1", "n2"], machines={"postgres": ["n2"]})
    plan = plan_grants(wide, narrow)
    assert [(c.label, [i.subject for i in c.narrowed], c.widened) for c in plan.changed] == [
        ("node-n1", ["mesh-vault.consumers"], ())
    ]
    assert plan.notes_removed == wide.wide and plan.notes_added == ()
    assert "~ account node-n1: narrowed: - service mesh-vault.consumers from vault, shared" in plan.lines()
    assert plan_grants(narrow, wide).changed[0].widened == plan.changed[0].narrowed  # and back: widened


def test_a_new_key_is_a_change_of_the_account_not_of_its_imports() -> None:
    plan = plan_grants(grants_for(["n1"]), grants_for(["n1"], key_suffix="-new"))
    labels = {c.label: c for c in plan.changed}
    assert labels["node-n1"].fields == ("user_key",) and labels["node-n1"].widened == ()
    assert "~ account MESH (seat): user key changed" in plan.lines()


def test_an_import_shared_no_longer_is_one_narrowed_and_one_widened() -> None:
    before = grant_of(grants_for(["n1"]), "node-n1")
    verb = next(i for i in before.imports if i.share)
    unshared = verb.model_copy(update={"share": False})
    after = before.model_copy(update={"imports": tuple(unshared if i == verb else i for i in before.imports)})
    change = compare_accounts(before, after)
    assert change is not None
    assert (change.widened, change.narrowed, change.fields) == ((unshared,), (verb,), ())


def test_a_description_changed_alone_is_said_as_such() -> None:
    before = grant_of(grants_for(["n1"]), "node-n1")
    first = before.imports[0]
    reworded = first.model_copy(update={"why": "reworded"})
    after = before.model_copy(update={"imports": (reworded, *before.imports[1:])})
    change = compare_accounts(before, after)
    assert change is not None and change.fields == ("descriptions",) and not change.widened


class _LaterGrant(AccountGrant):
    """An account as a later version may carry it: a field the plan was not written for."""

    quota: int = 0


def test_a_field_of_an_account_the_plan_does_not_know_is_still_compared() -> None:
    grant = grant_of(grants_for(["n1"]), "node-n1")
    before = _LaterGrant(**dict(grant), quota=16)
    after = _LaterGrant(**dict(grant), quota=32)
    change = compare_accounts(before, after)
    assert change is not None and change.fields == ("quota",)
    assert change.lines() == ["~ account node-n1: quota changed"]


def test_limits_changed_are_said_value_by_value() -> None:
    before = grant_of(grants_for(["n1"]), "node-n1")
    raised = before.held_to.model_copy(update={"connections": 32, "payload": 262144})
    change = compare_accounts(before, before.model_copy(update={"limits": raised}))
    assert change is not None and change.fields == ("limits",) and not change.widened
    assert change.lines() == ["~ account node-n1: limits changed: connections 16 -> 32, payload 131072 -> 262144"]


def test_the_order_of_the_imports_is_no_change() -> None:
    before = grant_of(grants_for(["n1"]), "node-n1")
    after = before.model_copy(update={"imports": tuple(reversed(before.imports))})
    assert compare_accounts(before, after) is None


ACCOUNT_SEED = b"SAAI2F4Z7GMKX3WP2CINLNNFK42VFY4737UQKUZUG45QCM33YWGDXDRKBA"  # made for this test


def _account_jwt(name: str, *, exports: bool, issued_at: int = 1) -> tuple[str, str]:
    key = Nkey(ACCOUNT_SEED)
    body: dict[str, object] = {"type": "account", **({"exports": [{"subject": "x"}]} if exports else {})}
    return f"A{name.upper()}", encode_jwt(key, subject=f"A{name.upper()}", name=name, body=body, issued_at=issued_at)


def test_the_resolver_is_pushed_what_it_lacks_or_holds_otherwise_exporters_first() -> None:
    node_a, node_b, data, stale = (
        _account_jwt("node-a", exports=False),
        _account_jwt("node-b", exports=False),
        _account_jwt("mesh", exports=True),
        _account_jwt("node-gone", exports=False),
    )
    changed_b = _account_jwt("node-b", exports=False, issued_at=2)
    issued = dict([node_a, changed_b, data])
    held: dict[str, str | None] = dict([node_a, node_b, stale])
    plan = plan_resolver(issued, held, ours={*issued, stale[0]})
    assert plan.push == (data[0], node_b[0])  # the data account lacked, first; node-b held otherwise
    assert plan.delete == (stale[0],)


def test_an_account_the_grants_never_issued_is_never_deleted() -> None:
    """Held by the resolver, named by no grant, but no seed of it in the keys folder: the
    operator signed it for something else (the system account of another issue, a monitoring
    account made by hand)."""
    ours, foreign = _account_jwt("node-gone", exports=False), _account_jwt("monitoring", exports=False)
    issued = dict([_account_jwt("mesh", exports=True)])
    plan = plan_resolver(issued, {ours[0]: None, foreign[0]: None, **issued}, ours={*issued, ours[0]})
    assert plan.delete == (ours[0],)


def test_a_resolver_holding_exactly_the_issued_accounts_is_told_nothing() -> None:
    accounts = dict([_account_jwt("mesh", exports=True), _account_jwt("node-a", exports=False)])
    plan = plan_resolver(accounts, dict(accounts), ours=accounts.keys())
    assert plan.push == () and plan.delete == ()


def test_an_import_is_described_by_what_it_lets_through() -> None:
    batch = Import(kind="service", subject="$JS.API.DIRECT.GET.KV_x", stream_reply=True, why="w")
    assert describe_import(batch) == "service $JS.API.DIRECT.GET.KV_x from MESH, stream reply"
