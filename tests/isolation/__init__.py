"""A mesh on a real nats-server started with the configuration `mesh-provisioner grants` writes:
the seat serving in the data account, and a connection for any party on its own nkey."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import StandIns, Vault, stand_ins, vault_serving
from registry.access import (
    SERVER_AUTH,
    SYSTEM_USER,
    AccountGrant,
    Grants,
    Kind,
    MeshParties,
    Party,
    creds_path,
    issue_grants,
    load_jwt_auth,
    render_server_auth,
    seed_path,
)

# The renderers `issue_grants` uses, reached past the surface: a test hands them grants it widened.
from registry.access.accounts_conf import render_accounts
from registry.access.grants import verb_subjects
from registry.access.jwt_auth import write_jwt_auth
from registry.contract import buckets, load_catalogue
from registry.wire import Bus, BusOptions, connect
from tests.helpers import serving

NODES = ("n1", "n2")
NODE = NODES[0]  # the node whose client the mesh tests run
PROVIDERS = ("postgres",)
OPERATORS = ("ops",)


def party(kind: Kind, name: str = "") -> Party:
    return Party(kind=kind, name=name or {Kind.SEAT: buckets.SEAT, Kind.VAULT: "vault"}.get(kind, name))


Widening = Callable[[Grants], Grants]


def granting(who: Party, *imports: dict[str, str | bool]) -> Widening:
    """Grants widened on purpose: `who` also imports `imports` (an `Import`'s fields), as if
    `registry.access.grants` derived them; the data account then exports them too."""

    def widen(grants: Grants) -> Grants:
        parties = [_with_imports(g, imports) if g.party == who else g for g in grants.parties]
        return Grants.model_validate({**grants.model_dump(), "parties": [g.model_dump() for g in parties]})

    return widen


def _with_imports(grant: AccountGrant, imports: Sequence[dict[str, str | bool]]) -> AccountGrant:
    granted = grant.model_dump()
    return AccountGrant.model_validate({**granted, "imports": [*granted["imports"], *imports]})


def _vault_subjects() -> list[str]:
    return verb_subjects(load_catalogue(None))


@dataclass(frozen=True)
class Mesh:
    server: LocalNats
    keys: Path
    grants: Grants

    def options(self, who: Party) -> BusOptions:
        return BusOptions(servers=(self.server.url,), name=who.label, nkey_seed=seed_path(self.keys, who))

    @asynccontextmanager
    async def connect(self, who: Party) -> AsyncIterator[Bus]:
        async with connect(self.options(who)) as bus:
            yield bus

    async def raw(self, who: Party) -> Client:
        """nats-py itself on `who`'s key: an attacker is not bound to our library."""
        return await nats.connect(self.server.url, nkeys_seed=str(seed_path(self.keys, who)), name=who.label)


@asynccontextmanager
async def mesh_server(
    state: Path,
    *,
    nodes: Sequence[str] = NODES,
    providers: Sequence[str] = PROVIDERS,
    operators: Sequence[str] = OPERATORS,
    widen: Widening | None = None,
    seat: Mapping[str, Any] | None = None,
    domains_file: Path | None = None,
) -> AsyncIterator[Mesh]:
    """nats-server with the generated accounts (as `widen` widens them, if given) and the seat
    serving in the data account; both from the catalogue with `domains_file`, if given."""
    keys = state / "keys"
    parties = MeshParties(nodes=nodes, providers=providers, operators=operators)
    grants = issue_grants(keys, parties, domains_file=domains_file)
    seat = {**(seat or {}), **({"domains_file": domains_file} if domains_file else {})}
    config_dir = state / "nats"
    config_dir.mkdir(parents=True, exist_ok=True)
    accounts = render_accounts(widen(grants), _vault_subjects()) if widen else (keys / "accounts.conf").read_text()
    (config_dir / "accounts.conf").write_text(accounts)
    async with local_nats(config_dir, "include ./accounts.conf") as server:
        mesh = Mesh(server, keys, grants)
        async with seat_serving(mesh, keys / "grants.json", providers, seat):
            yield mesh


@dataclass(frozen=True)
class JwtMesh(Mesh):
    """The same mesh in JWT mode: nats-server trusts the operator, every party connects with its
    `.creds`, and `out` holds the grants, the JWTs and `jwt/server-auth.conf`."""

    out: Path

    def options(self, who: Party | str) -> BusOptions:
        label = who if isinstance(who, str) else who.label
        return BusOptions(servers=(self.server.url,), name=label, creds=creds_path(self.keys, label))

    @asynccontextmanager
    async def system(self) -> AsyncIterator[Bus]:
        """The system account's user: pushes and deletes accounts."""
        async with connect(self.options(SYSTEM_USER)) as bus:
            yield bus

    async def raw(self, who: Party) -> Client:
        return await nats.connect(self.server.url, user_credentials=str(creds_path(self.keys, who.label)))

    def issue(self, nodes: Sequence[str]) -> Grants:
        """The grants issued again for `nodes` (the keys already issued are kept)."""
        return issue_grants(
            self.out, MeshParties(nodes=nodes, providers=PROVIDERS, operators=OPERATORS), keys=self.keys, jwt=True
        )


@asynccontextmanager
async def jwt_mesh_server(
    state: Path,
    *,
    nodes: Sequence[str] = NODES,
    widen: Widening | None = None,
    seat: Mapping[str, Any] | None = None,
    domains_file: Path | None = None,
) -> AsyncIterator[JwtMesh]:
    """nats-server in JWT mode with the accounts of the issued grants (as `widen` widens them, if
    given) preloaded (its resolver takes more at run time), and the seat serving in the data account;
    both from the catalogue with `domains_file`, if given."""
    keys, out, config_dir = state / "keys", state / "grants", state / "nats"
    parties = MeshParties(nodes=nodes, providers=PROVIDERS, operators=OPERATORS)
    grants = issue_grants(out, parties, keys=keys, jwt=True, domains_file=domains_file)
    seat = {**(seat or {}), **({"domains_file": domains_file} if domains_file else {})}
    if widen:
        write_jwt_auth(out, widen(grants), _vault_subjects(), keys=keys)
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / SERVER_AUTH).write_text(render_server_auth(load_jwt_auth(out), config_dir / "resolver"))
    async with local_nats(config_dir, f"include ./{SERVER_AUTH}") as server:
        mesh = JwtMesh(server, keys, grants, out)
        async with seat_serving(mesh, out / "grants.json", PROVIDERS, seat):
            yield mesh


@asynccontextmanager
async def seat_serving(
    mesh: Mesh, grants_file: Path, providers: Sequence[str], settings: Mapping[str, Any] | None = None
) -> AsyncIterator[None]:
    """The seat on its own key, scoping by the grants (and `settings`), until the block exits."""
    options = mesh.options(party(Kind.SEAT))
    given = {"grants_file": grants_file, "providers": list(providers), **(settings or {})}
    async with serving(mesh.server.url, bus_options=options, **given):
        yield


@dataclass(frozen=True)
class Domains:
    seat: Bus
    parts: StandIns


@asynccontextmanager
async def domains_of(mesh: Mesh) -> AsyncIterator[Domains]:
    """The stand-ins written by the seat; the vault served on the vault's own key, scoping by who asks."""
    async with (
        mesh.connect(party(Kind.SEAT)) as seat,
        stand_ins(seat, NODE, with_vault=False) as parts,
        mesh.connect(party(Kind.VAULT)) as vault_bus,
        vault_serving(vault_bus, Vault(parties=mesh.grants.party_map())),
    ):
        yield Domains(seat, parts)
