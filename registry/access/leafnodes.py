"""The leaf link between a site's server and the hub, and exactly what it may carry.

A site's server dials the hub once per account that must cross (a leaf node *remote*): the data
account, for the site's nodes' writes, the site's copies of the hub's buckets and the verb; the
vault's account, for the vault's verbs. Node accounts never cross: they live at the site and
import from its data account, their reads answered there, their writes sent on to the hub. Between two JetStream domains
nats-server itself keeps `$JS.API.>`, `$KV.>` and `$OBJ.>` from crossing; what crosses besides is
what the link's user (a user of the hub's account, bound to the site's) is permitted, and nothing
else: unrestricted, a site could write or purge the hub's registry through `$JS.hub.API.>`.

A leaf user's permissions read from the hub: `publish` is what the site may send into the hub's
account, `subscribe` what the hub may send to the site. A node at a site writes *fail fast*
(`docs/sites-write-path.md`): its writes cross the link and the hub's bucket decides them, and it
reads at the site from copies the site's data account makes. The data account's link carries:

- the node's writes: its account at the site imports `$JS.<hub>.API.$KV.<bucket>.<node>.>` of the
  site's data account as `$KV.<bucket>.<node>.>` (needs, applied, collect; its lease
  `node.<node>`), so the link publishes exactly those of the site's own nodes (`hub_writes`);
- the site's *mirrors* of the hub's buckets, whose consumers are created unfiltered
  (`CONSUMER.CREATE.<stream>`): the registry and shared config (readable mesh-wide), and needs,
  applied, collect and leases, so that a node's reads of its own keys, stamps and lease are
  answered at the site with the hub's own revisions and time stamps (a mirror keeps them);
- the site's *sources* of each node-keyed bucket a node reads only (placement, each `_bound`): one
  per node living at the site, filtered to that node's keys; a single filter is in the consumer's
  create subject (`CONSUMER.CREATE.<stream>.<name>.$KV.<bucket>.<node>.>`), so the link grants each
  node's keys alone and a site cannot copy another site's node's values (a source numbers its
  copies itself: their revisions are the site's, which only ever serve as stamps);
- their flow: deliveries (`$JS.M.>` to a mirror, `$JS.S.>` to a source), the answers to consumer
  creates (`$JSC.R.>`) and flow control (`$JS.FC.>`);
- the verb: a site's node asks it there, the seat at the hub answers; answers (the verb's, the
  writes') come back on `_R_.>`.

A whole mirror of needs, applied, collect and leases puts every node's keys of those buckets at
every site (readable by the site's data account, never by its nodes' accounts, which import their
own keys alone); a mirror filtered per node would keep the hub's revisions too, but one mirror
takes one filter in its create subject, so a site of several nodes would need one stream per node
and bucket, which direct gets by stream name cannot tell apart.

The vault's link carries the vault's verbs the site's nodes are granted, and their answers.
Everything else is refused by nats-server without a word (no violation is logged: a request just
finds no responder), which the test of the topology checks by the data (`tests/test_sites_topology.py`).

What the permissions cannot keep from a site: a service's answers cross on `_R_.>`, whose next
token is a prefix each server draws at random, so the link permits all of them (the verb's, and the
acknowledgements of the nodes' writes, need it), and whoever subscribes `_R_.>` in the site's data
account is sent every answer of the hub's data account (the site's seat's user is denied it): the direct gets
of every node at the hub (their `_bound` values included), the verb's answers; through the vault's
link, the vault's (secrets included, seen with a user added to a site's vault account). A verb
request crossing carries the `Nats-Request-Info` the site's server wrote, which it can forge or
leave out. So a site's server and its seat are trusted as the hub's data account is, until the
answers a site needs cross under a prefix of its own (a relay at the site for the writes, the verb
answered at the site, secrets through a relay the vault checks against the site's nodes: issue 22,
later parts; `tests/test_sites_topology.py` holds the gap in two strict xfail tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from registry.access.grants import VAULT, Grants, Import, catalogue_of
from registry.access.parties import DATA_ACCOUNT, Kind, Party
from registry.access.sites import Site
from registry.contract import Bucket, Domain, buckets, under

# Where a reply crossing an account's service import is sent: a reply subject of the exporter's.
SERVICE_REPLIES = "_R_.>"
# A node's write at a site crosses the link (fail fast): a silent link must be dropped soon, or every
# write through it times out instead of failing at once (docs/sites-write-path.md: ping_interval 1s,
# ping_max 2 drops it in 4 s; nats-server's default, 2 min x 2, takes minutes). Server-wide.
SITE_PINGS = (
    "# a silent link to the hub is dropped after about 30 s, so that writes through it fail fast",
    'ping_interval: "10s"',
    "ping_max: 3",
    "",
)
RECONNECT = 1  # seconds between attempts to dial the hub again: writes are taken 1 s after it is back


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
        *hub_writes(site, hub_domain),
        *_mirrors(hub_domain, [buckets.REGISTRY, *catalogue.mesh_wide], "readable mesh-wide"),
        *_mirrors(hub_domain, WRITTEN, "its nodes' own keys read at the site"),
        *_sources(hub_domain, catalogue.node_keyed, site.nodes),
        Permit("$JS.FC.>", "flow control of the site's mirrors and sources"),
        Permit(buckets.VERB_SUBJECT, "the site's nodes ask the verb; the seat at the hub answers"),
    ]
    subscribe = [
        Permit("$JS.M.>", "deliveries to the site's mirrors"),
        Permit("$JS.S.>", "deliveries to the site's sources"),
        Permit("$JSC.R.>", "the hub's answers to the site's consumer creates"),
        Permit("$JS.FC.>", "flow control of the site's mirrors and sources"),
        Permit(SERVICE_REPLIES, "the answers to the site's nodes: the verb's, and their writes' acknowledgements"),
    ]
    return LeafLink(site.name, DATA_ACCOUNT, link_label(site, "data"), tuple(publish), tuple(subscribe))


def hub_writes(site: Site, hub_domain: str) -> list[Permit]:
    """Each write of a node of `site`, at the hub: `$JS.<hub>.API.$KV.<bucket>.<node>.>`."""
    return [
        Permit(
            write_at_the_hub(hub_domain, bucket.subject(_node_filter(bucket, node))),
            f"{_owned(bucket, node)}, written at the hub",
        )
        for bucket in WRITTEN
        for node in site.nodes
    ]


def write_at_the_hub(hub_domain: str, subject: str) -> str:
    """Where a site's data account sends a write of `subject` (`$KV.<bucket>.<key>`) for the hub's
    bucket to decide: the subject under the hub's JetStream domain."""
    return f"$JS.{hub_domain}.API.{subject}"


