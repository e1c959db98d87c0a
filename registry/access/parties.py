"""Who is on the bus: the parties of a mesh, their accounts, and who asks a request.

Each party connects on a NATS account of its own (see `registry.access.grants`, which derives what each
account imports); the seat alone holds the data account. A responder (the seat in the data
account, the vault in its own) learns the asking account from the bus, never from the request
body: an import with `share: true` adds the header `Nats-Request-Info`, whose `acc` is the
account's name (static configuration) or public key (JWT). `PartyMap` turns that back into the
party it was issued to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from registry.contract import MAX_NAME_BYTES, encode_token

REQUEST_INFO = "Nats-Request-Info"
DATA_ACCOUNT = "MESH"
SYSTEM_ACCOUNT = "SYS"


# A provider module's name makes its bucket's name `<provider>_bound`: only what a bucket name holds.
PROVIDER_PATTERN = r"^[A-Za-z0-9_-]+$"
MAX_PROVIDER_NAME = 200
# What no name may hold, escaped or not: it would reach a terminal or a file's comment as it is.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def name_problems(kind: str, names: Sequence[str]) -> list[str]:
    """What is wrong with each name given for a party of `kind` (`node`, `provider`, ...), the
    same whether a flag or the mesh file gave it: empty, over `MAX_NAME_BYTES`, holding a control
    or bidirectional character; a provider's, anything but letters, digits, `-` and `_`."""
    return [f"{kind} {name!r}: {problem}" for name in names if (problem := _name_problem(kind, name))]


def _name_problem(kind: str, name: str) -> str | None:
    if not name:
        return "a name is never empty"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"a name is at most {MAX_NAME_BYTES} bytes (UTF-8)"
    if CONTROL.search(name):
        return "a name holds no control or bidirectional character"
    if kind == "provider" and not (re.fullmatch(PROVIDER_PATTERN, name) and len(name) <= MAX_PROVIDER_NAME):
        return f"a provider's name names its bucket <name>_bound: letters, digits, - and _, at most {MAX_PROVIDER_NAME}"
    return None


class Kind(StrEnum):
    SEAT = "seat"
    NODE = "node"
    PROVIDER = "provider"
    OPERATOR = "operator"
    VAULT = "vault"
    WRITER = "writer"  # a domain writing its own bucket, named after the domain: `writer-config`
    SITE = "site"  # a site's leaf links at the hub (registry.access.sites): `site-home`


class Party(BaseModel):
    """One party of the mesh: its kind and its name (a node's name, a provider's module, a writing
    domain's name, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind
    name: str

    @property
    def account(self) -> str:
        """Its account's name in a static configuration (its label); the data account for the seat."""
        if self.kind == Kind.SEAT:
            return DATA_ACCOUNT
        return self.label

    @property
    def label(self) -> str:
        """How files and logs name it: `node-n1`, `provider-postgres`, `writer-placement`, `site-home`, `seat`."""
        if self.kind in (Kind.SEAT, Kind.VAULT):
            return self.kind.value
        return f"{self.kind.value}-{encode_token(self.name)}"

    @property
    def sees_the_mesh(self) -> bool:
        """Operators, providers and the data account's own parties are answered about the mesh;
        a node about its own keys only; a writer or a site's links about nothing (neither is
        granted the verb: a responder that hears from one anyway refuses it)."""
        return self.kind not in (Kind.NODE, Kind.WRITER, Kind.SITE)


class PartyMap:
    """From the account a request came from to the party it was issued to; and, for a site's links
    (whose requests the hub's server marks as the links' own, `registry.access.sites`), the nodes
    living at that site, for whom alone they may ask."""

    def __init__(self, accounts: Mapping[str, Party], speaks_for: Mapping[Party, Iterable[str]] | None = None) -> None:
        self._accounts = dict(accounts)
        self._speaks_for = {party: frozenset(nodes) for party, nodes in (speaks_for or {}).items()}

    @staticmethod
    def of(
        parties: Iterable[tuple[Party, str | None]], speaks_for: Mapping[Party, Iterable[str]] | None = None
    ) -> PartyMap:
        """Each party by its static account name and, when given, its account's public key."""
        accounts: dict[str, Party] = {}
        for party, account_key in parties:
            if party.account != DATA_ACCOUNT:
                accounts[party.account] = party
            if account_key is not None:
                accounts[account_key] = party
        return PartyMap(accounts, speaks_for)

    def speaks_for(self, party: Party) -> frozenset[str]:
        """The nodes a site's links ask for (those living at the site); none for any other party."""
        return self._speaks_for.get(party, frozenset())

    def who_asks(self, headers: Mapping[str, str]) -> Party | None:
        """The party whose account sent a request; `None` when it came from inside the
        responder's own account (no `Nats-Request-Info`: no import carried it).
        Raises `UnknownAccount` for a header naming an account no grant was issued to."""
        info = headers.get(REQUEST_INFO)
        if info is None:
            return None
        account = _account_in(info)
        party = self._accounts.get(account)
        if party is None:
            raise UnknownAccount(account)
        return party


class UnknownAccount(Exception):
    def __init__(self, account: str) -> None:
        self.account = account
        super().__init__(f"account {account[:64]!r} was issued no grant")


def _account_in(info: str) -> str:
    try:
        document = json.loads(info)
    except ValueError:
        return "?"
    account = document.get("acc") if isinstance(document, dict) else None
    return account if isinstance(account, str) else "?"
