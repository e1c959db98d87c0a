"""`mesh-provisioner grants`: every party's account, imports and key, written for the controller.

A thin layer over `registry.access.issuing.issue_grants`, which the controller can also call itself.
"""

from __future__ import annotations

import argparse

from provisioner.settings import GrantsArguments
from registry.access import SEED_SUFFIX, MeshParties, issue_grants
from registry.edge import add_settings_arguments

DESCRIPTION = """\
Derive every party's NATS account from the catalogue, the providers and the node names, and write:
  OUT/accounts.conf   an `accounts { ... }` block for nats-server (include it; reload to apply)
  OUT/grants.json     the same grants as data (the seat reads it: --grants-file)
  KEYS/<party>.nk     one nkey seed per party (seat, vault, node-<name>, provider-<name>,
                      operator-<name>); both programs connect with NATS_NKEY=<file>
With --jwt, also decentralized auth (nats-server trusts an operator; accounts change at run time):
  OUT/jwt/server-auth.conf    operator, system account, resolver and preloaded accounts (include it)
  OUT/jwt/*.jwt               the operator's and every account's JWT
  KEYS/<party>.creds          each party's credentials (NATS_CREDS=<file>), KEYS/sys.creds to push
A provider given as MODULE@NODE names a machine its module runs on (repeat for each): only those
nodes may ask the vault for its consumers' credentials (kind `consumers`); every node asks for
secrets. A provider given without a machine leaves that verb to every node, and says so.
Seeds already in KEYS are reused: the output is reproducible, and adding a node keeps every
other party's key. Seeds are secrets (mode 0600): keep KEYS out of version control."""

EPILOG = """\
examples:
  mesh-provisioner grants --out /etc/nats/mesh --node n1 --node n2 --provider postgres@n2 --operator ops
  mesh-provisioner grants --out grants --keys /srv/secrets/mesh-keys --node n1 --node web.eu
  mesh-provisioner grants --jwt --out grants --keys /srv/secrets/mesh-keys --node n1 --node n3
      then push n3's account without a reload, as the system user:
      nats --creds /srv/secrets/mesh-keys/sys.creds req '$SYS.REQ.CLAIMS.UPDATE' "$(cat grants/jwt/account-node-n3.jwt)"
"""


def add_grants_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "grants",
        help="write every party's NATS account, imports and key (for the controller)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings_arguments(parser, GrantsArguments, "what to write, for whom")


def run_grants(asked: GrantsArguments) -> str:
    """Issues the grants; a summary for the terminal."""
    out, keys = asked.out, asked.keys or asked.out
    before = {p.name for p in keys.glob(f"*{SEED_SUFFIX}")} if keys.is_dir() else set()
    parties = MeshParties.named(asked.node, asked.provider, asked.operator)
    grants = issue_grants(out, parties, domains_file=asked.domains_file, keys=keys, jwt=asked.jwt)
    issued = sorted({p.name for p in keys.glob(f"*{SEED_SUFFIX}")} - before)
    lines = [
        f"{len(grants.parties)} party accounts and the data account written to {out / 'accounts.conf'}",
        f"grants as data: {out / 'grants.json'}",
        f"seeds in {keys}: {len(issued)} new ({', '.join(issued) or 'none'}), the others reused",
    ]
    if asked.jwt:
        lines.append(f"JWT mode: include {out / 'jwt' / 'server-auth.conf'}; credentials in {keys}/*.creds")
    lines += [f"not granted: {reason}" for reason in grants.skipped]
    lines += [f"granted wide: {reason}" for reason in grants.wide]
    return "\n".join(lines)
