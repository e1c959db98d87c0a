"""The sites' configuration in JWT mode (`grants --jwt`): the same links, as user JWTs.

    <out>/sites/hub.jwt.conf          the hub's `leafnodes { listen, no_advertise }`, beside
                                      jwt/server-auth.conf (which holds every account)
    <out>/sites/<site>.jwt.conf       a site's `leafnodes { remotes }`, each bound to the account's
                                      public key with the link's credentials file; the site includes
                                      jwt/server-auth.conf too (its own resolver dir): the same
                                      operator and accounts
    <keys>/leaf-<site>-data.creds, leaf-<site>-vault.creds    the links' users, signed by the data
                                      account's and the vault's account keys, with the permissions
                                      of `registry.access.leafnodes` and leaf connections only
    <keys>/seat-<site>.creds          the site's seat, a user of the data account

A link's JWT whose claims are unchanged is kept as it is (its `iat` and `jti`), so issuing again
writes the same bytes. The vault's link is written but refused by the hub until the vault's account
JWT allows leaf connections (`leaf`: 0 today, from `registry.access.limits`, signed by
`registry.access.jwt_auth`): the data account's (unlimited) works. A remote names its credentials
file by the path of KEYS as the command was given it: on the site's machine, it is expected there.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from registry.access.accounts_conf import quoted
from registry.access.credentials import SEED_SUFFIX, write_secret
from registry.access.grants import VAULT, Grants
from registry.access.jwt_auth import NO_LIMIT, Nkey, account_seed_path, claims_of, creds, creds_path, encode_jwt
from registry.access.leafnodes import LeafLink, Permit
from registry.access.parties import DATA_ACCOUNT
from registry.access.sites import Topology

LEAF_ONLY = "LEAFNODE"


def hub_jwt_conf(topology: Topology, head: str) -> str:
    return head + "\n".join(
        [
            "leafnodes {",
            f"  listen: {quoted(topology.hub_listen)}",
            "  # a site dials the URLs of the mesh file only, never an address another server gossips",
            "  no_advertise: true",
            "}",
            "",
        ]
    )


def site_jwt_conf(topology: Topology, links: Sequence[LeafLink], grants: Grants, keys: Path, head: str) -> str:
    """A site's remotes, each bound to its account's public key, authenticated by its `.creds`."""
    account_keys = _account_keys(grants, keys)
    urls = ", ".join(quoted(url) for url in topology.hub_urls)
    lines = ["leafnodes {", "  remotes: ["]
    for link in links:
        credentials = quoted(str(creds_path(keys, link.label)))
        lines.append(f"    # {link.label}: the site's {link.account} account, bound to the hub's same account")
        lines.append(
            f"    {{urls: [{urls}], account: {quoted(account_keys[link.account])}, credentials: {credentials}}}"
        )
    return head + "\n".join([*lines, "  ]", "}", ""])


def issue_site_creds(links: Iterable[LeafLink], seat_labels: Iterable[str], keys: Path) -> None:
    """Each link's `.creds` (its permissions signed by its account's key) and each site seat's."""
    for link in links:
        permissions = {
            "pub": {"allow": _subjects(link.publish)},
            "sub": {"allow": _subjects(link.subscribe)},
            "allowed_connection_types": [LEAF_ONLY],
        }
        _user_creds(keys, link.label, _account_label(link.account), permissions)
    for label in seat_labels:
        _user_creds(keys, label, DATA_ACCOUNT, {})


def _subjects(permits: Iterable[Permit]) -> list[str]:
    return [permit.subject for permit in permits]


def _account_label(account: str) -> str:
    """The label of an account's seed (`account-<label>.nk`): the data account's name, or the vault's."""
    return DATA_ACCOUNT if account == DATA_ACCOUNT else VAULT.label


def _account_keys(grants: Grants, keys: Path) -> Mapping[str, str]:
    vault = next(grant.account_key for grant in grants.parties if grant.party == VAULT)
    data = Nkey(account_seed_path(keys, DATA_ACCOUNT).read_bytes().strip()).public_key
    return {DATA_ACCOUNT: data, VAULT.account: vault or ""}


def _user_creds(keys: Path, label: str, account_label: str, permissions: Mapping[str, Any]) -> None:
    """`keys/<label>.creds` for the user of seed `keys/<label>.nk`, signed by the account's key;
    kept as it is when it holds these very claims."""
    account = Nkey(account_seed_path(keys, account_label).read_bytes().strip())
    user = Nkey((keys / f"{label}{SEED_SUFFIX}").read_bytes().strip())
    body = {"type": "user", "subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT, "pub": {}, "sub": {}}
    body.update(permissions)
    path = creds_path(keys, label)
    held = path.read_bytes() if path.exists() else b""
    token = _held_token(held, account, user.public_key, label, body)
    if token is None:
        token = encode_jwt(account, subject=user.public_key, name=label, body=body)
    wanted = creds(token, user.seed)
    if held != wanted:
        write_secret(path, wanted)


def _held_token(held: bytes, account: Nkey, subject: str, name: str, body: Mapping[str, Any]) -> str | None:
    """The user JWT a `.creds` file holds, when `account` signed exactly these claims."""
    text = held.decode(errors="replace")
    start = text.find("-----BEGIN NATS USER JWT-----")
    if start < 0:
        return None
    token = text[start:].splitlines()[1].strip()
    try:
        header, payload, signature = token.split(".")
        claims = claims_of(token)
        signed = account.signed(
            f"{header}.{payload}".encode(), base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        )
    except ValueError:
        return None
    wanted = {"iss": account.public_key, "sub": subject, "name": name, "nats": {**body, "version": 2}}
    if not signed or any(claims.get(key) != value for key, value in wanted.items()):
        return None
    return token
