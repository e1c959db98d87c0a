"""`python -m bench --sites`: the figures across sites, on loopback, a relay playing the WAN.

A hub and `sites` leaf-node sites run on exactly what `mesh-provisioner grants --mesh` writes
(static accounts), each site's leaf links dialling the hub through one relay (`mesh_dev.relay`)
that adds `delay` each way (20 ms: a write across costs about 44 ms). A seat runs at the hub and
one at each site (`serve --site`), each a process of its own. Node `nhub` lives at the hub,
`nsite` at site 1, nodes `n00000...` are spread over the sites, `nodes` each, and as many more
live at the hub. Nothing is added to the generated configuration but the servers' own names,
monitoring ports and store folders.

Three parts:

    reconcile   the node client's real reconcile (`provisioner_client.reconcile`) of `modules`
                modules, each reading shared config, its placement (dir, port) and the registry,
                with nothing changed since the last: `nsite`'s at its site against `nhub`'s at the
                hub, interleaved, median and p90 of `reconciles` each. The bytes the relay carried
                during each say what crossed the link (the hub's reconciles cross nothing: what
                the relay carried meanwhile is the links' own traffic, mirrors' heartbeats)
    registry    `what=registry` asked by `nsite` (answered by its site's seat) against `nhub`,
                interleaved, p50 and p99 of `asked` each; the hub's seat's count of answered
                requests says none of the site's crossed
    register    every site's `nodes` nodes registering at once through their site's server
                (`bench.register`: a first reconcile on the bus, its writes fail fast at the hub),
                `rate` a second at each site; then as many nodes of the hub through the hub's
                server, in as many processes at the same rate (the same work without the link);
                then the hub's seat's `what=nodes`, asked by the operator: how many it calls healthy

No lease is taken around a measured reconcile (`reconcile` takes none; the CLI's one-shot and
watch mode hold it around it): what it costs at a site is said beside the figures.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from bench.cases import Report
from bench.convergence import file_stamps
from bench.harness import ROOT, Latency, median, python_process, timed
from bench.observe import nodes_shown, own_cpu_seconds
from mesh_dev.generated_servers import generated_config
from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.relay import Relay, unused_port
from mesh_dev.standins import SECRET_SUBJECT, Vault
from provisioner.commands.cli import main as seat_cli
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.watch.holding import holding
from registry.contract import Bucket, KeyShape, buckets, under
from registry.errors import BusError, ConvergeError
from registry.serving import EndpointSpec, serve
from registry.wire import Bus, BusOptions, answer_of, connect, get_last_many, node_key, put

HUB_NODE, SITE_NODE = "nhub", "nsite"
CONFIG = Bucket("mesh-config_values", KeyShape("<name>"))
ASSIGNMENTS = Bucket("mesh-controller_assignments", KeyShape("<node>.<module>"))
WRITTEN = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT, buckets.LEASES)
# Not generated: with 3 sites of 200 nodes or more (3 x 100 and 1 x 300 link without it), a site's
# server drops its leaf link at once, "maximum control line exceeded" (nats-server's default is
# 4 KB; 8 KB was enough at 3 x 300). The bench raises it at the sites and says so in its figures.
REQUEST_WAIT = timedelta(seconds=30)


@dataclass(frozen=True)
class SitesSizes:
    sites: int = 3
    nodes: int = 300  # registering at each site
    rate: float = 50.0  # nodes arriving a second, at each site
    modules: int = 10
    reconciles: int = 50
    asked: int = 500
    delay: float = 0.020  # seconds each way

    @staticmethod
    def quick() -> SitesSizes:
        return SitesSizes(sites=2, nodes=3, rate=10.0, modules=2, reconciles=3, asked=10)


def mesh_file(sizes: SitesSizes, relay: int, leaf: int) -> str:
    """The mesh: `nhub` at the hub, `nsite` at site 1, `nodes` registering nodes at each site and
    as many registering at the hub (after them in number)."""
    registering = [registering_node(n) for n in range(2 * sizes.sites * sizes.nodes)]
    lines = [
        f"nodes = {json.dumps([HUB_NODE, SITE_NODE, *registering])}",
        'operators = ["ops"]',
        "[hub]",
        f'leafnodes = ["nats-leaf://127.0.0.1:{relay}"]',
        f'listen = "127.0.0.1:{leaf}"',
    ]
    for site in range(sizes.sites):
        own = registering[site * sizes.nodes : (site + 1) * sizes.nodes]
        lines += [f"[sites.{site_name(site)}]", f"nodes = {json.dumps([SITE_NODE] * (site == 0) + own)}"]
    return "\n".join(lines) + "\n"


def site_name(site: int) -> str:
    return f"site{site + 1}"


def registering_node(number: int) -> str:
    return f"n{number:05d}"  # as bench.register names them


@dataclass
class Mesh:
    """The running servers, the relay between them, and where each party's seed lies."""

    out: Path
    keys: Path
    hub: LocalNats
    sites: list[LocalNats]
    relay: Relay
    hub_monitor: int

    def options(self, server: LocalNats, label: str) -> BusOptions:
        return BusOptions(
            servers=(server.url,), name=label, nkey_seed=self.keys / f"{label}.nk", request_timeout=REQUEST_WAIT
        )


