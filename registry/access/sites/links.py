"""The leaf link between a site's server and the hub, and exactly what it may carry.

A site's server dials the hub once per account that must cross (a leaf node *remote*): the data
account, for the site's nodes' writes and the site's copies of the hub's buckets; the vault's
account, for the vault's verbs. Node accounts never cross: they live at the site and import from
its data account, their reads answered there, their writes sent on to the hub. Both links bind at
the hub to the site's own account, `site-<site>` (`registry.access.sites.accounts`), which imports
exactly what they carry from the hub's data account and the vault's. Between two JetStream domains
nats-server itself keeps `$JS.API.>`, `$KV.>` and `$OBJ.>` from crossing; what crosses besides is
what the link's user (a user of the site's account at the hub) is permitted, and nothing else.

A leaf user's permissions read from the hub: `publish` is what the site may send into the hub's
account, `subscribe` what the hub may send to the site. A node at a site writes *fail fast*
(`docs/sites-write-path.md`): its writes cross the link and the hub's bucket decides them, and it
reads at the site from copies the site's data account makes. The data account's link carries:

- the node's writes: its account at the site imports `$JS.<hub>.API.$KV.<bucket>.<node>.>` of the
  site's data account as `$KV.<bucket>.<node>.>` (needs, applied, collect; its lease
  `node.<node>`), so the link publishes exactly those of the site's own nodes (`hub_writes`);
- the site's *mirrors* of the hub's buckets: the registry and shared config (readable mesh-wide),
  and needs, applied, collect and leases, so that a node's reads of its own keys, stamps and lease
  are answered at the site with the hub's own revisions and time stamps (a mirror keeps them);
- the site's *sources* of each node-keyed bucket a node reads only (placement, each `_bound`): one
  per node living at the site, of that node's keys alone, so a site cannot copy another site's
  node's values (a source numbers its copies itself: their revisions are the site's, which only
  ever serve as stamps);
- each copy takes a *durable consumer at the hub* (ADR-58, nats-server 2.14+) that the hub's seat
  made for it (`CopyConsumer`: `site-<site>` on a mirrored stream, `site-<site>-<node>` filtered to
  the node's keys), instead of creating one: the link permits the copy's reset of it
  (`CONSUMER.RESET.<stream>.<name>`, which only moves it back to what the copy acknowledged) and
  no consumer create at all, so a site can neither read a bucket it has no consumer of nor filter
  another node's keys; a durable copy resumes within seconds of the link's return, where one that
  creates its consumer waits for nats-server's retry (30 s for a create lost in a cut, then 10 s
  more each failure, up to 2 min);
- their flow: each consumer's deliveries to its own subject (`$JS.M.<site>.<stream>`,
  `$JS.S.<site>.<stream>.<node>`: a site is sent no other site's), the answers to the resets
  (`$JSC.R.>`) and each copy's flow control back to the hub (`$JS.FC.<stream>.<name>.*`, which
  acknowledges what it took: a site acknowledges for no other site);
- the answers to the site's own requests (its nodes' writes' acknowledgements) on `_R_.>`: the
  site's account at the hub is sent no other answer.

The verb does not cross: the site's seat answers the site's nodes from the site's copies.

A whole mirror of needs, applied, collect and leases puts every node's keys of those buckets at
every site (readable by the site's data account, never by its nodes' accounts, which import their
own keys alone); a mirror filtered per node would keep the hub's revisions too, but one mirror
takes one consumer (one filter), so a site of several nodes would need one stream per node and
bucket, which direct gets by stream name cannot tell apart.

The vault's link carries the vault's verbs the site's nodes are granted, and their answers.
Everything else is refused by nats-server without a word (no violation is logged: a request just
finds no responder), which the test of the topology checks by the data (`tests/sites/test_sites_topology.py`).

What the site's own account at the hub keeps from a site (`tests/sites/test_site_link_isolation.py`, a
rogue leaf server on a link's credential): it hears no answer of the hub's to another party (those
are published in the data account and the vault's, which no link reaches), and a request it sends
reaches a responder as the site's (nats-server 2.14 and later put the leaf connection's own
`Nats-Request-Info` on a request crossing a service import, whatever the leaf wrote), so the vault
answers it for the nodes living at the site alone. What a site's server is trusted with: its own
nodes' accounts, and so what they may ask and write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from registry.access.grants import VAULT, AccountGrant, Grants, Import, catalogue_of
from registry.access.parties import DATA_ACCOUNT, Kind, Party
from registry.access.sites.topology import Site
from registry.contract import Bucket, Domain, buckets, fleet, under

# Where a reply crossing an account's service import is sent: a reply subject of the exporter's.
SERVICE_REPLIES = "_R_.>"
# A node's write at a site crosses the link (fail fast): a silent link must be dropped soon, or every
# write through it times out instead of failing at once (docs/sites-write-path.md: ping_interval 1s,
# ping_max 2 drops it in 4 s; nats-server's default, 2 min x 2, takes minutes). Server-wide.
SITE_SERVER = (
    "# a silent link to the hub is dropped after about 30 s, so that writes through it fail fast",
    'ping_interval: "10s"',
    "ping_max: 3",
    "# the hub's protocol lines to a site grow with its nodes' subjects: past nats-server's 4 KB default,",
    "# 3 sites of 200 nodes each had their links dropped as they came up (python -m bench --sites)",
    "max_control_line: 64KB",
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
    """One account's link from `site` to the hub: the user's label (its seed's name), the site's
    account it binds (`account`: the data account, the vault's) to the site's own at the hub
    (`hub_account`: `site-<site>`, `registry.access.sites.accounts`), what the site may send into
    the hub (`publish`) and the hub to the site (`subscribe`)."""

    site: str
    account: str
    hub_account: str
    label: str
    publish: tuple[Permit, ...]
    subscribe: tuple[Permit, ...]


def one_link(grant: AccountGrant) -> AccountGrant:
    """The vault's account as a site's server holds it: the one leaf link it dials to the hub."""
    return grant.model_copy(update={"limits": grant.held_to.model_copy(update={"leafnodes": 1})})


def site_party(site: Site) -> Party:
    """A site's links at the hub, as a party: its account `site-<site>` holds both."""
    return Party(kind=Kind.SITE, name=site.name)


def leaf_links(
    site: Site, *, hub_domain: str, grants: Grants, domains: Mapping[str, Domain], providers: Sequence[str]
) -> tuple[LeafLink, LeafLink]:
    """The data account's and the vault's links of `site`."""
    return data_link(site, hub_domain=hub_domain, domains=domains, providers=providers), vault_link(site, grants)


def data_link(site: Site, *, hub_domain: str, domains: Mapping[str, Domain], providers: Sequence[str]) -> LeafLink:
    copies = copy_consumers(site, domains=domains, providers=providers)
    publish = [
        *hub_writes(site, hub_domain),
        *(Permit(copy.reset(hub_domain), f"{copy.what}: resumed from the hub's consumer") for copy in copies),
        *(Permit(copy.flow_control, f"{copy.what}: its flow control, which acknowledges") for copy in copies),
    ]
    subscribe = [
        *(Permit(copy.delivery, f"{copy.what}: the hub's consumer delivers here") for copy in copies),
        Permit("$JSC.R.>", "the hub's answers to the site's copies' consumer resets"),
        Permit(SERVICE_REPLIES, "the answers to the site's own requests: its nodes' writes' acknowledgements"),
    ]
    hub = site_party(site).account
    return LeafLink(site.name, DATA_ACCOUNT, hub, link_label(site, "data"), tuple(publish), tuple(subscribe))


def hub_writes(site: Site, hub_domain: str) -> list[Permit]:
    """Each write of a node of `site`, at the hub: `$JS.<hub>.API.$KV.<bucket>.<node>.>`."""
    return [
        Permit(
            write_at_the_hub(hub_domain, bucket.subject(node_filter(bucket, node))),
            f"{owned(bucket, node)}, written at the hub",
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
    verbs = sorted(set(vault_verbs(grants, site.nodes)))
    publish = tuple(Permit(verb, "the site's nodes ask the vault at the hub") for verb in verbs)
    subscribe = (Permit(SERVICE_REPLIES, "the vault's answers to the site's nodes"),)
    hub = site_party(site).account
    return LeafLink(site.name, VAULT.account, hub, link_label(site, "vault"), publish, subscribe)


@dataclass(frozen=True)
class SeatDenied:
    """What a site's seat, a user of the site's data account, may not do: it makes the site's copies
    and answers the verb there, never writes at the hub, and never hears the answers crossing the
    link on `_R_.>` (the acknowledgements of its nodes' writes: theirs alone). It may send its
    copies' consumer resets again (`provisioner.seat.site_resets`: one lost in a cut holds a copy
    back 5 s), which move only the site's own consumers back to what its copies acknowledged: so
    of the hub's API it is denied everything but `CONSUMER.RESET` (the link carries no more)."""

    publish: tuple[Permit, ...]
    subscribe: tuple[Permit, ...]


def site_seat_denied(hub_domain: str) -> SeatDenied:
    api = f"$JS.{hub_domain}.API"
    return SeatDenied(
        publish=(
            Permit(f"{api}.$KV.>", "the hub's buckets: a site's seat writes nothing there"),
            Permit(f"{api}.STREAM.>", "the hub's streams: a site's seat changes and reads none"),
            Permit(f"{api}.DIRECT.>", "the hub's values: a site's seat reads its copies"),
            Permit(f"{api}.CONSUMER.CREATE.>", "a consumer of the hub's: the hub's seat makes them"),
            Permit(f"{api}.CONSUMER.DURABLE.>", "a consumer of the hub's: the hub's seat makes them"),
            Permit(f"{api}.CONSUMER.DELETE.>", "a consumer of the hub's: the hub's seat removes them"),
            Permit(f"{api}.CONSUMER.MSG.>", "the hub's consumers' messages"),
            Permit(f"{api}.*", "the hub's account info and the like: nothing a site's seat needs"),
        ),
        subscribe=(Permit(SERVICE_REPLIES, "the answers crossing the link: the site's nodes' alone"),),
    )


def link_label(site: Site, account: str) -> str:
    """How files name a link's user and seed: `leaf-<site>-data`, `leaf-<site>-vault`."""
    return f"leaf-{site.name}-{account}"


# The hub's durable consumers a site's copies take (ADR-58): named by this prefix, the hub's seat
# makes them and removes those of sites gone; no other consumer of the hub's is touched.
COPY_PREFIX = "site-"


@dataclass(frozen=True)
class CopyConsumer:
    """The durable consumer at the hub one copy of `site` takes: the whole of `bucket` (a mirror),
    or the keys of `node` (one source of the site's copy). The hub's seat makes it; the copy at the
    site names it and resets it, instead of creating a consumer of its own."""

    site: str
    bucket: Bucket
    node: str | None = None

    @property
    def name(self) -> str:
        """`site-<site>` (a mirror), `site-<site>-<node>` (a node's source); a consumer of the
        bucket's stream, so the bucket is not in its name."""
        return f"{COPY_PREFIX}{self.site}" + (f"-{self.node}" if self.node is not None else "")

    @property
    def delivery(self) -> str:
        """The subject it delivers to, which the copy at the site subscribes across the link:
        `$JS.M.<site>.<stream>`, `$JS.S.<site>.<stream>.<node>`; the site's own, so the link
        carries no other site's deliveries."""
        if self.node is None:
            return f"$JS.M.{self.site}.{self.bucket.stream}"
        return f"$JS.S.{self.site}.{self.bucket.stream}.{self.node}"

    @property
    def filter(self) -> str | None:
        """Its filter at the hub: the node's keys, or None (the whole bucket)."""
        return None if self.node is None else self.bucket.subject(under(self.node))

    @property
    def what(self) -> str:
        if self.node is None:
            return f"the site's mirror of {self.bucket.name}"
        return f"the site's copy of {owned(self.bucket, self.node)}"

    @property
    def flow_control(self) -> str:
        """Where the copy answers its consumer's flow control, which acknowledges what it took:
        `$JS.FC.<stream>.<name>.<id>` (nats-server's v1 format, its default; the `js_ack_fc_v2`
        feature flag at the hub would change it, and the copies would stall)."""
        return f"$JS.FC.{self.bucket.stream}.{self.name}.*"

    @property
    def reset_api(self) -> str:
        """Its reset at the hub: `$JS.API.CONSUMER.RESET.<stream>.<name>`, which repositions the
        consumer at its acknowledged floor and nothing else."""
        return f"$JS.API.CONSUMER.RESET.{self.bucket.stream}.{self.name}"

    def reset(self, hub_domain: str) -> str:
        """What the copy sends (in domain `hub_domain`) to resume: its reset under the hub's domain."""
        return self.reset_api.replace("$JS.API.", f"$JS.{hub_domain}.API.", 1)


def copy_consumers(site: Site, *, domains: Mapping[str, Domain], providers: Sequence[str]) -> list[CopyConsumer]:
    """The hub's consumers `site`'s copies take: one per mirrored bucket (the registry, the
    mesh-wide buckets, those nodes write), one per node of the site and node-keyed bucket."""
    catalogue = catalogue_of(domains, providers)
    mirrored = [buckets.REGISTRY, *catalogue.mesh_wide, *WRITTEN]
    return [
        *(CopyConsumer(site.name, bucket) for bucket in mirrored),
        *(CopyConsumer(site.name, bucket, node) for bucket in catalogue.node_keyed for node in site.nodes),
    ]


def owned(bucket: Bucket, node: str) -> str:
    if bucket == fleet.FLEET:
        return f"{node}'s rollout claims"
    return f"{node}'s lease" if bucket == buckets.LEASES else f"{node}'s keys of {bucket.name}"


# What a node writes: its own keys of these, its lease and its rollout claims.
WRITTEN = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT, buckets.LEASES, fleet.FLEET)


def node_filter(bucket: Bucket, node: str) -> str:
    """The keys of `node` in `bucket`: `<node>.>`, its lease `node.<node>` in the leases, its
    rollout claims `claim.*.<node>` in the fleet."""
    if bucket == buckets.LEASES:
        return buckets.LEASES.shape.build(role="node", name=node)
    if bucket == fleet.FLEET:
        return fleet.own_claims(node)
    return under(node)


def vault_verbs(grants: Grants, nodes: Sequence[str]) -> Iterable[str]:
    wanted = {Party(kind=Kind.NODE, name=node) for node in nodes}
    for grant in grants.parties:
        if grant.party in wanted:
            yield from (item.subject for item in grant.imports if item.account == VAULT.account)
