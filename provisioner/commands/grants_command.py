"""`mesh-provisioner grants`: every party's account, imports and key, written for the controller.

A thin layer over `registry.access.issue_grants`, which the controller can also call itself: the
parties come from a mesh file (`registry.access.read_mesh_file`) and the flags, which add to it;
`--check` compares instead of writing (`registry.access.plan_grants`), `--push` then brings the
resolver in line (`provisioner.commands.grants_push`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
from pydantic import ValidationError

from provisioner.commands.grants_push import push_grants
from provisioner.settings import GrantsArguments
from registry.access import (
    SEED_SUFFIX,
    SYSTEM_USER,
    Grants,
    GrantsPlan,
    MeshParties,
    SitesFile,
    SitesPlan,
    Topology,
    combined,
    creds_path,
    issue_grants,
    issue_sites,
    plan_grants,
    plan_sites,
    read_grants_file,
    read_mesh_file,
    read_sites_file,
    sites_json,
)
from registry.command_line import EXIT_FAILED, EXIT_OK, EXIT_USAGE, EXIT_WOULD_CHANGE, exit_codes_help
from registry.contract import JsonRefused, buckets, load_catalogue
from registry.edge import BusSettings, add_settings_arguments, flag_of, given_flags, load_settings
from registry.errors import SettingsError
from registry.runtime import json_text
from registry.wire import BusOptions

# The credentials other than a `.creds` file: `--push` is the system account's user, which has one.
_NOT_THE_SYSTEM_USER = ("nkey", "user", "password", "token")

DESCRIPTION = """\
Derive every party's NATS account from the catalogue, the providers and the node names, and write:
  OUT/accounts.conf   an `accounts { ... }` block for nats-server (include it; reload to apply)
  OUT/grants.json     the same grants as data (the seat reads it: --grants-file); its JSON Schema
                      ships as registry/access/grants.schema.json (`version` names its shape)
  KEYS/<party>.nk     one nkey seed per party (seat, vault, node-<name>, provider-<name>,
                      operator-<name>, writer-<domain>); every program connects with
                      NATS_NKEY=<file>
