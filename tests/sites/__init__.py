"""A hub and one site on loopback for the tests: two nats-servers in their own JetStream domains
(`hub`, `site1`), the site a leaf node of the hub through a relay that plays the WAN link.

The relay (`mesh_dev.relay`) adds a delay each way and is the tests' to break: `cut()` closes its connections and
refuses new ones (the site's server sees the link go at once, as after a router reboot), `stall()`
holds every byte without closing anything (a link that stops carrying packets: nobody is told),
`restore()` ends either. The leaf link is bound to the data account on both sides (`DATA`); each
node has an account of its own at its site, and what it may write is what it imports.

The node's imports depend on the write path (`docs/sites-write-path.md`):

    fail fast   `$KV.<bucket>.<node>.>` is `$JS.hub.API.$KV.<bucket>.<node>.>` of the site's data
                account: the write crosses the link and the hub's bucket acknowledges it
    buffered    `$KV.<bucket>.<node>.>` of the site's data account: the site's own bucket
                acknowledges it, and the hub's bucket sources it

The servers are configured by hand here, not by the project's generator: the tests measure what
nats-server does, independently of how the configuration is written.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mesh_dev import relay
from mesh_dev.generated_servers import generated_config
from mesh_dev.local_nats import LocalNats, local_nats
from registry.contract import Bucket, buckets, encode_token
from registry.wire import BucketConfig, Bus, BusOptions, bucket_config, connect, create_bucket, node_key
from tests.cluster import free_port

WritePath = Literal["fail fast", "buffered"]
HUB, SITE = "hub", "site1"
NODE = "n1"
NODE_BUCKETS: tuple[Bucket, ...] = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)
WRITTEN = (*NODE_BUCKETS, buckets.LEASES)  # every bucket a node writes
PASSWORD = "pw"  # every test user's: loopback only


class Relay(relay.Relay):
    """The relay (`mesh_dev.relay`) on a test's port (`tests.cluster.free_port`)."""

    def __init__(self, target: int, delay: float) -> None:
        super().__init__(target, delay, free_port())


@dataclass
class Server:
    """One nats-server of the pair, stopped and started again on the same ports with the same store."""

    name: str
    state_dir: Path
    config: str
    port: int = field(default_factory=free_port)
    _stop: anyio.Event = field(default_factory=anyio.Event)
    _exited: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        self._stop, self._exited = anyio.Event(), anyio.Event()
        try:
            async with local_nats(self.state_dir, self.config, port=self.port):
                task_status.started()
                await self._stop.wait()
        finally:
            self._exited.set()

    async def stop(self) -> None:
        self._stop.set()
        await self._exited.wait()


def _users(*names: str) -> str:
    return ", ".join(f'{{user: "{name}", password: "{PASSWORD}"}}' for name in names)


def _jetstream(state_dir: Path, domain: str) -> str:
    # local_nats writes a jetstream block without a domain first: nats-server takes the last one.
    return f'jetstream {{ store_dir: "{state_dir / "jetstream"}", domain: "{domain}" }}'


def hub_config(state_dir: Path, leaf_port: int) -> str:
    return f"""server_name: "{HUB}"
{_jetstream(state_dir, HUB)}
leafnodes {{ listen: "127.0.0.1:{leaf_port}", no_advertise: true }}
accounts {{ DATA {{ jetstream: enabled, users: [{_users("seat", "leaf")}] }} }}
"""


def own_keys(bucket: Bucket, node: str) -> str:
    """The node's keys in `bucket` (relative to it): `<node>.>`, and in the leases its one lease."""
    return node_key(node) if bucket == buckets.LEASES else f"{encode_token(node)}.>"


def node_writes(path: WritePath, node: str = NODE) -> list[tuple[str, str]]:
    """(what the site's data account exports, what the node imports it as) for each subject the
    node writes: its keys of the node buckets and its lease."""
    own = [bucket.subject(own_keys(bucket, node)) for bucket in WRITTEN]
    prefix = f"$JS.{HUB}.API." if path == "fail fast" else ""
    return [(f"{prefix}{subject}", subject) for subject in own]


