"""`sites.json` read back: the topology `mesh-provisioner grants` wrote beside the servers'
configurations (`registry.access.sites.servers.render_sites_json`), for a site's seat.

    {"version": 1,
     "hub": {"domain": "hub", "urls": [...], "listen": "0.0.0.0:7422"},
     "sites": [{"name": "home", "domain": "home", "nodes": ["n1"], "seat_key": "U...",
                "links": [{"account": "MESH", "hub_account": "site-home", "label": "leaf-home-data",
                           "user_key": "U...",
                           "publish": [{"subject": "...", "why": "..."}], "subscribe": [...]}]}]}

A site's seat reads its own entry: the hub's JetStream domain (its copies mirror and source
through `$JS.<hub>.API`), the nodes living at the site (one source per node of each node-keyed
bucket), and what its data link permits (a copy whose consumer reset the link does not permit
never starts, and nats-server says nothing). Public keys only: the file holds no secret. An
unknown version, a key this reader does not know, a site named twice or a file that is no JSON
are refused, naming the file and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from registry.access.parties import DATA_ACCOUNT
from registry.access.sites.topology import HUB_DOMAIN, MAX_NODES, SiteName
from registry.contract import JsonRefused, check_json, read_bounded
from registry.errors import SettingsError

MAX_FILE_BYTES = 4 << 20
MAX_SITES = 1_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PermitEntry(_Model):
    subject: str
    why: str = ""


class LinkEntry(_Model):
    """One of a site's leaf links: its account at the site and the one it binds to at the hub
    (none in a file written before each site had its own there), its user, what it may send and
    receive."""

    account: str
    hub_account: str | None = None
    label: str
    user_key: str
    publish: tuple[PermitEntry, ...] = ()
    subscribe: tuple[PermitEntry, ...] = ()


class HubFileEntry(_Model):
    domain: SiteName = HUB_DOMAIN
    urls: tuple[str, ...] = ()
    listen: str = ""


class SiteFileEntry(_Model):
    """One site: its name and JetStream domain, its nodes, its seat's public key, its links."""

    name: SiteName
    domain: SiteName
    nodes: Annotated[tuple[str, ...], Field(max_length=MAX_NODES)]
    seat_key: str
    links: tuple[LinkEntry, ...] = ()

    @property
    def data_link(self) -> LinkEntry | None:
        """The data account's link: the copies' deliveries and the nodes' writes cross it."""
        return next((link for link in self.links if link.account == DATA_ACCOUNT), None)

    def link_publishes(self, subject: str) -> bool:
        """Whether the data link lets the site send `subject` (as written in the file) to the hub."""
        link = self.data_link
        return link is not None and any(p.subject == subject for p in link.publish)


class SitesFile(_Model):
    """The whole of `sites.json`."""

    version: Literal[1]
    hub: HubFileEntry
    sites: Annotated[tuple[SiteFileEntry, ...], Field(max_length=MAX_SITES)]

    @model_validator(mode="after")
    def _each_site_once(self) -> SitesFile:
        names = [site.name for site in self.sites]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"site named more than once: {', '.join(twice)}")
        return self

    def site(self, name: str) -> SiteFileEntry | None:
        return next((site for site in self.sites if site.name == name), None)


def read_sites_file(path: Path, *, setting: str = "sites_file") -> SitesFile:
    """`path` read as sites.json; a file that cannot be read, or is not one, is a `SettingsError`
    of `setting` (the setting that named it)."""
    try:
        raw = read_bounded(path, MAX_FILE_BYTES)
    except OSError as err:
        raise SettingsError(setting, f"{path} cannot be read: {err.strerror or err}") from None
    try:
        check_json(raw, max_bytes=MAX_FILE_BYTES)
    except JsonRefused as err:
        raise SettingsError(setting, f"{path} cannot be read as sites.json: {err.reason}") from None
    try:
        return SitesFile.model_validate_json(raw)
    except ValidationError as err:
        said = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()[:5])
        reason = f"{path} is not a sites.json as `mesh-provisioner grants` writes it: {said}"
        raise SettingsError(setting, reason) from None