With --jwt, also decentralized auth (nats-server trusts an operator; accounts change at run time):
  OUT/jwt/server-auth.conf    operator, system account, resolver and preloaded accounts (include it)
  OUT/jwt/*.jwt               the operator's and every account's JWT
  KEYS/<party>.creds          each party's credentials (NATS_CREDS=<file>), KEYS/sys.creds to push
A provider given as MODULE@NODE names a machine its module runs on (repeat for each): only those
nodes may ask the vault for its consumers' credentials (kind `consumers`); every node asks for
secrets. A provider given without a machine leaves that verb to every node, and says so.
Seeds already in KEYS are reused: the output is reproducible (the same mesh and seeds write the
same accounts.conf and grants.json, byte for byte; issued again into the same OUT, every JWT whose
claims are unchanged is kept as it is), and adding a node keeps every other party's key. Seeds
are secrets (mode 0600): keep KEYS out of version control.

The mesh file (--mesh, TOML) names the parties once; every key is optional:
  version = 1
  nodes = ["n1", "n2"]
  operators = ["ops"]
  writers = ["config", "placement"]  # left out: every domain writing a bucket; [] none
  domains_file = "domains.toml"      # relative to the mesh file
  [providers.postgres]
  machines = ["n2"]                  # the nodes its module runs on
  [limits.node]                      # what the accounts of a kind may hold (node, provider,
  connections = 32                   # operator, writer, vault): connections, subscriptions,
  payload = 262144                   # payload; left out, the kind's own
  [hub]                              # where the nodes live: the hub (JetStream domain `hub`)
  leafnodes = ["nats-leaf://hub.example.org:7422"]   # the URLs each site's server dials
  listen = "0.0.0.0:7422"            # where the hub accepts them (the default)
  [sites.home]                       # a site: one nats-server, JetStream domain `home`, with
  nodes = ["n1"]                     # the nodes living there (a node at no site: at the hub)
The flags add to it: --node, --provider, --operator and --writer name more parties (a party
named by both counts once, the file's first; writers named by neither: every one); --domains-file
is refused when the file names one. A file that cannot be read, an unknown key, a name listed
twice, a machine that is not one of its nodes, a limit below what the party's program needs, a
site name that is no JetStream domain, a node at two sites or unknown, a site with no node or
sites without [hub] leafnodes is an error naming the file, the key and why (exit 2). Every name,
from the file or a flag, is checked alike: never empty, at most 1,024 bytes, no control or
bidirectional character; a provider's only letters, digits, - and _ (it names its bucket). A
domains file whose domain would give a writer a bucket the seat or a provider owns, or have every
node read a provider's _bound whole (a key not led by <node>), is refused too (exit 2).

When the file names sites, the servers' configuration is written too:
  OUT/sites/hub.conf            the hub's `leafnodes { listen, no_advertise }` and its accounts:
                                accounts.conf's, with each site's link users; include it at the top
                                level in place of accounts.conf
  OUT/sites/<site>.conf         a site's `leafnodes { remotes }` to the hub (the data account's and
                                the vault's, with their nkey seeds: mode 0600) and its accounts
                                (the data account with the site's seat, the vault's, its nodes')
  OUT/sites/<server>.jetstream.conf   its JetStream domain: include it inside `jetstream { }`
  OUT/sites/sites.json          the topology as data: each site's domain, nodes, links
  KEYS/leaf-<site>-data.nk, leaf-<site>-vault.nk, seat-<site>.nk   their seeds, reused
  with --jwt, also OUT/sites/<server>.jwt.conf (the leaf node blocks), <site>.server-auth.conf (a
  site's operator and accounts: its nodes' JWTs take their writes from the hub; the hub keeps
  jwt/server-auth.conf) and KEYS/leaf-<site>-data.creds, leaf-<site>-vault.creds,
  seat-<site>.creds; the vault's link is refused in JWT mode until the vault's account JWT allows
  leaf connections (not yet)
A site's node writes at the hub (fail fast: its account imports $JS.hub.API.$KV.<bucket>.<node>.>
as $KV.<bucket>.<node>.>) and reads at the site, from copies the site makes. A link's user may
carry exactly those writes of the site's own nodes, the site's mirrors of the hub's buckets
(registry, shared config, needs, applied, collect, leases), one copy per site node of each
node-keyed bucket it reads (placement, <provider>_bound: that node's keys alone), the verb and the
vault's verbs the site's nodes are granted, and the answers. A site's server sets ping_interval 10s,
ping_max 3 and leafnodes reconnect 1, so that a silent link is dropped and writes fail fast.

--check writes nothing (not even a new seed): it prints what issuing would change against what
is in OUT/grants.json, one change a line: `+ account` added, `- account` removed, `~ account ...:
widened: + IMPORT` or `narrowed: - IMPORT`, `~ account ...: user key changed` (any other field
of an account that changes: its keys, the descriptions of its imports, its limits, said value by
value: `limits changed: connections 16 -> 32`), `+ note` / `- note`
(what is granted wide, or not granted), then a summary. With sites, against OUT/sites/sites.json
too: `+ site NAME` / `- site NAME`, `~ site NAME: + node n3` (its domain and seat key likewise),
`~ site NAME link LABEL: publish widened: + SUBJECT` or `narrowed: - SUBJECT` (subscribe alike),
`~ hub: ...`, then its own summary. Exit 0: nothing would change; exit 8: something would. With
--json, the same as one JSON document: {"grants": {"changes", "summary", "against"}, "sites": ...}.

--jwt --push issues, then connects to nats-server as the system account's user (KEYS/sys.creds,
or --nats-creds; the server from --nats-url, NATS_URL or a nats context) and makes its resolver
hold exactly the issued accounts: each account JWT it lacks or holds otherwise is pushed (the
exporting accounts first), each account it holds that the grants issued (its seed is in KEYS) and
no longer name is deleted (its connections are closed, its credentials refused); an account the
operator signed for anything else is left alone, and said. It compares against the resolver, not against
what was written before: run it again after a failure and it finishes the job. Exit 3 when the
server cannot be reached or refuses a push. The NATS connection flags apply to --push alone, and
of the credentials only --nats-creds (the system account's user holds no other)."""

EPILOG = """\
examples:
  mesh-provisioner grants --out /etc/nats/mesh --node n1 --node n2 --provider postgres@n2 --operator ops
  mesh-provisioner grants --out grants --keys /srv/secrets/mesh-keys --mesh deploy/mesh.toml
  mesh-provisioner grants --out grants --keys /srv/secrets/mesh-keys --mesh deploy/mesh.toml --node n3 --check
  mesh-provisioner grants --jwt --push --out grants --keys /srv/secrets/mesh-keys --mesh deploy/mesh.toml \\
      --nats-url nats://nats-1:4222
"""


def add_grants_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "grants",
        help="write every party's NATS account, imports and key (for the controller); --check, --push",
        description=DESCRIPTION,
        epilog=EPILOG + "\n" + exit_codes_help((EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_WOULD_CHANGE)),
    )
    add_settings_arguments(parser, GrantsArguments, "what to write, for whom")
    add_settings_arguments(parser, BusSettings, "NATS connection (--push only)")


def grants_main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The command: issue (and push), or with `--check` only say what would change; its exit code."""
    asked = load_settings(GrantsArguments, given_flags(args, GrantsArguments), None, environ)
    refuse_nats_flags_without_push(args, asked)
    keys = asked.keys or asked.out
    options = push_options(args, keys, environ) if asked.push else None  # refused before anything is written
    mesh = wanted_mesh(asked)
    if asked.check:
        plan, sites = check_grants(asked, mesh)
        print_check(plan, sites, asked, shows_sites=bool(mesh.topology.sites))
        return EXIT_OK if plan.unchanged and sites.unchanged else EXIT_WOULD_CHANGE
    print(run_grants(asked, mesh))
    if options is not None:
        print(anyio.run(partial(push_grants, options, out=asked.out, keys=keys)).summary())
    return EXIT_OK


def print_check(plan: GrantsPlan, sites: SitesPlan, asked: GrantsArguments, *, shows_sites: bool) -> None:
    """What `--check` found, one change a line then the summaries, or as one JSON document."""
    against, sites_against = asked.out / "grants.json", sites_json(asked.out)
    shows_sites = shows_sites or not sites.unchanged
    if asked.as_json:
        document: dict[str, object] = {
            "grants": {"changes": plan.lines(), "summary": plan.summary(), "against": str(against)}
        }
        if shows_sites:
            document["sites"] = {
                "changes": list(sites.changes),
                "summary": sites.summary(),
                "against": str(sites_against),
            }
        print(json_text(document, indent=2, to_terminal=sys.stdout.isatty()))
        return
    print("\n".join([*plan.lines(), *sites.changes, f"{plan.summary()} (against {against})"]))
    if shows_sites:
        print(f"{sites.summary()} (against {sites_against})")


@dataclass(frozen=True)
class WantedMesh:
    """The parties the grants are for, and the catalogue's domains file, from the file and the flags."""

    parties: MeshParties
    domains_file: Path | None
    topology: Topology = field(default_factory=Topology)
    source: str = "the command line"


def wanted_mesh(asked: GrantsArguments) -> WantedMesh:
    flags = MeshParties.named(asked.node, asked.provider, asked.operator, writers=asked.writer)
    if asked.mesh is None:
        return WantedMesh(flags, asked.domains_file)
    described = read_mesh_file(asked.mesh)
    if described.domains_file is not None and asked.domains_file is not None:
        flag = flag_of(GrantsArguments, "domains_file")
        raise SettingsError(flag, f"the mesh file {asked.mesh} names one already ({described.domains_file})")
    return WantedMesh(
        combined(described.parties(), flags),
        described.domains_file or asked.domains_file,
        described.topology(),
        f"the mesh file {asked.mesh}",
    )


def run_grants(asked: GrantsArguments, mesh: WantedMesh | None = None) -> str:
    """Issues the grants (for `mesh`, else the mesh `asked` names); a summary for the terminal."""
    mesh = mesh or wanted_mesh(asked)
    out, keys = asked.out, asked.keys or asked.out
    before = {p.name for p in keys.glob(f"*{SEED_SUFFIX}")} if keys.is_dir() else set()
    grants = issue_grants(out, mesh.parties, domains_file=mesh.domains_file, keys=keys, jwt=asked.jwt)
    issued = sorted({p.name for p in keys.glob(f"*{SEED_SUFFIX}")} - before)
    lines = [
        f"{len(grants.parties)} party accounts and the data account written to {out / 'accounts.conf'}",
        f"grants as data: {out / 'grants.json'}",
        f"seeds in {keys}: {len(issued)} new ({_some(issued)}), the others reused",
    ]
    if asked.jwt:
        lines.append(f"JWT mode: include {out / 'jwt' / 'server-auth.conf'}; credentials in {keys}/*.creds")
    lines += _sites_written(mesh, grants, out, keys, jwt=asked.jwt)
    lines += [f"not granted: {reason}" for reason in grants.skipped]
    lines += [f"granted wide: {reason}" for reason in grants.wide]
    return "\n".join(lines)


def _sites_written(mesh: WantedMesh, grants: Grants, out: Path, keys: Path, *, jwt: bool) -> list[str]:
    """The hub's and each site's nats-server configuration, when the mesh file names sites."""
    domains = load_catalogue(mesh.domains_file)
    providers = mesh.parties.providers
    sites = issue_sites(
        out, mesh.topology, grants, domains, providers=providers, keys=keys, source=mesh.source, jwt=jwt
    )
    if not sites.files:
        return []
    names = ", ".join(site.name for site in mesh.topology.sites)
    return [
        f"sites {names}: the hub's and each site's nats-server configuration in {sites.files[0].parent}",
        "  (hub.conf in place of accounts.conf at the hub; <site>.conf holds its link's seeds, mode 0600)",
        f"  seeds of the sites' links and seats in {keys}: {len(sites.new_seeds)} new ({_some(list(sites.new_seeds))})",
        *_jwt_note(jwt),
    ]


def _jwt_note(jwt: bool) -> list[str]:
    if not jwt:
        return []
    return ["  JWT mode: <server>.jwt.conf, a site's <site>.server-auth.conf; the links' and seats' .creds in KEYS"]


def _some(names: list[str], shown: int = 10) -> str:
    """At most `shown` names, and how many more."""
    more = f", and {len(names) - shown} more" if len(names) > shown else ""
    return (", ".join(names[:shown]) or "none") + more


def check_grants(asked: GrantsArguments, mesh: WantedMesh) -> tuple[GrantsPlan, SitesPlan]:
    """What issuing would change against `--out`, the accounts and the sites, issued in a private
    scratch folder from a copy of the seeds: nothing in `--out` or `--keys` is written, a party's
    new seed is thrown away."""
    before = issued_grants(asked.out / "grants.json")
    sites_before = issued_sites(sites_json(asked.out))
    with tempfile.TemporaryDirectory(prefix="mesh-grants-check-") as scratch:
        keys, out = Path(scratch) / "keys", Path(scratch) / "out"
        copy_seeds(asked.keys or asked.out, keys)
        after = issue_grants(out, mesh.parties, domains_file=mesh.domains_file, keys=keys, jwt=asked.jwt)
        _sites_written(mesh, after, out, keys, jwt=asked.jwt)
        sites_after = issued_sites(sites_json(out))
    return plan_grants(before, after), plan_sites(sites_before, sites_after)


def issued_sites(path: Path) -> SitesFile | None:
    """The sites a `sites.json` holds; `None` when there is none (a mesh without sites)."""
    if not path.exists():
        return None
    return read_sites_file(path, setting=str(path))


def issued_grants(path: Path) -> Grants | None:
    """The grants a `grants.json` holds; `None` when there is none yet."""
    try:
        return read_grants_file(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SettingsError(str(path), f"cannot be read: {err.strerror or err}") from None
    except JsonRefused as err:
        raise SettingsError(str(path), f"cannot be read as grants.json: {err.reason}") from None
    except ValidationError as err:
        first = err.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        reason = f"is not a grants.json this version reads: {where}: {first['msg']}"
        raise SettingsError(str(path), reason) from None


def copy_seeds(keys: Path, scratch: Path) -> None:
    """The seed files of `keys` (`*.nk`, mode kept) copied to `scratch`, made readable by us alone."""
    scratch.mkdir(mode=0o700)
    for seed in sorted(keys.glob(f"*{SEED_SUFFIX}")) if keys.is_dir() else []:
        if seed.is_file():
            shutil.copy2(seed, scratch / seed.name)


def push_options(args: argparse.Namespace, keys: Path, environ: Mapping[str, str]) -> BusOptions:
    """How `--push` connects: the server and TLS as the NATS settings say, as the system account's
    user (`--nats-creds` if given, else KEYS/sys.creds), never another credential a context holds."""
    given = given_flags(args, BusSettings)
    other = [field for field in _NOT_THE_SYSTEM_USER if field in given]
    if other:
        flag = flag_of(BusSettings, other[0])
        raise SettingsError(flag, "--push connects as the system account's user: its --nats-creds, else KEYS/sys.creds")
    settings = load_settings(BusSettings, given, None, environ)
    creds = settings.creds if "creds" in given else creds_path(keys, SYSTEM_USER)
    update = {"creds": creds, "nkey_seed": None, "user": None, "password": None, "token": None}
    return settings.options(f"{buckets.SEAT}-grants").model_copy(update=update)


def refuse_nats_flags_without_push(args: argparse.Namespace, asked: GrantsArguments) -> None:
    """A NATS flag without `--push` connects nothing: a mistake, said rather than ignored."""
    given = given_flags(args, BusSettings)
    if given and not asked.push:
        push = flag_of(GrantsArguments, "push")
        raise SettingsError(flag_of(BusSettings, next(iter(given))), f"applies only with {push}")