def node_reads(node: str = NODE) -> list[str]:
    """The direct gets of its own keys (its stamps included) and of its lease, answered at the site."""
    return [bucket.direct_get_subject(own_keys(bucket, node)) for bucket in WRITTEN]


def site_config(state_dir: Path, relay_port: int, path: WritePath, extra: str = "") -> str:
    writes = node_writes(path)
    exports = [f'{{service: "{exported}"}}' for exported, _ in writes]
    exports += [f'{{service: "{subject}"}}' for subject in node_reads()]
    imports = [f'{{service: {{account: DATA, subject: "{exported}"}}, to: "{local}"}}' for exported, local in writes]
    imports += [f'{{service: {{account: DATA, subject: "{subject}"}}}}' for subject in node_reads()]
    return f"""server_name: "{SITE}"
{_jetstream(state_dir, SITE)}
leafnodes {{
  reconnect: 1
  remotes: [ {{ url: "nats-leaf://leaf:{PASSWORD}@127.0.0.1:{relay_port}", account: DATA }} ]
}}
accounts {{
  DATA {{ jetstream: enabled, users: [{_users("site-seat")}], exports: [{", ".join(exports)}] }}
  NODE {{ users: [{_users(NODE)}], imports: [{", ".join(imports)}] }}
}}
{extra}
"""


@dataclass
class Sites:
    """A hub, a site leafed to it through `relay`, and connections: the seat at the hub, the site's
    data account (what the seat would create at the site through), the node at its site."""

    path: WritePath
    hub: Server
    site: Server
    relay: Relay
    tasks: TaskGroup

    async def restart_hub(self) -> None:
        await self.hub.stop()
        await self.tasks.start(self.hub.run)

    def options(self, server: Server, user: str, **more: object) -> BusOptions:
        return BusOptions(servers=(server.url,), name=user, user=user, password=PASSWORD, **more)  # type: ignore[arg-type]

    @asynccontextmanager
    async def seat(self) -> AsyncIterator[Bus]:
        async with connect(self.options(self.hub, "seat")) as bus:
            yield bus

    @asynccontextmanager
    async def site_data(self) -> AsyncIterator[Bus]:
        async with connect(self.options(self.site, "site-seat")) as bus:
            yield bus

    @asynccontextmanager
    async def node(self, **more: object) -> AsyncIterator[Bus]:
        async with connect(self.options(self.site, NODE, **more)) as bus:
            yield bus


@asynccontextmanager
async def hub_and_site(
    root: Path, path: WritePath, *, delay: float = 0.0, site_extra: str = ""
) -> AsyncIterator[Sites]:
    """The hub and the site running (the site's configuration ending with `site_extra`), the
    site's leaf link on its way up; not yet their streams: the test makes them."""
    leaf_port = free_port()
    hub = Server(HUB, root / HUB, hub_config(root / HUB, leaf_port))
    relay = Relay(leaf_port, delay)
    site = Server(SITE, root / SITE, site_config(root / SITE, relay.port, path, site_extra))
    async with anyio.create_task_group() as tasks:
        await tasks.start(relay.serve)
        await tasks.start(hub.run)
        await tasks.start(site.run)
        try:
            yield Sites(path, hub, site, relay, tasks)
        finally:
            await site.stop()
            await hub.stop()
            tasks.cancel_scope.cancel()


def site_mirror(bucket: Bucket) -> dict[str, object]:
    """The site's read copy of a hub bucket (fail fast): same name, so the node's direct gets of
    `KV_<bucket>` are answered at the site; a mirror keeps the hub's sequences and time stamps."""
    return {
        "name": bucket.stream,
        "mirror": {"name": bucket.stream, "external": {"api": f"$JS.{HUB}.API", "deliver": ""}},
        "retention": "limits",
        "max_msgs_per_subject": 1,
        "storage": "file",
        "num_replicas": 1,
        "discard": "old",
        "allow_direct": True,
        "mirror_direct": True,
        "allow_rollup_hdrs": False,
        "deny_delete": True,
    }


def hub_source(bucket: Bucket, site: str, nodes: tuple[str, ...]) -> dict[str, object]:
    """One entry of the hub bucket's `sources` (buffered): the site's bucket of the same name,
    through the site's JetStream domain, only the keys of the site's nodes."""
    kept = [{"src": bucket.subject(own_keys(bucket, n)), "dest": bucket.subject(own_keys(bucket, n))} for n in nodes]
    return {"name": bucket.stream, "external": {"api": f"$JS.{site}.API", "deliver": ""}, "subject_transforms": kept}


