"""Each site's account at the hub: where its leaf links land, and exactly what they may reach.

A site's links (its data account's and its vault's, `registry.access.sites.links`) bind at the hub
to an account of the site's own, `site-<site>` (`Kind.SITE`), never to the hub's data account or
the vault's. It holds no JetStream, serves nothing and takes no client (its users are the links,
leaf connections only). It imports from the data account exactly what the site's copies and its
nodes' writes need, and from the vault's the verbs its nodes are granted:

    writes        `$KV.<bucket>.<node>.>` of each node living at the site (its lease `node.<node>`),
                  which the site sends under the hub's domain (`$JS.<hub>.API.$KV...`, mapped by
                  nats-server onto `$KV...` in every account a leaf of a JetStream domain binds to)
    copies        each copy's consumer reset (`$JS.API.CONSUMER.RESET.<stream>.<name>`, sent as
                  `$JS.<hub>.API...`), its deliveries (a stream: `$JS.M.<site>.<stream>`,
                  `$JS.S.<site>.<stream>.<node>`) and its flow control (`$JS.FC.<stream>.<name>.*`)
    vault         the vault's verbs some node of the site is granted, shared

What nats-server makes of it:

- an answer comes back to the account that asked alone: the links hear the answers to the
  site's own requests on `_R_.>`, never the hub's answers to another party (those are published
  in the data account and the vault's, which no link reaches);
- a request crossing a service import from a leaf connection carries the `Nats-Request-Info` of
  that connection (nats-server 2.14 and later replace what the leaf sent): a responder learns
  that site X asks, never a party a site's server names. The vault answers a site for the nodes
  living there alone (`AccountGrant.speaks_for`), whose accounts a site's server holds anyway;
- the verb does not cross: the site's seat answers its nodes from the site's copies, so a site's
  request never reaches the hub's seat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from registry.access.credentials import SEED_SUFFIX, user_key_at
from registry.access.grants import VAULT, AccountGrant, Grants, Import
from registry.access.limits import limits_of
from registry.access.parties import Kind, Party
from registry.access.sites.links import (
    WRITTEN,
    CopyConsumer,
    copy_consumers,
    link_label,
    node_filter,
    owned,
    site_party,
    vault_verbs,
)
from registry.access.sites.topology import Site, Topology
from registry.contract import Domain


def site_account(site: Site) -> str:
    """The account a site's links bind to at the hub: `site-<site>`."""
    return site_party(site).account


def site_imports(
    site: Site, grants: Grants, *, domains: Mapping[str, Domain], providers: Sequence[str]
) -> list[Import]:
    """What `site`'s links may reach at the hub (see the module)."""
    found = [
        Import(kind="service", subject=bucket.subject(node_filter(bucket, node)), why=f"{owned(bucket, node)}, written")
        for bucket in WRITTEN
        for node in site.nodes
    ]
    for copy in copy_consumers(site, domains=domains, providers=providers):
        found += _copy_imports(copy)
    why = "the site's nodes ask the vault, the site telling who asks"
    found += [
        Import(kind="service", subject=verb, account=VAULT.account, share=True, why=why)
        for verb in sorted(set(vault_verbs(grants, site.nodes)))
    ]
    return found


def _copy_imports(copy: CopyConsumer) -> list[Import]:
    return [
        Import(kind="service", subject=copy.reset_api, why=f"{copy.what}: resumed from the hub's consumer"),
        Import(kind="stream", subject=copy.delivery, why=f"{copy.what}: the hub's consumer delivers here"),
        Import(kind="service", subject=copy.flow_control, why=f"{copy.what}: its flow control, which acknowledges"),
    ]


def with_site_accounts(
    grants: Grants,
    topology: Topology,
    *,
    domains: Mapping[str, Domain],
    providers: Sequence[str],
    keys: Path,
    account_keys: Mapping[Party, str] | None,
) -> Grants:
    """`grants` with each site's account at the hub; its user key is its data link's (the seed
    `leaf-<site>-data.nk` in `keys`, written there when none is)."""
    if not topology.sites:
        return grants
    accounts = account_keys or {}
    added = tuple(
        AccountGrant(
            party=site_party(site),
            account=site_account(site),
            user_key=_link_key(keys, site),
            account_key=accounts.get(site_party(site)),
            imports=tuple(site_imports(site, grants, domains=domains, providers=providers)),
            limits=limits_of(Kind.SITE),
            speaks_for=site.nodes,
        )
        for site in topology.sites
    )
    return grants.model_copy(update={"parties": (*grants.parties, *added)})


def _link_key(keys: Path, site: Site) -> str:
    return user_key_at(keys / f"{link_label(site, 'data')}{SEED_SUFFIX}")