def fail_fast_imports(imports: Iterable[Import], hub_domain: str) -> list[Import]:
    """A node's imports at a site: its writes (of a bucket in `WRITTEN`) taken from the hub's domain
    onto the subjects it publishes, every other import as it is."""
    return [_at_the_hub(item, hub_domain) if _written(item) else item for item in imports]


def at_site(grants: Grants, site: Site, hub_domain: str) -> Grants:
    """The grants as a site's server holds them: the accounts of the nodes living there take their
    writes from the hub's domain (`fail_fast_imports`), every other account as it is."""
    living = {Party(kind=Kind.NODE, name=node) for node in site.nodes}
    parties = tuple(
        g.model_copy(update={"imports": tuple(fail_fast_imports(g.imports, hub_domain))}) if g.party in living else g
        for g in grants.parties
    )
    return grants.model_copy(update={"parties": parties})


def _written(item: Import) -> bool:
    return item.kind == "service" and any(item.subject.startswith(b.subject_prefix) for b in WRITTEN)


def _at_the_hub(item: Import, hub_domain: str) -> Import:
    why = f"{item.why}, decided by the hub's bucket"
    return item.model_copy(
        update={"subject": write_at_the_hub(hub_domain, item.subject), "to": item.subject, "why": why}
    )


def vault_link(site: Site, grants: Grants) -> LeafLink:
    """The vault's verbs some node of the site is granted (its secrets; a provider's machine, its
    consumers' credentials), and their answers."""
    verbs = sorted(set(_vault_verbs(grants, site.nodes)))
    publish = tuple(Permit(verb, "the site's nodes ask the vault at the hub") for verb in verbs)
    subscribe = (Permit(SERVICE_REPLIES, "the vault's answers"),)
    return LeafLink(site.name, VAULT.account, link_label(site, "vault"), publish, subscribe)


@dataclass(frozen=True)
class SeatDenied:
    """What a site's seat, a user of the site's data account, may not do: it makes the site's copies
    and answers the verb there, never writes at the hub, and never hears the answers crossing the
    link on `_R_.>` (every answer of the hub's data account would reach it)."""

    publish: tuple[Permit, ...]
    subscribe: tuple[Permit, ...]


def site_seat_denied(hub_domain: str) -> SeatDenied:
    return SeatDenied(
        publish=(Permit(f"$JS.{hub_domain}.API.>", "the hub's JetStream: a site's seat writes nothing there"),),
        subscribe=(Permit(SERVICE_REPLIES, "the answers crossing the link, the hub's to other nodes among them"),),
    )


def link_label(site: Site, account: str) -> str:
    """How files name a link's user and seed: `leaf-<site>-data`, `leaf-<site>-vault`."""
    return f"leaf-{site.name}-{account}"


def consumer_create(domain: str, bucket: Bucket, subject_filter: str | None = None) -> str:
    """The API subject creating a consumer of `bucket` in JetStream domain `domain`: bare, or with
    its one filter (relative to the bucket) in the subject, under any consumer name."""
    api = f"$JS.{domain}.API.{bucket.consumer_create_api('*', subject_filter)}"
    return api if subject_filter is not None else api.removesuffix(".*")


def _mirrors(hub_domain: str, read: Iterable[Bucket], what: str) -> list[Permit]:
    return [
        Permit(consumer_create(hub_domain, bucket), f"the site's mirror of {bucket.name}: {what}") for bucket in read
    ]


def _sources(hub_domain: str, keyed: Iterable[Bucket], nodes: Sequence[str]) -> list[Permit]:
    return [
        Permit(consumer_create(hub_domain, bucket, under(node)), f"the site's copy of {_owned(bucket, node)}")
        for bucket in keyed
        for node in nodes
    ]


def _owned(bucket: Bucket, node: str) -> str:
    return f"{node}'s lease" if bucket == buckets.LEASES else f"{node}'s keys of {bucket.name}"


# What a node writes: its own keys of these, and its lease.
WRITTEN = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT, buckets.LEASES)


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
