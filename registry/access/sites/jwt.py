"""The sites' configuration in JWT mode (`grants --jwt`): the same links, as user JWTs.

    <out>/sites/hub.jwt.conf          the hub's `leafnodes { listen, no_advertise }`, beside
                                      jwt/server-auth.conf (which holds every account)
    <out>/sites/<site>.jwt.conf       a site's `leafnodes { remotes }`, each bound to the account's
                                      public key with the link's credentials file
    <keys>/leaf-<site>-data.creds, leaf-<site>-vault.creds    the links' users, signed by the key of
                                      the site's account at the hub (`site-<site>`), with the
                                      permissions of `registry.access.sites.links` and leaf
                                      connections only
    <keys>/seat-<site>.creds          the site's seat, a user of the data account
    <out>/sites/<site>.server-auth.conf   jwt/server-auth.conf as the site's server holds it: the
                                      same operator and accounts, but the data account's, the
                                      vault's (its one leaf link) and the site's nodes' JWTs as the
                                      site has them (the nodes' writes taken from the hub's domain:
                                      fail fast), signed by the operator

A JWT whose claims are unchanged is kept as it is (its `iat` and `jti`), so issuing again writes
the same bytes. A site's resolver is its own (no system account crosses the link): `grants --push`
updates the hub's; a site's takes its accounts from its server-auth.conf at its start. A site's
account at the hub allows its two leaf connections (`leaf`, from the grants' limits). A remote
names its credentials file by the path of KEYS as the command was given it: on the site's
machine, it is expected there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from registry.access.accounts_conf import quoted
from registry.access.grants import VAULT, Grants
from registry.access.jwt_auth import (
    DEFAULT_RESOLVER_DIR,
    JwtAuth,
    Nkey,
    account_key,
    creds_path,
    data_account,
    keep_or_sign,
    load_jwt_auth,
    operator_key,
    party_account,
    render_server_auth,
    write_user_creds,
)
from registry.access.parties import DATA_ACCOUNT, Kind, Party
from registry.access.sites.links import RECONNECT, SITE_SERVER, LeafLink, Permit, at_site, one_link, site_seat_denied
from registry.access.sites.topology import Site, Topology

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
    lines = [*SITE_SERVER, "leafnodes {", f"  reconnect: {RECONNECT}", "  remotes: ["]
    for link in links:
        credentials = quoted(str(creds_path(keys, link.label)))
        lines.append(f"    # {link.label}: the site's {link.account} account, bound to the site's own at the hub")
        lines.append(
            f"    {{urls: [{urls}], account: {quoted(account_keys[link.account])}, credentials: {credentials}}}"
        )
    return head + "\n".join([*lines, "  ]", "}", ""])


def issue_site_creds(links: Iterable[LeafLink], seat_labels: Iterable[str], keys: Path, *, hub_domain: str) -> None:
    """Each link's `.creds` (its permissions signed by its account's key) and each site seat's
    (what it is denied: `registry.access.sites.links.site_seat_denied`)."""
    for link in links:
        permissions = {
            "pub": {"allow": _subjects(link.publish)},
            "sub": {"allow": _subjects(link.subscribe)},
            "allowed_connection_types": [LEAF_ONLY],
        }
        write_user_creds(keys, link.label, account_key(keys, link.hub_account), permissions)
    denied = site_seat_denied(hub_domain)
    seat = {"pub": {"deny": _subjects(denied.publish)}, "sub": {"deny": _subjects(denied.subscribe)}}
    for label in seat_labels:
        write_user_creds(keys, label, account_key(keys, DATA_ACCOUNT), seat)


def site_server_auth(
    out: Path, keys: Path, grants: Grants, site: Site, *, hub_domain: str, held: str, head: str
) -> str:
    """A site's server-auth.conf: the hub's, with the data account's and the site's nodes' JWTs as
    the site holds them (`held`: the file written before, whose unchanged JWTs are kept)."""
    auth = load_jwt_auth(out)
    operator = operator_key(keys)
    view = at_site(grants, site, hub_domain)
    data_key = account_key(keys, DATA_ACCOUNT).public_key
    exporters = {DATA_ACCOUNT: data_key, **{g.account: g.account_key for g in view.parties if g.account_key}}
    kept = dict(_PRELOADED.findall(held))
    accounts = dict(auth.accounts)
    accounts[data_key] = _signed(operator, data_key, DATA_ACCOUNT, data_account(view), kept)
    exports = view.exports()
    living = {Party(kind=Kind.NODE, name=node) for node in site.nodes}
    for grant in view.parties:
        if (grant.party in living or grant.party == VAULT) and grant.account_key is not None:
            at_the_site = one_link(grant) if grant.party == VAULT else grant
            body = party_account(at_the_site, exports.get(grant.account, {}), exporters)
            accounts[grant.account_key] = _signed(operator, grant.account_key, grant.party.label, body, kept)
    site_auth = JwtAuth(auth.operator_jwt, auth.system_account, accounts)
    return head + render_server_auth(site_auth, DEFAULT_RESOLVER_DIR)


# An account preloaded in a server-auth.conf: `  <account key>: "<its JWT>"`.
_PRELOADED = re.compile(r'^  (A[A-Z0-9]{55}): "([^"]+)"$', re.MULTILINE)


def _signed(issuer: Nkey, subject: str, name: str, body: dict[str, Any], kept: Mapping[str, str]) -> str:
    """The JWT `kept` holds for `subject` if `issuer` signed these very claims, else a new one."""
    return keep_or_sign(None, issuer, subject=subject, name=name, body=body, existing=kept.get(subject))


def _subjects(permits: Iterable[Permit]) -> list[str]:
    return [permit.subject for permit in permits]


def _account_keys(grants: Grants, keys: Path) -> Mapping[str, str]:
    vault = next(grant.account_key for grant in grants.parties if grant.party == VAULT)
    data = account_key(keys, DATA_ACCOUNT).public_key
    return {DATA_ACCOUNT: data, VAULT.account: vault or ""}
