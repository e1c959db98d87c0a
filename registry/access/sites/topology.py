"""Where the nodes live: a hub and sites, as the mesh file names them.

    [hub]                                       # the server (later: the cluster) holding the mesh
    domain = "hub"                              # its JetStream domain (left out: hub)
    leafnodes = ["nats-leaf://hub.example.org:7422"]   # where each site's server dials the hub
    listen = "0.0.0.0:7422"                     # where the hub accepts them (left out: this)

    [sites.home]                                # a site: one nats-server, its own JetStream domain,
    nodes = ["n1", "n2"]                        # named after it, holding the nodes listed here

A node at no site lives at the hub. A site's name is its JetStream domain and a token of the
subjects that reach it (`$JS.home.API.>`), so it is a plain name: letters, digits, `-` and `_`,
at most 64 characters, and never the hub's domain. A node listed at two sites, a site with no
node, a node that is not one of the mesh's nodes, and sites without `hub.leafnodes` are refused
by the mesh file (`registry.access.mesh_file`), naming the key and why.

The servers' configurations are derived from this by `registry.access.sites.servers`; what the
link between a site and the hub may carry, by `registry.access.sites.links`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

# A JetStream domain and a subject token at once (nats-server refuses `.`, `*`, `>` and spaces in a
# domain); also a file name (`sites/<site>.conf`).
DOMAIN_PATTERN = r"^[A-Za-z0-9_-]+$"
MAX_DOMAIN = 64
HUB_DOMAIN = "hub"
LEAF_LISTEN = "0.0.0.0:7422"  # nats-server's own default leaf port, on every interface
LEAF_SCHEMES = ("nats-leaf", "nats", "tls", "ws", "wss")
MAX_URLS = 16
MAX_NODES = 10_000

SiteName = Annotated[str, StringConstraints(pattern=DOMAIN_PATTERN, max_length=MAX_DOMAIN)]


def _leaf_url(url: str) -> str:
    """A URL a site's server dials: nats-server's schemes, a host, and no credentials in it (the
    link authenticates by its nkey, and the URL is written into files)."""
    parts = urlsplit(url)
    if parts.scheme not in LEAF_SCHEMES:
        raise ValueError(f"a leaf URL's scheme is one of {', '.join(s + '://' for s in LEAF_SCHEMES)}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a leaf URL holds no credentials: the link authenticates with its own nkey")
    if not parts.hostname:
        raise ValueError("a leaf URL names a host")
    return url


def _host_port(listen: str) -> str:
    host, colon, port = listen.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("is HOST:PORT, a port from 1 to 65535 (0.0.0.0:7422)")
    return listen


LeafUrl = Annotated[str, AfterValidator(_leaf_url)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HubEntry(_Model):
    """The hub: its JetStream domain, the URLs the sites dial, where it listens for them."""

    domain: SiteName = HUB_DOMAIN
    leafnodes: Annotated[tuple[LeafUrl, ...], Field(max_length=MAX_URLS)] = ()
    listen: Annotated[str, AfterValidator(_host_port)] = LEAF_LISTEN


class SiteEntry(_Model):
    """One site: the nodes that live there (at least one)."""

    nodes: Annotated[tuple[str, ...], Field(max_length=MAX_NODES)] = ()


def site_problems(nodes: Sequence[str], hub: HubEntry | None, sites: Mapping[str, SiteEntry]) -> list[str]:
    """Each mistake of the sites against the mesh's `nodes`, said with its key."""
    if not sites:
        return []
    problems = []
    if hub is None or not hub.leafnodes:
        problems.append("hub.leafnodes: sites are named, so the URLs they dial the hub on are needed")
    known, placed = set(nodes), dict[str, str]()
    for site, entry in sites.items():
        if hub is not None and site == hub.domain:
            problems.append(f"sites.{site}: the hub's domain; a site's name is its own JetStream domain")
        if not entry.nodes:
            problems.append(f"sites.{site}.nodes: a site holds at least one node (a node at no site lives at the hub)")
        for index, node in enumerate(entry.nodes):
            key = f"sites.{site}.nodes[{index}]"
            if node not in known:
                problems.append(f"{key}: {node!r} is not one of the nodes")
            elif node in placed:
                problems.append(f"{key}: {node!r} lives at site {placed[node]!r} already; a node lives at one site")
            else:
                placed[node] = site
    return problems


@dataclass(frozen=True)
class Site:
    """A site: its name (its JetStream domain) and the nodes that live there."""

    name: str
    nodes: tuple[str, ...]

    @property
    def domain(self) -> str:
        return self.name


@dataclass(frozen=True)
class Topology:
    """The hub and its sites, in the mesh file's order; a node at no site lives at the hub."""

    hub_domain: str = HUB_DOMAIN
    hub_urls: tuple[str, ...] = ()
    hub_listen: str = LEAF_LISTEN
    sites: tuple[Site, ...] = field(default_factory=tuple)

    @staticmethod
    def of(hub: HubEntry | None, sites: Mapping[str, SiteEntry]) -> Topology:
        hub = hub or HubEntry()
        placed = tuple(Site(name, entry.nodes) for name, entry in sites.items())
        return Topology(hub.domain, hub.leafnodes, hub.listen, placed)

    def site_of(self, node: str) -> Site | None:
        """The site where `node` lives; `None`: at the hub."""
        return next((site for site in self.sites if node in site.nodes), None)
