"""`mesh-provisioner grants`: every party's account, imports and key, written for the controller.

A thin layer over `registry.access.issuing.issue_grants`, which the controller can also call itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from registry.access import SEED_SUFFIX, MeshParties, issue_grants

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
Seeds already in KEYS are reused: the output is reproducible, and adding a node keeps every
other party's key. Seeds are secrets (mode 0600): keep KEYS out of version control."""

EPILOG = """\
examples:
  mesh-provisioner grants --out /etc/nats/mesh --node n1 --node n2 --provider postgres --operator ops
  mesh-provisioner grants --out grants --keys /srv/secrets/mesh-keys --node n1 --node web.eu
  mesh-provisioner grants --jwt --out grants --keys /srv/secrets/mesh-keys --node n1 --node n3
      then push n3's account without a reload, as the system user:
      nats --creds /srv/secrets/mesh-keys/sys.creds req '$SYS.REQ.CLAIMS.UPDATE' "$(cat grants/jwt/account-node-n3.jwt)"
"""


def add_grants_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "grants", help="write every party's NATS account, imports and key (for the controller)",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where accounts.conf and grants.json go")
    parser.add_argument("--keys", type=Path, metavar="DIR", help="where the seeds are kept (default: --out)")
    parser.add_argument("--node", action="append", default=[], metavar="NAME", help="a node (repeat)")
    parser.add_argument("--provider", action="append", default=[], metavar="MODULE", help="a provider (repeat)")
    parser.add_argument("--operator", action="append", default=[], metavar="NAME", help="an operator (repeat)")
    parser.add_argument("--domains-file", type=Path, metavar="PATH", help="the seat's domains file, if any")
    parser.add_argument("--jwt", action="store_true", help="also decentralized auth: JWTs, .creds, server-auth.conf")


def run_grants(args: argparse.Namespace) -> str:
    """Issues the grants; a summary for the terminal."""
    keys = args.keys or args.out
    before = {p.name for p in keys.glob(f"*{SEED_SUFFIX}")} if keys.is_dir() else set()
    parties = MeshParties(nodes=_unique(args.node), providers=_unique(args.provider), operators=_unique(args.operator))
    grants = issue_grants(args.out, parties, domains_file=args.domains_file, keys=keys, jwt=args.jwt)
    issued = sorted({p.name for p in keys.glob(f"*{SEED_SUFFIX}")} - before)
    lines = [
        f"{len(grants.parties)} party accounts and the data account written to {args.out / 'accounts.conf'}",
        f"grants as data: {args.out / 'grants.json'}",
        f"seeds in {keys}: {len(issued)} new ({', '.join(issued) or 'none'}), the others reused",
    ]
    if args.jwt:
        lines.append(f"JWT mode: include {args.out / 'jwt' / 'server-auth.conf'}; credentials in {keys}/*.creds")
    lines += [f"not granted: {reason}" for reason in grants.skipped]
    return "\n".join(lines)


def _unique(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
