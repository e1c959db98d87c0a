"""What issuing the grants again would change, compared as data: `mesh-provisioner grants --check`.

Two `Grants` (what is in `--out`, what the mesh now asks for) compare account by account, each
known by its party's label (`node-n1`, `seat`): an account added, an account removed, an account
whose imports are widened (imports it gains) or narrowed (imports it loses), or another of its
fields changed (its user or account key, its limits, said value by value, and any field a later
version of `AccountGrant` adds). An import is what it lets through (kind, subject, exporting
account, shared, stream reply); a change of its description alone is a change of the account's
`descriptions`.
The grants' own notes (`wide`, `skipped`) are compared line by line.

In JWT mode the resolver is compared too (`ResolverPlan`): which account JWTs it lacks or holds
otherwise, and which it holds that the grants once issued (their seeds are in the keys folder) and
no longer name. Nothing here touches a file or the bus.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel

from registry.access.grants import AccountGrant, Grants, Import
from registry.access.jwt_auth import claims_of

_IMPORTS, _PARTY = "imports", "party"


def _effect(item: Import) -> tuple[str, str, str, bool, bool, str | None]:
    """What an import lets through, its description aside."""
    return (item.kind, item.subject, item.account, item.share, item.stream_reply, item.to)


def describe_import(item: Import) -> str:
    """`service $KV.x.n1.> from MESH, shared` (a stream: `... onto $KV.x.n1.>`): one import as the
    plan prints it."""
    notes = [note for note, on in (("shared", item.share), ("stream reply", item.stream_reply)) if on]
    onto = f" onto {item.to}" if item.to is not None else ""
    return ", ".join([f"{item.kind} {item.subject} from {item.account}{onto}", *notes])


@dataclass(frozen=True)
class AccountChange:
    """One account in both grants, changed: the imports it gains and loses, and its other fields
    that differ, by name (`user_key`, `account_key`, `limits`, `descriptions`, ...); `how` says
    how a field of several values changed (`limits`: `connections 16 -> 32`)."""

    label: str
    account: str
    widened: tuple[Import, ...] = ()
    narrowed: tuple[Import, ...] = ()
    fields: tuple[str, ...] = ()
    how: Mapping[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        head = f"~ {_account(self.account, self.label)}"
        found = [f"{head}: widened: + {describe_import(i)}" for i in self.widened]
        found += [f"{head}: narrowed: - {describe_import(i)}" for i in self.narrowed]
        for name in self.fields:
            how = f": {self.how[name]}" if name in self.how else ""
            found.append(f"{head}: {name.replace('_', ' ')} changed{how}")
        return found


@dataclass(frozen=True)
class GrantsPlan:
    """What would change from `before` to `after`: accounts added, removed and changed (each by
    label, sorted), and the notes (`wide`, `skipped`) gained and lost."""

    added: tuple[AccountGrant, ...] = ()
    removed: tuple[AccountGrant, ...] = ()
    changed: tuple[AccountChange, ...] = ()
    notes_added: tuple[str, ...] = ()
    notes_removed: tuple[str, ...] = ()

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed or self.notes_added or self.notes_removed)

    def lines(self) -> list[str]:
        """The plan as `--check` prints it: one change a line, `+` added, `-` removed, `~` changed."""
        found = [f"+ {_account(g.account, g.party.label)}: {len(g.imports)} imports" for g in self.added]
        found += [f"- {_account(g.account, g.party.label)}" for g in self.removed]
        found += [line for change in self.changed for line in change.lines()]
        found += [f"+ note: {note}" for note in self.notes_added]
        found += [f"- note: {note}" for note in self.notes_removed]
        return found

    def summary(self) -> str:
        if self.unchanged:
            return "nothing would change"
        counts = f"{len(self.added)} added, {len(self.removed)} removed, {len(self.changed)} changed"
        notes = len(self.notes_added) + len(self.notes_removed)
        return f"accounts: {counts}" + (f"; {notes} notes" if notes else "")


def _account(account: str, label: str) -> str:
    """`account node-n1`; `account MESH (seat)` where the party's label is not the account's name."""
    return f"account {account}" + (f" ({label})" if label != account else "")


def plan_grants(before: Grants | None, after: Grants) -> GrantsPlan:
    """What issuing `after` changes over `before` (`None`: nothing issued yet, every account is added)."""
    old, new = _by_label(before), _by_label(after)
    return GrantsPlan(
        added=tuple(new[label] for label in sorted(new.keys() - old.keys())),
        removed=tuple(old[label] for label in sorted(old.keys() - new.keys())),
        changed=tuple(
            change
            for label in sorted(old.keys() & new.keys())
            if (change := compare_accounts(old[label], new[label])) is not None
        ),
        notes_added=_gained(_notes(before), _notes(after)),
        notes_removed=_gained(_notes(after), _notes(before)),
    )


def compare_accounts(before: AccountGrant, after: AccountGrant) -> AccountChange | None:
    """How one party's account changed, or `None` when it did not."""
    old, new = {_effect(i): i for i in before.imports}, {_effect(i): i for i in after.imports}
    widened = tuple(new[key] for key in new if key not in old)
    narrowed = tuple(old[key] for key in old if key not in new)
    fields = [name for name in _other_fields(before, after) if getattr(before, name) != getattr(after, name)]
    how = {name: said for name in fields if (said := _how(getattr(before, name), getattr(after, name)))}
    if any(old[key].why != new[key].why for key in old.keys() & new.keys()):
        fields.append("descriptions")
    if not (widened or narrowed or fields):
        return None
    return AccountChange(after.party.label, after.account, widened, narrowed, tuple(fields), how)