@asynccontextmanager
async def generated_server(out: Path, root: Path, name: str, monitor: int | None = None) -> AsyncIterator[LocalNats]:
    """nats-server `name` on its generated files (static accounts), copied into its own folder."""
    async with local_nats(
        root / name, generated_config(out, root / name, name, monitor=monitor), ready_timeout=60
    ) as up:
        yield up


def leaf_accounts(monitor: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/leafz", timeout=5) as answer:  # loopback
        return [str(leaf["account"]) for leaf in json.load(answer).get("leafs") or []]


@asynccontextmanager
async def running_mesh(root: Path, sizes: SitesSizes) -> AsyncIterator[Mesh]:
    """The hub and its sites on the generated files, every site's data link up through the relay."""
    leaf, monitor = unused_port(), unused_port()
    relay = Relay(leaf, sizes.delay)
    (root / "mesh.toml").write_text(mesh_file(sizes, relay.port, leaf))
    out, keys = root / "out", root / "keys"
    asked = ["grants", "--mesh", str(root / "mesh.toml"), "--out", str(out), "--keys", str(keys)]
    if seat_cli(asked) != 0:
        raise RuntimeError("mesh-provisioner grants --mesh failed")
    async with anyio.create_task_group() as tasks, AsyncExitStack() as servers:
        hub = await servers.enter_async_context(generated_server(out, root, "hub", monitor))
        await tasks.start(relay.serve)  # before a site dials it
        sites = [
            await servers.enter_async_context(generated_server(out, root, site_name(site)))
            for site in range(sizes.sites)
        ]

        async def links_up() -> bool:  # each site's two links, bound to its own account at the hub
            found = await anyio.to_thread.run_sync(leaf_accounts, monitor)
            return all(found.count(f"site-{site_name(site)}") == 2 for site in range(sizes.sites))

        await until(links_up, within=60)
        try:
            yield Mesh(out, keys, hub, sites, relay, monitor)
        finally:
            tasks.cancel_scope.cancel()


async def until(holds: Callable[[], Awaitable[bool]], within: float) -> None:
    with anyio.fail_after(within):
        while not await holds():
            await anyio.sleep(0.1)


def seat_command(mesh: Mesh, server: LocalNats, site: str | None) -> list[str]:
    label = f"seat-{site}" if site else "seat"
    command = [
        "-m",
        "provisioner.commands.cli",
        "serve",
        "--nats-url",
        server.url,
        "--nkey",
        str(mesh.keys / f"{label}.nk"),
    ]
    # the hub's seat reads sites.json too: it makes the durable consumers the sites' copies take
    command += ["--grants-file", str(mesh.out / "grants.json"), "--sites-file", str(mesh.out / "sites" / "sites.json")]
    command += ["--log-level", "INFO"]
    return [*command, "--site", site] if site else command


async def seat_stats(bus: Bus) -> int | None:
    """The verb requests the seat on `bus`'s server answered (`$SRV.STATS`, which never crosses a
    link); None while no seat answers."""
    try:
        reply = await bus.request(f"$SRV.STATS.{buckets.SEAT}", b"", operation="stats")
    except BusError:
        return None
    stats = json.loads(reply.data)
    return sum(int(e["num_requests"]) for e in stats.get("endpoints") or [])


@asynccontextmanager
async def seats(mesh: Mesh, state: Path) -> AsyncIterator[tuple[Bus, Bus]]:
    """The hub's seat and each site's, processes of their own, logging to `state/seats.log`;
    yields the seat's data-account connections at the hub and at site 1 (for their stats)."""
    log = state / "seats.log"
    async with AsyncExitStack() as stack:
        hub_data = await stack.enter_async_context(connect(mesh.options(mesh.hub, "seat")))

        async def hub_ready() -> bool:
            return await seat_stats(hub_data) is not None

        await stack.enter_async_context(
            python_process(seat_command(mesh, mesh.hub, None), ready=hub_ready, log=log, within=60)
        )
        site_data: list[Bus] = []
        for site, server in enumerate(mesh.sites):
            data = await stack.enter_async_context(connect(mesh.options(server, f"seat-{site_name(site)}")))
            site_data.append(data)

            async def site_ready(data: Bus = data) -> bool:
                return await seat_stats(data) is not None

            command = seat_command(mesh, server, site_name(site))
            await stack.enter_async_context(python_process(command, ready=site_ready, log=log, within=60))
        yield hub_data, site_data[0]


@dataclass(frozen=True)
class Fleet:
    """`modules` manifests of a node: each reads two shared config values, four of its own, its
    placement (a dir and a port), and resolves through the registry."""

    modules: int
    folder: Path
    secret: bool = False  # module m0 also reads a secret

    def write_manifests(self) -> Path:
        manifests = self.folder / "manifests"
        manifests.mkdir(parents=True, exist_ok=True)
        for module in range(self.modules):
            env = {
                "SHARED_0": "${config:shared-0}",
                "SHARED_1": "${config:shared-1}",
                **{f"OWN_{j}": f"${{config:m{module}-k{j}}}" for j in range(4)},
                "STATE": "${dir:state}",
                "URL": "http://localhost:${port:http}/",
                **({"PASSWORD": "${secret:db-password}"} if self.secret and module == 0 else {}),
            }
            (manifests / f"m{module}.json").write_text(json.dumps({"module": f"m{module}", "env": env}))
        return manifests

    async def write_values(self, hub_data: Bus, nodes: tuple[str, ...]) -> None:
        """The shared config and each node's placement, written at the hub (by the seat's account)."""
        for name in ("shared-0", "shared-1"):
            await put(hub_data, CONFIG, name, json.dumps(f"value of {name}").encode())
        for module in range(self.modules):
            for j in range(4):
                await put(hub_data, CONFIG, f"m{module}-k{j}", json.dumps(f"m{module} value {j}").encode())
            plan = {"plan": {"dir": {"state": f"/var/lib/m{module}"}, "port": {"http": 8000 + module}}}
            for node in nodes:
                await put(hub_data, ASSIGNMENTS, f"{node}.m{module}", json.dumps(plan).encode())


@dataclass
class Reconciles:
    """One node's measured reconciles: seconds, and the bytes the relay carried during each."""

    seconds: list[float] = field(default_factory=list)
    carried: list[int] = field(default_factory=list)
    writes: int = 0
    files: int = 0


async def node_revisions(hub_data: Bus, nodes: tuple[str, ...]) -> int:
    """The latest revisions of `nodes`' keys at the hub (needs, applied, collect and each lease),
    summed: what any write of theirs moves (the seat's own writes, its compile lease, do not)."""
    total = 0
    for node in nodes:
        for bucket in WRITTEN:
            pattern = node_key(node) if bucket == buckets.LEASES else under(node)
            items = await get_last_many(hub_data, bucket, pattern)
            total += max((item.revision for item in items), default=0)
    return total


async def hub_api_requests(mesh: Mesh) -> int:
    """The JetStream API requests the hub's server has taken (`/jsz`), every account's."""

    def read() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{mesh.hub_monitor}/jsz", timeout=5) as answer:  # loopback
            return int(json.load(answer)["api"]["total"])

    return await anyio.to_thread.run_sync(read)


async def what_crosses(mesh: Mesh, hub_data: Bus, node: Bus, plan: ClientPlan, report: Report, *, count: int) -> None:
    """`count` unchanged reconciles at the site alone: the hub's JetStream API requests and its
    seat's answers meanwhile, and the relay's bytes against an idle window as long."""
    api, answered, carried = await hub_api_requests(mesh), await seat_stats(hub_data), mesh.relay.carried
    started = time.perf_counter()
    for _ in range(count):
        assert (await reconcile(node, plan)).ok
    took = time.perf_counter() - started
    api_used, verb_used = await hub_api_requests(mesh) - api, (await seat_stats(hub_data) or 0) - (answered or 0)
    reconciling = mesh.relay.carried - carried
    carried = mesh.relay.carried
    await anyio.sleep(took)
    idle = mesh.relay.carried - carried
    report.add(f"{count} site reconciles: JetStream API requests at the hub", api_used, "requests")
    report.add(f"{count} site reconciles: verb requests the hub's seat answered", verb_used, "requests")
    report.add(f"{count} site reconciles: bytes across the relay", reconciling, "bytes")
    report.add("an idle window as long: bytes across the relay (the links' own)", idle, "bytes")


async def measured(node: Bus, plan: ClientPlan, relay: Relay, into: Reconciles, *, leased: bool = False) -> None:
    """One reconcile into `into`; `leased`: inside the node's lease, taken before and released
    after, as the CLI's one-shot `reconcile` holds it."""
    before_files, before_bytes = file_stamps(plan.materialize), relay.carried
    reports = []

    async def run() -> None:
        if not leased:
            reports.append(await reconcile(node, plan))
            return
        async with holding(node, plan.node, plan.lease_ttl):
            reports.append(await reconcile(node, plan))

    into.seconds.append(await timed(run))
    into.carried.append(relay.carried - before_bytes)
    assert reports[0].ok, reports[0].summary()
    after = file_stamps(plan.materialize)
    into.files += sum(1 for name, stamp in after.items() if before_files.get(name) != stamp)


def quantile_ms(seconds: list[float], quantile: float) -> float:
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1e3


async def unchanged_reconciles(mesh: Mesh, hub_data: Bus, report: Report, sizes: SitesSizes, state: Path) -> None:
    print(f"an unchanged reconcile of {sizes.modules} modules, at site 1 and at the hub")
    fleet = Fleet(sizes.modules, state / "fleet")
    manifests = fleet.write_manifests()
    await fleet.write_values(hub_data, (HUB_NODE, SITE_NODE))
    plans = {
        where: ClientPlan(node=node, manifests=manifests, materialize=state / f"env-{where}")
        for where, node in (("hub", HUB_NODE), ("site", SITE_NODE))
    }
    runs = {"hub": Reconciles(), "site": Reconciles()}
    leased = {"hub": Reconciles(), "site": Reconciles()}
    async with (
        connect(mesh.options(mesh.hub, f"node-{HUB_NODE}")) as at_hub,
        connect(mesh.options(mesh.sites[0], f"node-{SITE_NODE}")) as at_site,
    ):
        nodes = {"hub": at_hub, "site": at_site}
        await registry_at_site(at_hub, at_site)
        for where in ("hub", "site"):  # the first: registers and writes; the site's copies catch up
            await until_settled(nodes[where], plans[where])
        await what_crosses(mesh, hub_data, at_site, plans["site"], report, count=sizes.reconciles)
        before = await node_revisions(hub_data, (HUB_NODE, SITE_NODE))
        for _ in range(sizes.reconciles):
            for where in ("site", "hub"):
                await measured(nodes[where], plans[where], mesh.relay, runs[where])
        writes = await node_revisions(hub_data, (HUB_NODE, SITE_NODE)) - before
        for _ in range(sizes.reconciles):
            for where in ("site", "hub"):
                await measured(nodes[where], plans[where], mesh.relay, leased[where], leased=True)
    hub, site = runs["hub"], runs["site"]
    for where, run in runs.items():
        report.add(f"unchanged reconcile at the {where}: median", median(run.seconds) * 1e3, "ms")
        report.add(f"unchanged reconcile at the {where}: p90", quantile_ms(run.seconds, 0.90), "ms")
    ratio = median(site.seconds) / median(hub.seconds)
    report.add("unchanged reconcile, site / hub (medians)", ratio, "x", target="<= 1.2", met=ratio <= 1.2)
    report.add(
        "unchanged reconcile, site / hub (p90s)",
        quantile_ms(site.seconds, 0.9) / quantile_ms(hub.seconds, 0.9),
        "x",
    )
    files = hub.files + site.files
    report.add(
        f"unchanged reconciles: the nodes' KV writes (all {2 * sizes.reconciles})",
        writes,
        "writes",
        target="= 0",
        met=writes == 0,
    )
    report.add("unchanged reconciles: env files written", files, "files", target="= 0", met=files == 0)
    report.add("bytes across the relay during a site reconcile (median)", median(site.carried), "bytes")
    report.add("bytes across the relay during a hub reconcile (median: the links' own)", median(hub.carried), "bytes")
    for where, run in leased.items():  # the lease's take and release are writes: at a site they cross
        report.add(f"one-shot (lease taken and released) at the {where}: median", median(run.seconds) * 1e3, "ms")
    ratio = median(leased["site"].seconds) / median(leased["hub"].seconds)
    report.add("one-shot (lease taken and released), site / hub (medians)", ratio, "x")
    report.add("bytes across the relay during a site one-shot (median)", median(leased["site"].carried), "bytes")


async def with_a_secret(mesh: Mesh, hub_data: Bus, report: Report, sizes: SitesSizes, state: Path) -> None:
    """The same unchanged reconcile with one `${secret:...}` more in module m0, the vault (the
    development stand-in, on the vault's account) serving at the hub: a reconcile asks the vault
    each time (its answer's digest is an input), and from a site that request crosses the link."""
    print("the same, one module reading a secret from the vault at the hub")
    fleet = Fleet(sizes.modules, state / "fleet-secret", secret=True)
    manifests = fleet.write_manifests()
    runs = {"hub": Reconciles(), "site": Reconciles()}
    endpoints = [EndpointSpec("secret", SECRET_SUBJECT, Vault().answer_secret)]
    async with (
        connect(mesh.options(mesh.hub, "vault")) as vault,
        serve(vault, name="mesh-vault", version="0.1.0", description="development vault", endpoints=endpoints),
        connect(mesh.options(mesh.hub, f"node-{HUB_NODE}")) as at_hub,
        connect(mesh.options(mesh.sites[0], f"node-{SITE_NODE}")) as at_site,
    ):
        nodes = {"hub": at_hub, "site": at_site}
        plans = {
            where: ClientPlan(node=nodes_name, manifests=manifests, materialize=state / f"env-secret-{where}")
            for where, nodes_name in (("hub", HUB_NODE), ("site", SITE_NODE))
        }
        for where in ("hub", "site"):
            await until_settled(nodes[where], plans[where])
        for _ in range(sizes.reconciles):
            for where in ("site", "hub"):
                await measured(nodes[where], plans[where], mesh.relay, runs[where])
    for where, run in runs.items():
        report.add(f"with a secret, unchanged reconcile at the {where}: median", median(run.seconds) * 1e3, "ms")
    ratio = median(runs["site"].seconds) / median(runs["hub"].seconds)
    report.add("with a secret, unchanged reconcile, site / hub (medians)", ratio, "x")


async def until_settled(node: Bus, plan: ClientPlan) -> None:
    """Reconciles until one writes nothing and no env file: the first registers, and a site's
    copies of what it wrote arrive on their own time (a reconcile reading a copy that is behind
    is refused its write, `WrongLastSequence`, and the next one reads again)."""
    with anyio.fail_after(60):
        while True:
            before = file_stamps(plan.materialize)
            try:
                report = await reconcile(node, plan)
            except ConvergeError as refused:
                print(f"  (settling {plan.node}: {refused})")
                await anyio.sleep(0.2)
                continue
            if report.ok and not any(report.writes.values()) and file_stamps(plan.materialize) == before:
                return
            await anyio.sleep(0.2)


async def registry_asked(mesh: Mesh, hub_data: Bus, report: Report, sizes: SitesSizes) -> None:
    print(f"what=registry asked {sizes.asked} times by a node at site 1 and by one at the hub")
    async with (
        connect(mesh.options(mesh.hub, f"node-{HUB_NODE}")) as at_hub,
        connect(mesh.options(mesh.sites[0], f"node-{SITE_NODE}")) as at_site,
    ):
        await registry_at_site(at_hub, at_site)
        for node in (at_site, at_hub):  # warm both
            for _ in range(20):
                await answer_of(node, {"what": "registry"})
        hub_answered = await seat_stats(hub_data)
        samples: dict[str, list[float]] = {"site": [], "hub": []}
        for _ in range(sizes.asked):
            for where, node in (("site", at_site), ("hub", at_hub)):
                samples[where].append(await timed(partial(answer_of, node, {"what": "registry"})))
        crossed = (await seat_stats(hub_data) or 0) - (hub_answered or 0) - sizes.asked
    site, hub = Latency.of(samples["site"]), Latency.of(samples["hub"])
    for where, latency in (("site", site), ("hub", hub)):
        report.add(f"what=registry at the {where}: p50", latency.p50_ms, "ms")
        report.add(f"what=registry at the {where}: p99", latency.p99_ms, "ms")
    ratio = site.p50_ms / hub.p50_ms
    report.add("what=registry, site / hub (p50s)", ratio, "x", target="<= 1.5", met=ratio <= 1.5)
    report.add("what=registry, site / hub (p99s)", site.p99_ms / hub.p99_ms, "x")
    report.add("site requests the hub's seat answered", crossed, "requests", target="= 0", met=crossed == 0)


async def registry_at_site(at_hub: Bus, at_site: Bus) -> None:
    """Until the site's copy of the registry holds what the hub's seat compiled."""

    async def site_current() -> bool:
        expected = await registry_kinds(at_hub)
        return bool(expected) and await registry_kinds(at_site) == expected

    await until(site_current, within=60)


async def registry_kinds(node: Bus) -> set[str]:
    answer = (await answer_of(node, {"what": "registry"})).document()
    return {str(entry["kind"]) for entry in answer["entries"]}


@dataclass(frozen=True)
class Batch:
    """Nodes registering in `groups` processes of `bench.register`, each `nodes` nodes from
    `first + group * nodes` at `rate` a second, through the server of `urls[group]`."""

    label: str
    urls: tuple[str, ...]
    first: int
    nodes: int
    rate: float

    def names(self) -> set[str]:
        return {registering_node(n) for n in range(self.first, self.first + len(self.urls) * self.nodes)}


async def registered(batch: Batch, keys: Path) -> tuple[float, dict[str, dict[str, float]]]:
    """The batch's processes run at once: the wall time, and each process's summary by group."""
    summaries: dict[str, dict[str, float]] = {}

    async def group(number: int, url: str) -> None:
        first = batch.first + number * batch.nodes
        command = [sys.executable, "-m", "bench.register", url, str(first), str(batch.nodes), str(batch.rate)]
        done = await anyio.run_process([*command, str(keys)], cwd=ROOT, check=False, stderr=None)
        if done.returncode != 0:
            raise RuntimeError(f"bench.register {batch.label} {number} exited {done.returncode}")
        summaries[f"{batch.label} {number + 1}"] = json.loads(done.stdout.decode().strip().splitlines()[-1])

    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for number, url in enumerate(batch.urls):
            tasks.start_soon(group, number, url)
    return time.perf_counter() - started, summaries


async def registrations(mesh: Mesh, report: Report, sizes: SitesSizes) -> dict[str, Any]:
    """The sites' nodes registering through their sites' servers, then as many through the hub's
    (nodes of the hub: the same work with no link, for comparison; the buckets hold the sites'
    keys by then)."""
    total = sizes.sites * sizes.nodes
    print(f"{sizes.sites} sites x {sizes.nodes} nodes registering through their site's server, {sizes.rate:g}/s each")
    at_sites = Batch("site", tuple(server.url for server in mesh.sites), 0, sizes.nodes, sizes.rate)
    at_hub = Batch("hub group", (mesh.hub.url,) * sizes.sites, total, sizes.nodes, sizes.rate)
    details: dict[str, Any] = {}
    for batch in (at_sites, at_hub):
        cpu = own_cpu_seconds()
        seconds, summaries = await registered(batch, mesh.keys)
        cpu = own_cpu_seconds() - cpu
        where = "at the sites" if batch is at_sites else "at the hub"
        slowest = max(summary["seconds"] for summary in summaries.values())
        report.add(f"registrations {where}: all {total} registered (the slowest group's)", slowest, "s")
        report.add(f"registrations {where}: wall time, the processes' start included", seconds, "s")
        if batch is at_sites:
            report.add(f"registrations {where}: CPU of this process (the relay) / wall time", cpu / seconds, "cores")
        for name, summary in summaries.items():
            report.add(f"registrations {where}, {name}: time", summary["seconds"], "s")
            report.add(f"registrations {where}, {name}: one node p50", summary["node_p50_ms"], "ms")
            report.add(f"registrations {where}, {name}: one node p99", summary["node_p99_ms"], "ms")
            report.add(f"registrations {where}, {name}: most at once", summary["most_at_once"], "nodes")
        details[where] = summaries
    async with connect(mesh.options(mesh.hub, "operator-ops")) as ops:
        shown = await nodes_shown(ops)
    for batch, where in ((at_sites, "at the sites"), (at_hub, "at the hub")):
        rows = [row for row in shown.values() if row.node in batch.names()]
        healthy = sum(1 for row in rows if row.verdict == "healthy")
        released = sum(1 for row in rows if row.because.startswith("lease released"))
        # a one-shot releases its lease as it ends, waiting 2 s for it: one not released is held until its ttl
        report.add(f"nodes registered {where} whose lease was released", released, "nodes")
        details[f"verdicts {where}"] = {
            verdict: {"nodes": sum(1 for row in rows if row.verdict == verdict), "because": because}
            for verdict, because in {row.verdict: row.because for row in rows}.items()
        }
        report.add(
            f"nodes registered {where} the hub's seat calls healthy",
            healthy,
            "nodes",
            target=f"= {total}",
            met=healthy == total,
        )
    return {"registrations": details}


async def run_sites(state: Path, sizes: SitesSizes) -> tuple[Report, dict[str, Any]]:
    report = Report()
    async with running_mesh(state, sizes) as mesh, seats(mesh, state) as (hub_data, _):
        await unchanged_reconciles(mesh, hub_data, report, sizes, state)
        await with_a_secret(mesh, hub_data, report, sizes, state)
        await registry_asked(mesh, hub_data, report, sizes)
        details = await registrations(mesh, report, sizes)
    return report, {"sizes": sizes.__dict__, **details}
