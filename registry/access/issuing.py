"""Issuing a mesh's grants to a folder: what `mesh-provisioner grants` writes.

    <out>/accounts.conf       the accounts block for nats-server (static configuration)
    <out>/grants.json         the same grants as data, for the controller and the seat
    <keys>/<party>.nk         one nkey seed per party: seat.nk, vault.nk, node-n1.nk,
                              writer-config.nk, ... (`keys` is `out` unless given: seeds are
                              secrets, keep them apart)

The controller can call `issue_grants` itself. Seeds already in `keys` are kept, so running it
again with one more node changes only what that node adds, and the output is reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from registry.access.accounts_conf import render_accounts
from registry.access.credentials import issue_user_keys
from registry.access.grants import Grants, chosen_writers, data_parties, derive_grants, verb_subjects
from registry.access.jwt_auth import issue_account_keys, write_jwt_auth
from registry.access.limits import GivenLimits, limits_of
from registry.access.parties import Kind, Party, name_problems
from registry.access.sites.accounts import with_site_accounts
from registry.access.sites.links import site_party
from registry.access.sites.topology import Topology
from registry.contract import Domain, load_catalogue
from registry.errors import SettingsError

MACHINE_MARK = "@"  # `postgres@n2`: provider postgres runs on node n2 (a module name holds no `@`)


@dataclass(frozen=True)
class MeshParties:
    """Who the grants are for, by name; `machines` names the nodes each provider's module runs
    on, which alone may ask the vault for its consumers' credentials; `writers` the domains of
    the catalogue that write their bucket (`config`, `placement`), `None` meaning every one;
    `limits` what the accounts of a kind of party may hold, where not their kind's own; `topology`
    where the nodes live: each site's links get an account of the site's own at the hub
    (`registry.access.sites.accounts`)."""

    nodes: Sequence[str]
    providers: Sequence[str] = ()
    operators: Sequence[str] = ()
    machines: Mapping[str, Sequence[str]] = field(default_factory=dict)
    writers: Sequence[str] | None = None
    limits: Mapping[Kind, GivenLimits] = field(default_factory=dict)
    topology: Topology = field(default_factory=Topology)

    def __post_init__(self) -> None:
        named = {"node": self.nodes, "provider": self.providers, "operator": self.operators, "writer": self.writers}
        problems = [problem for kind, names in named.items() for problem in name_problems(kind, names or ())]
        if problems:  # refused before any seed is written or any file rendered
            raise SettingsError("the grants' parties", "; ".join(problems[:5]))
        for kind, given in self.limits.items():
            limits_of(kind, given)  # refused before any seed is written: below what the party needs

    @staticmethod
    def named(
        nodes: Sequence[str],
        providers: Sequence[str],
        operators: Sequence[str],
        *,
        writers: Sequence[str] | None = None,
    ) -> MeshParties:
        """The parties as the command line names them: a provider `MODULE` or `MODULE@NODE`, the
        latter naming a machine it runs on (repeat it for each)."""
        machines: dict[str, list[str]] = {}
        for given in providers:
            provider, mark, node = given.partition(MACHINE_MARK)
            if mark and node:
                machines.setdefault(provider, []).append(node)
            elif mark:
                raise SettingsError("--provider", f"{given!r} names no node after {MACHINE_MARK!r}")
        unique = list(dict.fromkeys(given.partition(MACHINE_MARK)[0] for given in providers))
        return MeshParties(nodes=nodes, providers=unique, operators=operators, machines=machines, writers=writers)

    def all(self, domains: Mapping[str, Domain]) -> list[Party]:
        """Every party, the writers as the catalogue `domains` has them."""
        return [
            *data_parties(),
            *(Party(kind=Kind.NODE, name=n) for n in self.nodes),
            *(Party(kind=Kind.PROVIDER, name=p) for p in self.providers),
            *(Party(kind=Kind.OPERATOR, name=o) for o in self.operators),
            *(Party(kind=Kind.WRITER, name=w) for w in chosen_writers(domains, self.writers)),
        ]

    def sites(self) -> list[Party]:
        """Each site's links at the hub, as a party (their users are the links': no seed of their own)."""
        return [site_party(site) for site in self.topology.sites]


def issue_grants(
    out: Path, parties: MeshParties, *, domains_file: Path | None = None, keys: Path | None = None, jwt: bool = False
) -> Grants:
    """Writes the static configuration and the grants as data to `out`; the seeds are read from,
    or newly written to, `keys` (default `out`). With `jwt`, also decentralized auth: account
    keys (in grants.json too), JWTs and `.creds` files (`registry.access.jwt_auth`)."""
    out.mkdir(parents=True, exist_ok=True)
    domains = load_catalogue(domains_file)
    everyone = parties.all(domains)
    user_keys = issue_user_keys(everyone, keys or out)
    account_keys = issue_account_keys([*everyone, *parties.sites()], keys or out) if jwt else None
    grants = derive_grants(
        domains,
        nodes=parties.nodes,
        providers=parties.providers,
        operators=parties.operators,
        machines=parties.machines,
        writers=parties.writers,
        limits=parties.limits,
        user_keys=user_keys,
        account_keys=account_keys,
    )
    grants = with_site_accounts(
        grants,
        parties.topology,
        domains=domains,
        providers=parties.providers,
        keys=keys or out,
        account_keys=account_keys,
    )
    (out / "accounts.conf").write_text(render_accounts(grants, verb_subjects(domains)), encoding="utf-8")
    (out / "grants.json").write_text(grants.to_json(), encoding="utf-8")  # public keys only: no secret
    if jwt:
        write_jwt_auth(out, grants, verb_subjects(domains), keys=keys or out)
    return grants