async def make_streams(sites: Sites, seat: Bus, site: Bus, config: BucketConfig | None = None) -> None:
    """The hub's buckets and the site's streams the write path needs, each with the seat's fixed
    bucket configuration: fail fast, a mirror of each hub bucket at the site; buffered, a bucket
    at the site that the hub's bucket sources."""
    config = config or BucketConfig()
    for bucket in WRITTEN:
        await create_bucket(seat, bucket, config)
        if sites.path == "fail fast":
            await site.jetstream(bucket.create_api, site_mirror(bucket), operation=f"mirror {bucket.name}")
            continue
        await create_bucket(site, bucket, config)
        stream = await bucket_config(seat, bucket)
        assert stream is not None
        stream["sources"] = [hub_source(bucket, SITE, (NODE,))]
        await seat.jetstream(bucket.update_api, stream, operation=f"source {bucket.name} from {SITE}")


# A hub and one site on what `mesh-provisioner grants --mesh` writes (static accounts), the site's
# leaf link through a relay: for the node client's tests at a site (tests/sites/test_site_client.py).

GENERATED_MESH = """\
nodes = ["n1", "n3"]
operators = ["ops"]
[hub]
leafnodes = ["nats-leaf://127.0.0.1:{relay}"]
listen = "127.0.0.1:{leaf}"
[sites.site1]
nodes = ["n1"]
"""
SITE_READS: tuple[Bucket, ...] = (buckets.REGISTRY,)  # read at the site, with live updates (republished)


def generated_server(out: Path, folder: Path, name: str) -> Server:
    """nats-server `name` on its generated files (`<out>/sites/<name>.conf` and `.jetstream.conf`),
    copied into `folder`, stoppable and started again on the same port and store."""
    return Server(name, folder, generated_config(out, folder, name))


@dataclass
class GeneratedSites:
    """The hub and site 1 on the generated configuration; `keys` holds each party's seed
    (`<label>.nk`: `seat`, `node-n1`, `seat-site1`), `out` the grants."""

    hub: Server
    site: Server
    relay: Relay
    keys: Path
    out: Path
    tasks: TaskGroup

    def options(self, server: Server, label: str) -> BusOptions:
        return BusOptions(servers=(server.url,), name=label, nkey_seed=self.keys / f"{label}.nk")

    async def restart_hub(self) -> None:
        await self.hub.stop()
        await self.tasks.start(self.hub.run)


@asynccontextmanager
async def generated_hub_and_site(root: Path, *, delay: float = 0.0) -> AsyncIterator[GeneratedSites]:
    """`mesh-provisioner grants --mesh` on a hub and site 1 (node n1 there, n3 at the hub), both
    servers running on what it wrote, the site's link through a relay adding `delay` each way."""
    from provisioner.commands.cli import main  # noqa: PLC0415 -- the seat's CLI, only for this helper

    leaf = free_port()
    relay = Relay(leaf, delay)
    (root / "mesh.toml").write_text(GENERATED_MESH.format(relay=relay.port, leaf=leaf))
    out, keys = root / "out", root / "keys"
    assert main(["grants", "--mesh", str(root / "mesh.toml"), "--out", str(out), "--keys", str(keys)]) == 0
    hub, site = generated_server(out, root / HUB, HUB), generated_server(out, root / SITE, SITE)
    async with anyio.create_task_group() as tasks:
        await tasks.start(relay.serve)
        await tasks.start(hub.run)
        await tasks.start(site.run)
        try:
            yield GeneratedSites(hub, site, relay, keys, out, tasks)
        finally:
            await site.stop()
            await hub.stop()
            tasks.cancel_scope.cancel()


def site_read_copy(bucket: Bucket) -> dict[str, object]:
    """The site's mirror of a hub bucket nodes read and follow: `site_mirror`, republishing each
    message on the bucket's live subjects, which the node's account imports."""
    republish = {"src": bucket.subject(">"), "dest": bucket.live_subject(">")}
    return {**site_mirror(bucket), "republish": republish}


