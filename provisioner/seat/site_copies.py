"""A site's copies of the hub's buckets, made and checked by the seat running at the site.

A node at a site writes fail fast to the hub and reads at its site (`docs/sites-write-path.md`):
its direct gets, its batch reads and its live updates are answered by streams of the site's own
JetStream domain, named as the hub's, which copy the hub's buckets through `$JS.<hub>.API`
(`sites.json`: the hub's domain, the site's nodes). The seat at the site makes them:

    mirror    the registry, each mesh-wide bucket of the catalogue (shared config), and the
              buckets nodes write (needs, applied, collect, leases): the whole stream, with the
              hub's own revisions and time stamps (`mirror_direct`: it answers the direct gets of
              the hub's stream name)
    sources   each node-keyed bucket a node reads (placement, each provider's `_bound`): one
              source per node living at the site, filtered to its keys (`<node>.>`), since the
              link permits each node's keys alone; its revisions are the site's own

Each copy is fixed as the hub's buckets are: direct get on, rollup headers refused, deletion of
the stream denied, one value per key as the hub's history (`bucket_history`), `discard: old`
(a copy must take whatever the hub stored). A copy of a bucket some party at the site follows
live republishes its writes under `$KVR.<bucket>.>`, where the site's node accounts import their
live updates from, as at the hub: the registry, the mesh-wide and the node-keyed buckets. The
mirrors of what nodes write republish nothing (providers, which follow the needs, live at the
hub), but for the collect mirror where the domains file shares a collection: every node at the
site follows the other nodes' contributions to it.

An existing copy is checked against this at every start. Its republishing and its sources are
made to match (a stream update: both are derived from the catalogue and sites.json, change no
stored value, and a node moved to or from the site must gain or lose its source); the log says
what changed. Anything else that differs (not a mirror of the hub's stream, rollups or deletes
allowed, no direct get, another history) is reported with one ERROR line naming what differs and
never rewritten: a mirror's origin cannot be changed in place, and recreating a copy empties the
site's reads until the link brings it back, which is the operator's call (the copy holds nothing
of its own: deleted, it is made again at the next start and filled from the hub). A copy whose
consumer create the site's data link does not permit (sites.json) never starts, and nats-server
says nothing: that too is an ERROR line at start, naming the subject.

Nothing here writes the hub: the copies are made through the site's own `$JS.API`.

Each copy takes a durable consumer the hub's seat made for it (`provisioner.seat.site_consumers`,
ADR-58, nats-server 2.14+: `consumer: {name, deliver_subject}` in the mirror or source) and only
resets it across the link, never creates one: the link permits those resets and the consumers'
deliveries alone (`registry.access.sites.links`). Why: a copy that creates its consumer resumes after
a cut on nats-server's own schedule (a create lost in the cut waited for 30 s, then tried again
after 10 s more each failure, up to 2 min): measured through the tests' relay, current again 50 s
after a 60 s cut. A durable copy is reset as soon as its consumer's heartbeat (every second) is
heard again, or, when the link returns while a reset sent during the cut still waits for its
answer (nats-server waits 5 s), by the seat's resend of it (`provisioner.seat.site_resets`):
current again 0.5 s after a 60 s cut, 0.2 s after a 5 s cut, 1.2 s when a reset was lost
(`tests/sites/test_site_resume.py`). A copy made before the hub's seat made its consumer starts once it
is there (the copy's reset is tried again on nats-server's backoff).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from provisioner.seat.buckets import seat_buckets, until_enough_peers
from provisioner.seat.site_resets import rewind
from registry.access import CopyConsumer, SiteFileEntry, followed_live
from registry.contract import Bucket, buckets, load_catalogue
from registry.wire import BucketConfig, Bus, bucket_config, converge_republish

log = logging.getLogger(__name__)

# What the site's nodes write, at the hub: mirrored whole so that their own keys, stamps and
# lease are read at the site with the hub's revisions; followed live by nobody at the site.
WRITTEN = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT, buckets.LEASES)
CopyKind = Literal["mirror", "sources"]


@dataclass(frozen=True)
class SiteCopy:
    """One copy at the site: the hub's bucket, how it is copied, whether it republishes, and (for
    sources) the nodes whose keys it takes."""

    bucket: Bucket
    kind: CopyKind
    live: bool
    nodes: tuple[str, ...] = ()
    site: str = ""

    @property
    def consumers(self) -> list[CopyConsumer]:
        """The hub's durable consumers it takes: the bucket's, or one per node it sources."""
        if self.kind == "mirror":
            return [CopyConsumer(self.site, self.bucket)]
        return [CopyConsumer(self.site, self.bucket, node) for node in self.nodes]


def site_copies(site: SiteFileEntry, providers: Iterable[str] = (), domains_file: Path | None = None) -> list[SiteCopy]:
    """Every copy the seat of `site` makes: of each bucket the hub's seat makes (the same
    `providers` and domains file), a mirror or one source per node of the site."""
    found = []
    live = followed_live(load_catalogue(domains_file))
    for bucket in seat_buckets(providers, domains_file):
        if bucket in WRITTEN:  # followed only where a collection is shared, as at the hub
            followed = bucket == buckets.COLLECT and bucket in live
            found.append(SiteCopy(bucket, "mirror", live=followed, site=site.name))
        elif bucket != buckets.REGISTRY and bucket.shape.fields[:1] == ("node",):
            found.append(SiteCopy(bucket, "sources", live=True, nodes=site.nodes, site=site.name))
        else:
            found.append(SiteCopy(bucket, "mirror", live=True, site=site.name))
    return found


def hub_api(hub_domain: str) -> str:
    return f"$JS.{hub_domain}.API"


def copy_config(copy: SiteCopy, hub_domain: str, config: BucketConfig) -> dict[str, Any]:
    """The stream configuration of `copy` at the site."""
    bucket, external = copy.bucket, {"api": hub_api(hub_domain)}
    stream: dict[str, Any] = {
        "name": bucket.stream,
        "retention": "limits",
        "max_msgs_per_subject": config.history,
        "storage": config.storage,
        "num_replicas": config.replicas,
        "discard": "old",
        "allow_direct": True,
        "allow_rollup_hdrs": False,
        "deny_delete": True,
    }
    if copy.kind == "mirror":
        stream["mirror"] = {"name": bucket.stream, "external": external, "consumer": _durable(copy.consumers[0])}
        stream["mirror_direct"] = True
    else:
        stream["sources"] = [_source(consumer, external) for consumer in copy.consumers]
    if copy.live:  # as the hub's buckets republish (registry.wire.create_bucket), which converge_republish keeps
        stream["republish"] = {"src": bucket.subject(">"), "dest": bucket.live_subject(">")}
    return stream


def _source(consumer: CopyConsumer, external: Mapping[str, str]) -> dict[str, Any]:
    """One node's source: the hub's consumer filters it (a durable source takes no filter of its own)."""
    return {"name": consumer.bucket.stream, "external": dict(external), "consumer": _durable(consumer)}


def _durable(consumer: CopyConsumer) -> dict[str, str]:
    return {"name": consumer.name, "deliver_subject": consumer.delivery}


def consumer_resets(copy: SiteCopy, hub_domain: str) -> list[str]:
    """What `copy` sends to the hub to (re)start, as the data link's permits write them."""
    return [consumer.reset(hub_domain) for consumer in copy.consumers]


