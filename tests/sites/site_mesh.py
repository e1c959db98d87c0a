"""The hub and a site with node n1 living at it, on the generated configuration, for the isolation
suites run at a site: the servers, each party's connection, and the data at both ends of the link."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import nats
from nats.aio.client import Client

from mesh_dev.local_nats import LocalNats
from registry.access import Party, account_key, creds_path
from registry.contract import buckets
from registry.wire import Bus, BusOptions, connect
from tests.attacks import (
    data_buckets,
    everything,
    outside_own_keys,
)
from tests.cluster import free_port
from tests.helpers import eventually
from tests.sites import Relay, leafz, server
from tests.sites.seat_at_site import Seat, connecting, seat_settings

SITE = "site1"
LINK_ACCOUNT = f"site-{SITE}"  # where its links bind at the hub
AT_THE_SITE = {"node-n1"}  # the parties that live at the site: every other connects at the hub
ATTACKER = "n1"
ASKED = 10  # verb requests counted at each seat
MESH = """\
nodes = ["n1", "n2"]
operators = ["ops"]
[providers.postgres]
machines = ["n1"]
[hub]
leafnodes = ["nats-leaf://127.0.0.1:{relay}"]
listen = "127.0.0.1:{leaf}"
[sites.site1]
nodes = ["n1"]
"""


@dataclass(frozen=True)
class SiteMesh:
    """The hub and site 1 on their generated files, both seats running: quacks like
    `tests.isolation.Mesh` for the suite's tests, each party connecting where it lives."""

    hub: LocalNats
    site: LocalNats | None
    keys: Path
    out: Path
    jwt: bool
    leaf_port: int
    monitor: int

    def server_of(self, label: str) -> LocalNats:
        return self.site if self.site is not None and label in AT_THE_SITE else self.hub

    def options(self, who: Party | str, running: LocalNats | None = None) -> BusOptions:
        label = who if isinstance(who, str) else who.label
        return connecting(running or self.server_of(label), label, self.keys, jwt=self.jwt)

    @asynccontextmanager
    async def connect(self, who: Party | str, running: LocalNats | None = None) -> AsyncIterator[Bus]:
        async with connect(self.options(who, running)) as bus:
            yield bus

    async def raw(self, who: Party) -> Client:
        """nats-py itself on `who`'s key, at its own server: an attacker is not bound to our library."""
        url = self.server_of(who.label).url
        if self.jwt:
            return await nats.connect(url, user_credentials=str(creds_path(self.keys, who.label)), name=who.label)
        return await nats.connect(url, nkeys_seed=str(self.keys / f"{who.label}.nk"), name=who.label)

    def link_account(self) -> str:
        """How the hub's `/leafz` names the site's account there (its links bind to it): its name,
        or its public key (JWT)."""
        if not self.jwt:
            return LINK_ACCOUNT
        return account_key(self.keys, LINK_ACCOUNT).public_key


def grants(root: Path, relay: int, leaf: int, *, jwt: bool) -> tuple[Path, Path]:
    from provisioner.commands.cli import main  # noqa: PLC0415 -- the seat's CLI, as the operator runs it

    root.mkdir(parents=True, exist_ok=True)
    (root / "mesh.toml").write_text(MESH.format(relay=relay, leaf=leaf))
    out, keys = root / "out", root / "keys"
    jwt_flag = ["--jwt"] if jwt else []
    assert main(["grants", "--mesh", str(root / "mesh.toml"), "--out", str(out), "--keys", str(keys), *jwt_flag]) == 0
    return out, keys


@asynccontextmanager
async def site_mesh(root: Path, *, jwt: bool, with_site: bool = True) -> AsyncIterator[SiteMesh]:
    """The hub (and site 1, unless told) on the generated files, the hub's seat running, and the
    site's seat once the site's data link is up (its copies then start at once)."""
    leaf, monitor = free_port(), free_port()
    relay = Relay(leaf, 0.0)
    out, keys = grants(root, relay.port, leaf, jwt=jwt)
    async with anyio.create_task_group() as tasks, AsyncExitStack() as stack:
        hub = await stack.enter_async_context(server(out, root, "hub", jwt=jwt, monitor=monitor))
        await tasks.start(relay.serve)
        site = await stack.enter_async_context(server(out, root, SITE, jwt=jwt)) if with_site else None
        mesh = SiteMesh(hub, site, keys, out, jwt, leaf, monitor)
        sites_file = out / "sites" / "sites.json"
        # the hub of the sites of sites.json: it makes the consumers the site's copies take
        seats = [
            Seat(connecting(hub, "seat", keys, jwt=jwt, name=buckets.SEAT), seat_settings(out, sites_file=sites_file))
        ]
        if site is not None:
            await eventually(partial(_linked, monitor, mesh.link_account()), "the site's link up")
            site_settings = seat_settings(out, site=SITE, sites_file=sites_file)
            seats.append(Seat(connecting(site, f"seat-{SITE}", keys, jwt=jwt, name=buckets.SEAT), site_settings))
        for seat in seats:
            await tasks.start(seat.run)
        try:
            yield mesh
        finally:
            for seat in reversed(seats):
                await seat.stop()
            tasks.cancel_scope.cancel()  # the relay


async def _linked(monitor: int, account: str) -> bool | None:
    up = await anyio.to_thread.run_sync(leafz, monitor)
    return True if any(link["account"] == account for link in up) else None


@dataclass(frozen=True)
class Ends:
    """The data at both ends of the link: every bucket at the hub, every copy at the site."""

    hub: Bus
    site: Bus | None

    async def caught_up(self) -> bool | None:
        """Whether every mirror at the site holds the hub's last sequence (a mirror keeps the hub's)."""
        if self.site is None:
            return True
        for bucket in await data_buckets(self.site):
            info = await self.site.jetstream(bucket.info_api, operation=f"site's {bucket.name}")
            if "mirror" not in info["config"]:
                continue
            hub = await self.hub.jetstream(bucket.info_api, operation=f"hub's {bucket.name}")
            if info["state"]["last_seq"] != hub["state"]["last_seq"]:
                return None
        return True

    async def outside(self, node: str) -> dict[str, Any]:
        """Everything outside `node`'s own keys, at the hub and at the site (once caught up)."""
        await eventually(self.caught_up, "every mirror at the site at the hub's last sequence")
        found: dict[str, Any] = {
            "hub": outside_own_keys(await everything(self.hub, await data_buckets(self.hub)), node)
        }
        if self.site is not None:
            found["site"] = outside_own_keys(await everything(self.site, await data_buckets(self.site)), node)
        return found