async def make_site_copies(site: Bus, read: tuple[Bucket, ...] = SITE_READS) -> None:
    """What the seat will make at the site (made here by hand, as tests/sites/test_sites_topology.py
    does): a mirror of each bucket a node writes (fail fast) and of each bucket in `read`."""
    for bucket in WRITTEN:
        await site.jetstream(bucket.create_api, site_mirror(bucket), operation=f"mirror {bucket.name}")
    for bucket in read:
        await site.jetstream(bucket.create_api, site_read_copy(bucket), operation=f"mirror {bucket.name}")


# A hub and two sites on what `mesh-provisioner grants --mesh` writes, each site's link through a
# relay of its own (cutting one leaves the other's alone): for tests/sites/test_two_sites.py.

GENERATED_TWO_SITES_MESH = """\
nodes = ["n1", "n2", "n3"]
operators = ["ops"]
[hub]
leafnodes = ["nats-leaf://127.0.0.1:{relay}"]
listen = "127.0.0.1:{leaf}"
[sites.site1]
nodes = ["n1"]
[sites.site2]
nodes = ["n2"]
"""
SITE2 = "site2"


@dataclass
class GeneratedTwoSites:
    """The hub, site 1 (node n1) and site 2 (node n2) on the generated configuration; `sites` and
    `relays` by site name; `keys` holds each party's seed (`seat`, `node-n1`, `seat-site2`, ...)."""

    hub: Server
    sites: dict[str, Server]
    relays: dict[str, Relay]
    keys: Path
    out: Path

    def options(self, server: Server, label: str) -> BusOptions:
        return BusOptions(servers=(server.url,), name=label, nkey_seed=self.keys / f"{label}.nk")


@asynccontextmanager
async def generated_hub_and_two_sites(root: Path, *, delay: float = 0.0) -> AsyncIterator[GeneratedTwoSites]:
    """`mesh-provisioner grants --mesh` on a hub and two sites, all three servers running on what it
    wrote, each site's link through its own relay adding `delay` each way. The mesh file has one
    hub URL for every site; site 2's generated file is pointed at its own relay's port."""
    from provisioner.commands.cli import main  # noqa: PLC0415 -- the seat's CLI, only for this helper

    leaf = free_port()
    relays = {SITE: Relay(leaf, delay), SITE2: Relay(leaf, delay)}
    (root / "mesh.toml").write_text(GENERATED_TWO_SITES_MESH.format(relay=relays[SITE].port, leaf=leaf))
    out, keys = root / "out", root / "keys"
    assert main(["grants", "--mesh", str(root / "mesh.toml"), "--out", str(out), "--keys", str(keys)]) == 0
    site2_conf = out / "sites" / f"{SITE2}.conf"
    dialled = f"127.0.0.1:{relays[SITE].port}"
    assert dialled in site2_conf.read_text()
    site2_conf.write_text(site2_conf.read_text().replace(dialled, f"127.0.0.1:{relays[SITE2].port}"))
    hub = generated_server(out, root / HUB, HUB)
    sites = {name: generated_server(out, root / name, name) for name in (SITE, SITE2)}
    async with anyio.create_task_group() as tasks:
        for each in relays.values():
            await tasks.start(each.serve)
        await tasks.start(hub.run)
        for server in sites.values():
            await tasks.start(server.run)
        try:
            yield GeneratedTwoSites(hub, sites, relays, keys, out)
        finally:
            for server in sites.values():
                await server.stop()
            await hub.stop()
            tasks.cancel_scope.cancel()


@asynccontextmanager
async def server(
    out: Path, root: Path, name: str, *, jwt: bool, monitor: int | None = None
) -> AsyncIterator[LocalNats]:
    """nats-server `name` on its generated files, copied into its own configuration folder: its
    leaf nodes and accounts (static), or its leaf nodes and jwt/server-auth.conf (JWT)."""
    async with local_nats(root / name, generated_config(out, root / name, name, jwt=jwt, monitor=monitor)) as running:
        yield running


def leafz(monitor: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/leafz", timeout=5) as answer:  # loopback
        leafs: list[dict[str, Any]] = json.load(answer).get("leafs") or []
        return leafs