def _how(before: object, after: object) -> str:
    """How a field of several values changed, each value that differs (`connections 16 -> 32`) or
    each one gained and lost (`+ n2`); empty for a plain value (a key: said by name alone)."""
    if isinstance(before, tuple) and isinstance(after, tuple):
        return ", ".join([*(f"+ {v}" for v in after if v not in before), *(f"- {v}" for v in before if v not in after)])
    if not isinstance(before, BaseModel) or type(before) is not type(after):
        return ""
    return ", ".join(
        f"{name} {_value(getattr(before, name))} -> {_value(getattr(after, name))}"
        for name in type(before).model_fields
        if getattr(before, name) != getattr(after, name)
    )


def _value(value: object) -> str:
    return "none" if value is None else str(value)


def _other_fields(before: AccountGrant, after: AccountGrant) -> list[str]:
    names = dict.fromkeys([*type(before).model_fields, *type(after).model_fields])
    return [name for name in names if name not in (_IMPORTS, _PARTY)]


def _by_label(grants: Grants | None) -> dict[str, AccountGrant]:
    if grants is None:
        return {}
    return {grant.party.label: grant for grant in (*grants.data, *grants.parties)}


def _notes(grants: Grants | None) -> tuple[str, ...]:
    return () if grants is None else (*grants.wide, *grants.skipped)


def _gained(before: Iterable[str], after: Iterable[str]) -> tuple[str, ...]:
    had = set(before)
    return tuple(note for note in after if note not in had)


@dataclass(frozen=True)
class ResolverPlan:
    """What the resolver must be told to hold exactly the issued accounts: the account JWTs to push
    (by public key; the exporting accounts first, so an import never waits for its export) and
    the accounts to delete."""

    push: tuple[str, ...]
    delete: tuple[str, ...]


def plan_resolver(issued: Mapping[str, str], held: Mapping[str, str | None], *, ours: Collection[str]) -> ResolverPlan:
    """`issued`: each account JWT of the grants by its public key; `held`: each account the
    resolver lists, with the JWT it holds for it (`None`: not looked up, for an account the grants
    do not name); `ours`: the accounts the grants' keys folder holds seeds of. Pushes what it lacks
    or holds otherwise, exporters first, and deletes what the grants no longer name among `ours`:
    an account the operator signed for anything else (by hand, another tool) is left alone."""
    push = [key for key, token in issued.items() if held.get(key) != token]
    push.sort(key=lambda key: not claims_of(issued[key])["nats"].get("exports"))  # stable: exporters first
    delete = sorted(key for key in held if key not in issued and key in ours)
    return ResolverPlan(push=tuple(push), delete=tuple(delete))
