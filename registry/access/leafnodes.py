"""The leaf link between a site's server and the hub, and exactly what it may carry.

A site's server dials the hub once per account that must cross (a leaf node *remote*): the data
account, for the site's copies of the hub's buckets, the hub's copies of the site's, and the verb;
the vault's account, for the vault's verbs. Node accounts never cross: they live at the site,
import from its data account as at the hub, and are answered there. Between two JetStream domains
nats-server itself keeps `$JS.API.>`, `$KV.>` and `$OBJ.>` from crossing; what crosses besides is
what the link's user (a user of the hub's account, bound to the site's) is permitted, and nothing
else: unrestricted, a site could write or purge the hub's registry through `$JS.hub.API.>`.

A leaf user's permissions read from the hub: `publish` is what the site may send into the hub's
account, `subscribe` what the hub may send to the site. The data account's link carries:

- the site's copies of the hub's buckets a node reads, made by the site: a *mirror* of each bucket
  readable mesh-wide (the registry, shared config), whose consumer is created unfiltered
  (`CONSUMER.CREATE.<stream>`), and, of each node-keyed bucket (placement, each `_bound`), one
  *source* per node living at the site, filtered to that node's keys: a single filter is in the
  consumer's create subject (`CONSUMER.CREATE.<stream>.<name>.$KV.<bucket>.<node>.>`), so the
  link grants each node's keys alone and a site cannot read another site's node's values;
- the hub's copies of what the site's nodes write (needs, applied, collect, their leases): the
  hub sources each, filtered to each node of the site (the hub's consumer creates, sent to the
  site: `$JS.<site>.API.CONSUMER.CREATE.<stream>`, bare and filtered, both being asked);
- the flow of those: deliveries (`$JS.M.>` to a mirror, `$JS.S.>` to a source), the answers to
  consumer creates (`$JSC.R.>`) and flow control (`$JS.FC.>`);
- the verb: a site's node asks it there, the seat at the hub answers on `_R_.>`.

The vault's link carries the vault's verbs the site's nodes are granted, and their answers.
Everything else is refused by nats-server without a word (no violation is logged: a request just
finds no responder), which the test of the topology checks by the data (`tests/test_sites_topology.py`).

What the permissions cannot keep from a site whose server is not to be trusted: a service's answers
cross on `_R_.>`, whose next token is a prefix each server draws at random, so the link permits all
of them, and a server that subscribes `_R_.>` itself is sent every answer of the hub's account: the
verb's to any node, and through the vault's link the vault's, secrets included (seen with a user
added to a site's vault account). A verb request crossing carries the `Nats-Request-Info` the
site's server wrote, which such a server can forge or leave out. Both go away only when the verb is
answered at the site and secrets cross through a relay of the site's own (issue 22, later parts):
until then, a site's server is trusted as far as the verb and the vault reach.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from registry.access.grants import VAULT, Grants, catalogue_of
from registry.access.parties import DATA_ACCOUNT, Kind, Party
from registry.access.sites import Site
from registry.contract import Bucket, Domain, buckets, under

# Where a reply crossing an account's service import is sent: a reply subject of the exporter's.
SERVICE_REPLIES = "_R_.>"


@dataclass(frozen=True)
class Permit:
    """One subject a link user may publish or receive, and why."""

    subject: str
    why: str


@dataclass(frozen=True)
class LeafLink:
    """One account's link from `site` to the hub: the user's label (its seed's name) and account,
    what the site may send into the hub (`publish`) and the hub to the site (`subscribe`)."""

    site: str
    account: str
    label: str
    publish: tuple[Permit, ...]
    subscribe: tuple[Permit, ...]


def leaf_links(
    site: Site, *, hub_domain: str, grants: Grants, domains: Mapping[str, Domain], providers: Sequence[str]
) -> tuple[LeafLink, LeafLink]:
    """The data account's and the vault's links of `site`."""
    return data_link(site, hub_domain=hub_domain, domains=domains, providers=providers), vault_link(site, grants)


def data_link(site: Site, *, hub_domain: str, domains: Mapping[str, Domain], providers: Sequence[str]) -> LeafLink:
    catalogue = catalogue_of(domains, providers)
    publish = [
        *_mirrors(hub_domain, [buckets.REGISTRY, *catalogue.mesh_wide]),
        *_sources(hub_domain, catalogue.node_keyed, site.nodes, "the site's copy of"),
        Permit("$JS.S.>", "deliveries of the hub's sources of the site's buckets"),
        Permit("$JSC.R.>", "the site's answers to the hub's consumer creates"),
        Permit("$JS.FC.>", "flow control of the site's mirrors and sources"),
        Permit(buckets.VERB_SUBJECT, "the site's nodes ask the verb; the seat at the hub answers"),
    ]
    subscribe = [
        Permit("$JS.M.>", "deliveries to the site's mirrors"),
        Permit("$JS.S.>", "deliveries to the site's sources"),
        Permit("$JSC.R.>", "the hub's answers to the site's consumer creates"),
        Permit("$JS.FC.>", "flow control of the hub's sources"),
        *_written(site, _WRITTEN),
        Permit(SERVICE_REPLIES, "the seat's answers to the verb"),
    ]
    return LeafLink(site.name, DATA_ACCOUNT, link_label(site, "data"), tuple(publish), tuple(subscribe))


def vault_link(site: Site, grants: Grants) -> LeafLink:
    """The vault's verbs some node of the site is granted (its secrets; a provider's machine, its
    consumers' credentials), and their answers."""
    verbs = sorted(set(_vault_verbs(grants, site.nodes)))
    publish = tuple(Permit(verb, "the site's nodes ask the vault at the hub") for verb in verbs)
    subscribe = (Permit(SERVICE_REPLIES, "the vault's answers"),)
    return LeafLink(site.name, VAULT.account, link_label(site, "vault"), publish, subscribe)


def link_label(site: Site, account: str) -> str:
    """How files name a link's user and seed: `leaf-<site>-data`, `leaf-<site>-vault`."""
    return f"leaf-{site.name}-{account}"


def consumer_create(domain: str, bucket: Bucket, subject_filter: str | None = None) -> str:
    """The API subject creating a consumer of `bucket` in JetStream domain `domain`: bare, or with
    its one filter (relative to the bucket) in the subject, under any consumer name."""
    api = f"$JS.{domain}.API.{bucket.consumer_create_api('*', subject_filter)}"
    return api if subject_filter is not None else api.removesuffix(".*")


def _mirrors(hub_domain: str, read: Iterable[Bucket]) -> list[Permit]:
    why = "the site's mirror of {}, readable mesh-wide"
    return [Permit(consumer_create(hub_domain, bucket), why.format(bucket.name)) for bucket in read]


def _sources(domain: str, keyed: Iterable[Bucket], nodes: Sequence[str], what: str) -> list[Permit]:
    return [
        Permit(consumer_create(domain, bucket, _node_filter(bucket, node)), f"{what} {_owned(bucket, node)}")
        for bucket in keyed
        for node in nodes
    ]


def _owned(bucket: Bucket, node: str) -> str:
    return f"{node}'s lease" if bucket == buckets.LEASES else f"{node}'s keys of {bucket.name}"


def _written(site: Site, written: Iterable[Bucket]) -> list[Permit]:
    """The hub's sources of what the site's nodes write: bare (asked first) and per node."""
    found = []
    for bucket in written:
        found.append(Permit(consumer_create(site.domain, bucket), f"the hub's copy of the site's {bucket.name}"))
        found += _sources(site.domain, [bucket], site.nodes, "the hub's copy of")
    return found


# What a node writes: its own keys of these, and its lease.
_WRITTEN = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT, buckets.LEASES)


def _node_filter(bucket: Bucket, node: str) -> str:
    """The keys of `node` in `bucket`: `<node>.>`, or its lease `node.<node>` in the leases."""
    if bucket == buckets.LEASES:
        return buckets.LEASES.shape.build(role="node", name=node)
    return under(node)


def _vault_verbs(grants: Grants, nodes: Sequence[str]) -> Iterable[str]:
    wanted = {Party(kind=Kind.NODE, name=node) for node in nodes}
    for grant in grants.parties:
        if grant.party in wanted:
            yield from (item.subject for item in grant.imports if item.account == VAULT.account)