def differences(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """How an existing copy differs from `wanted`, besides its republishing and its sources
    (which the seat makes match): each said as what an operator reads."""
    found = []
    if existing.get("subjects"):
        found.append(f"it takes writes of its own (subjects {', '.join(existing['subjects'])}), not a copy")
    if "mirror" in wanted:
        found += _mirror_differences(existing, wanted)
    elif existing.get("mirror"):
        found.append("a mirror, where the site keeps one source per node")
    if existing.get("allow_rollup_hdrs", False):
        found.append("rollup headers allowed")
    if not existing.get("deny_delete", False):
        found.append("deletes through the stream API allowed")
    if not existing.get("allow_direct", False):
        found.append("no direct get (the site's nodes read by direct get)")
    if existing.get("max_msgs_per_subject") != wanted["max_msgs_per_subject"]:
        found.append(f"history {existing.get('max_msgs_per_subject')}, not {wanted['max_msgs_per_subject']}")
    return found


def _mirror_differences(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    mirror, want = existing.get("mirror") or {}, wanted["mirror"]
    if not mirror:
        return [f"not a mirror of the hub's {want['name']}"]
    found = []
    api = (mirror.get("external") or {}).get("api")
    if mirror.get("name") != want["name"] or api != want["external"]["api"]:
        found.append(
            f"a mirror of {mirror.get('name')} through {api}, not of {want['name']} through {want['external']['api']}"
        )
    if mirror.get("filter_subject") or mirror.get("subject_transforms"):
        found.append("a filtered mirror, where the site keeps the whole bucket")
    if mirror.get("consumer") != want["consumer"]:
        found.append(
            f"takes {_consumer_said(mirror.get('consumer'))}, not the hub's durable {want['consumer']['name']} "
            f"delivering to {want['consumer']['deliver_subject']}"
        )
    if not existing.get("mirror_direct", False):
        found.append("no mirror_direct (the hub's stream name is not answered at the site)")
    return found


def _consumer_said(consumer: Mapping[str, str] | None) -> str:
    if not consumer:
        return "a consumer it creates at the hub"
    return f"the hub's {consumer.get('name')} delivering to {consumer.get('deliver_subject')}"


def _sources_of(config: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
    return {
        (
            s.get("name", ""),
            s.get("filter_subject", ""),
            (s.get("external") or {}).get("api", ""),
            json.dumps(s.get("consumer"), sort_keys=True),
        )
        for s in config.get("sources") or []
    }


async def ensure_site_copies(
    bus: Bus,
    site: SiteFileEntry,
    *,
    hub_domain: str,
    config: BucketConfig,
    providers: Iterable[str] = (),
    domains_file: Path | None = None,
) -> list[SiteCopy]:
    """Creates each copy missing at the site, brings the republishing and sources of those there
    in line, reports those that differ otherwise and those the data link cannot carry; the copies."""
    copies = site_copies(site, providers, domains_file)
    _report_link(site, copies, hub_domain)
    await _rewind(bus, [copy for copy in copies if await _missing(bus, copy)], hub_domain)
    for copy in copies:
        await ensure_site_copy(bus, copy, hub_domain, config)
    return copies


async def ensure_site_copy(bus: Bus, copy: SiteCopy, hub_domain: str, config: BucketConfig) -> None:
    bucket = copy.bucket
    wanted = copy_config(copy, hub_domain, config)
    found = await until_enough_peers(bucket, lambda: bucket_config(bus, bucket))
    if found is None:
        await until_enough_peers(bucket, lambda: bus.jetstream(bucket.create_api, wanted, operation=_made(copy)))
        log.info("site copy %s created: %s", bucket.stream, describe(copy, hub_domain), extra={"bucket": bucket.name})
        return
    existing: Mapping[str, Any] = found
    differs = differences(existing, wanted)
    if differs:
        log.error(
            "site copy %s differs from what the seat at the site makes (%s): %s. It is left as it is; "
            "delete it (`nats stream rm %s`, it holds nothing of its own) and restart the seat, which makes "
            "it again and fills it from the hub once the link is up",
            bucket.stream,
            describe(copy, hub_domain),
            "; ".join(differs),
            bucket.stream,
            extra={"bucket": bucket.name},
        )
        return
    if copy.kind == "sources":
        existing = await _converge_sources(bus, copy, existing, wanted)
    if await converge_republish(bus, bucket, existing, live=copy.live):
        log.info(
            "site copy %s now %s",
            bucket.stream,
            f"republishes its writes under {bucket.live_subject('>')}" if copy.live else "republishes nothing",
            extra={"bucket": bucket.name},
        )


async def _converge_sources(
    bus: Bus, copy: SiteCopy, existing: Mapping[str, Any], wanted: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The copy's sources made those of the site's nodes now (a node moved to or from the site);
    the configuration as it then stands."""
    have, want = _sources_of(existing), _sources_of(wanted)
    if have == want:
        return existing
    updated = {**existing, "sources": wanted["sources"]}
    await bus.jetstream(copy.bucket.update_api, updated, operation=f"update the sources of {copy.bucket.stream}")
    log.warning(
        "site copy %s: sources now the site's nodes; added %s, removed %s",
        copy.bucket.stream,
        _filters(want - have) or "none",
        _filters(have - want) or "none",
        extra={"bucket": copy.bucket.name},
    )
    return updated


async def _missing(bus: Bus, copy: SiteCopy) -> bool:
    return await until_enough_peers(copy.bucket, lambda: bucket_config(bus, copy.bucket)) is None


async def _rewind(bus: Bus, missing: Sequence[SiteCopy], hub_domain: str) -> None:
    """The hub's consumers of the copies about to be made, back at the stream's start (all at
    once): a copy made anew takes its consumer from where it was acknowledged last, and would
    lack what came before."""
    failed: dict[str, str] = {}

    async def one(consumer: CopyConsumer) -> None:
        why = await rewind(bus, consumer, hub_domain)
        if why is not None:
            failed[f"{consumer.bucket.stream} {consumer.name}"] = why

    async with anyio.create_task_group() as tasks:
        for consumer in (c for copy in missing for c in copy.consumers):
            tasks.start_soon(one, consumer)
    if failed:
        log.warning(
            "the hub's consumers of %d copies made now not rewound to the start (%s): a copy made before "
            "in their place takes only what came after its consumer's last acknowledgement; if one was, "
            "delete it once the link is up (`nats stream rm`) and restart this seat",
            len(failed),
            "; ".join(f"{name}: {why}" for name, why in sorted(failed.items())[:3]),
        )


def _filters(sources: Iterable[tuple[str, str, str, str]]) -> str:
    return ", ".join(sorted(f"{name} {subject or consumer}" for name, subject, _, consumer in sources))


def describe(copy: SiteCopy, hub_domain: str) -> str:
    if copy.kind == "mirror":
        what = f"a mirror of the hub's {copy.bucket.stream} through {hub_api(hub_domain)}"
    else:
        what = f"sourcing the keys of {', '.join(copy.nodes)} from the hub's {copy.bucket.stream}"
    what += f" (the hub's durable {', '.join(c.name for c in copy.consumers) or 'none'})"
    return what + (f", republished under {copy.bucket.live_subject('>')}" if copy.live else "")


def _made(copy: SiteCopy) -> str:
    return f"make the site's copy {copy.bucket.stream}"


def _report_link(site: SiteFileEntry, copies: Sequence[SiteCopy], hub_domain: str) -> None:
    """An ERROR for each copy the site's data link does not carry (it would never start, silently),
    a WARNING for each copy the link permits that this seat does not make."""
    link = site.data_link
    if link is None:
        log.error("sites.json gives site %s no data link: no copy can be filled from the hub", site.name)
        return
    made = {subject for copy in copies for subject in consumer_resets(copy, hub_domain)}
    for subject in sorted(made):
        if not site.link_publishes(subject):
            log.error(
                "site %s: the data link (%s) does not permit %s: that copy never starts; issue the grants "
                "with the providers and domains file this seat is given, and reload the hub",
                site.name,
                link.label,
                subject,
            )
    resets = f"{hub_api(hub_domain)}.CONSUMER.RESET."
    for permit in link.publish:
        if permit.subject.startswith(resets) and permit.subject not in made:
            log.warning(
                "site %s: the data link permits %s (%s), a copy this seat does not make: is it given the "
                "providers and domains file the grants were issued with?",
                site.name,
                permit.subject,
                permit.why,
            )
