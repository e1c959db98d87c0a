"""The seat at a site (`mesh-provisioner serve --site`), on real servers started from exactly what
`mesh-provisioner grants --mesh` wrote: a hub and site 1 (node n1 lives there, n3 at the hub),
the site dialling the hub through a relay that adds 20 ms each way and that the test cuts.

What it shows (static accounts, and JWT for the main test): the site's seat makes the site's
copies from sites.json and serves its metrics from them; n1's `what=registry` and
`what=needs` are answered by the site's seat (the site's `$SRV.STATS` counts them, the hub's does
not) from the copies, and still are with the hub's seat stopped and with the link cut; a registry
compile and a shared config write at the hub reach the site's copies and n1's live updates there.
Run with `-s` for the figures (`FIGURE ...`): what=registry at the site against at the hub.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import nats
import pytest
from anyio.abc import TaskGroup, TaskStatus

from mesh_dev.local_nats import LocalNats
from provisioner.commands.cli import main
from provisioner.seat.server import run_server, site_of, sites_of_the_hub
from provisioner.seat.site_copies import site_copies
from provisioner.settings import ServerSettings
from provisioner.verb.service import ENDPOINT
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.access import account_key, creds_path, read_sites_file
from registry.contract import Bucket, NodeRow, buckets
from registry.errors import NoResponders, SettingsError
from registry.wire import Bus, BusOptions, answer_of, connect, get_direct, put
from tests.cluster import free_port
from tests.helpers import eventually
from tests.prometheus import sample, samples
from tests.sites import Relay
from tests.sites.test_sites_topology import leafz, server

T = TypeVar("T")

DELAY = 0.020  # seconds each way through the relay: the WAN
MESH = """\
nodes = ["n1", "n3"]
operators = ["ops"]
[providers.postgres]
machines = ["n1"]
[hub]
leafnodes = ["nats-leaf://127.0.0.1:{relay}"]
listen = "127.0.0.1:{leaf}"
[sites.site1]
nodes = ["n1"]
"""
NEED = b'{"placeholder":"${secret:db}","used_in":["app.env"]}'
CONFIG = Bucket("mesh-config_values", buckets.NEEDS.shape)
DROPPING_CONSUMERS = '[domains.vault-consumers]\nmodule = "mesh-vault"\nkinds = []\nverb = "mesh-vault.consumers"\n'
ASKED = 40  # requests timed for each figure
MODES = [pytest.param(False, id="static accounts"), pytest.param(True, id="decentralized JWT accounts")]


class Seat:
    """A seat (`run_server`) run by a task of the test's, stopped when the test says."""

    def __init__(self, options: BusOptions, settings: ServerSettings) -> None:
        self.options, self.settings = options, settings
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        self.started = False

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        self.started = True
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        try:
            await run_server(bus_options=self.options, settings=self.settings, stop=self._stop, task_status=task_status)
        finally:
            self._stopped.set()

    async def stop(self) -> None:
        self._stop.set()
        if self.started:
            await self._stopped.wait()


@dataclass
class Mesh:
    out: Path
    keys: Path
    hub: LocalNats
    site: LocalNats
    relay: Relay
    hub_seat: Seat
    site_seat: Seat
    tasks: TaskGroup
    jwt: bool

    def options(self, running: LocalNats, label: str) -> BusOptions:
        return connecting(running, label, self.keys, jwt=self.jwt)


def grants(root: Path, relay: int, leaf: int, *, jwt: bool = False, domains: str = "") -> tuple[Path, Path]:
    """The grants of `MESH`, with a domains file of `domains` if given (beside the mesh file)."""
    mesh = root / "mesh.toml"
    named = ""
    if domains:
        (root / "domains.toml").write_text(domains)
        named = 'domains_file = "domains.toml"\n'
    mesh.write_text(named + MESH.format(relay=relay, leaf=leaf))
    out, keys = root / "out", root / "keys"
    jwt_flag = ["--jwt"] if jwt else []
    assert main(["grants", "--mesh", str(mesh), "--out", str(out), "--keys", str(keys), *jwt_flag]) == 0
    return out, keys


def connecting(running: LocalNats, label: str, keys: Path, *, jwt: bool, name: str | None = None) -> BusOptions:
    """How party `label` connects to `running`: with its seed, or its `.creds` (JWT)."""
    if jwt:
        return BusOptions(servers=(running.url,), name=name or label, creds=creds_path(keys, label))
    return BusOptions(servers=(running.url,), name=name or label, nkey_seed=keys / f"{label}.nk")


def seat_settings(out: Path, **more: Any) -> ServerSettings:
    return ServerSettings(grants_file=out / "grants.json", providers=["postgres"], **more)


@asynccontextmanager
async def hub_and_site(
    root: Path,
    *,
    jwt: bool = False,
    start_site_seat: bool = True,
    hub_settings: dict[str, Any] | None = None,
    domains: str = "",
    **site_settings: Any,
) -> AsyncIterator[Mesh]:
    """The hub and site 1 on their generated files (with a domains file of `domains`, if given, to
    the grants and both seats), the site's link through the relay, the hub's seat running and
    (unless told) the site's."""
    leaf, monitor = free_port(), free_port()
    relay = Relay(leaf, DELAY)
    out, keys = grants(root, relay.port, leaf, jwt=jwt, domains=domains)
    if domains:
        hub_settings = {"domains_file": root / "domains.toml", **(hub_settings or {})}
        site_settings = {"domains_file": root / "domains.toml", **site_settings}
    async with anyio.create_task_group() as tasks:
        async with AsyncExitStack() as servers:
            hub = await servers.enter_async_context(server(out, root, "hub", jwt=jwt, monitor=monitor))
            await tasks.start(relay.serve)  # before the site dials it: a failed dial is an error line at its start
            site = await servers.enter_async_context(server(out, root, "site1", jwt=jwt))
            # The link up first: a copy made while it is down starts about 40 s after it comes up
            # (nats-server's retry of a mirror's setup), which would only slow the test down.
            data = "site-site1"  # the site's own account at the hub, where its links bind
            if jwt:  # the account's public key
                data = account_key(keys, data).public_key

            def data_link(up: list[dict[str, Any]]) -> bool:
                return any(link["account"] == data for link in up)

            await eventually(
                lambda: _with(anyio.to_thread.run_sync(leafz, monitor), data_link), "the site's data link up"
            )
            site_file = out / "sites" / "sites.json"
            hub_seat = Seat(  # the hub of the sites of sites.json: it makes the consumers their copies take
                connecting(hub, "seat", keys, jwt=jwt, name=buckets.SEAT),
                seat_settings(out, sites_file=site_file, **(hub_settings or {})),
            )
            site_seat = Seat(
                connecting(site, "seat-site1", keys, jwt=jwt, name=buckets.SEAT),
                seat_settings(out, site="site1", sites_file=site_file, **site_settings),
            )
            mesh = Mesh(out, keys, hub, site, relay, hub_seat, site_seat, tasks, jwt)
            await tasks.start(hub_seat.run)
            if start_site_seat:
                await tasks.start(site_seat.run)
            try:
                yield mesh
            finally:
                await site_seat.stop()
                await hub_seat.stop()
        tasks.cancel_scope.cancel()  # the relay


async def registry_kinds(node: Bus) -> set[str]:
    answer = (await answer_of(node, {"what": "registry"})).document()
    return {str(entry["kind"]) for entry in answer["entries"]}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:  # loopback
        text: str = answer.read().decode()
        return text


async def requests_answered(bus: Bus) -> int:
    """How many verb requests the seat serving on `bus`'s server answered (`$SRV.STATS`): the
    `$SRV` subjects never cross the link, so each side's seat is asked alone."""
    reply = await bus.request(f"$SRV.STATS.{buckets.SEAT}", b"", operation="stats")
    stats = json.loads(reply.data)
    return sum(int(e["num_requests"]) for e in stats["endpoints"] if e["name"] == ENDPOINT)


async def timed(node: Bus, count: int = ASKED) -> float:
    """The median milliseconds of `what=registry` asked by `node`."""
    took = []
    for _ in range(count):
        started = time.perf_counter()
        await answer_of(node, {"what": "registry"})
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


@pytest.mark.parametrize("jwt", MODES)
async def test_the_site_seat_answers_the_site_node_from_the_copies_even_with_the_link_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, jwt: bool
) -> None:
    caplog.set_level(logging.INFO, logger="provisioner.seat")
    metrics = free_port()
    async with hub_and_site(tmp_path, jwt=jwt, metrics_listen=str(metrics)) as mesh, AsyncExitStack() as stack:
        n1 = await stack.enter_async_context(connect(mesh.options(mesh.site, "node-n1")))
        n3 = await stack.enter_async_context(connect(mesh.options(mesh.hub, "node-n3")))
        site_data = await stack.enter_async_context(connect(mesh.options(mesh.site, "seat-site1")))
        hub_data = await stack.enter_async_context(connect(mesh.options(mesh.hub, "seat")))
        at_the_hub = await registry_kinds(n3)
        assert "secret" in at_the_hub

        # the site's registry mirror catches up with the hub's compile (once the link is up)
        async def site_registry() -> set[str] | None:
            kinds = await registry_kinds(n1)
            return kinds if kinds == at_the_hub else None

        await eventually(site_registry, "the site's copy of the registry")
        scraped = samples(await anyio.to_thread.run_sync(scrape, metrics))  # the site's figures: its copies
        assert sample(scraped, "mesh_seat_bucket_keys", bucket=buckets.REGISTRY.name) == len(at_the_hub)
        site_before, hub_before = await requests_answered(site_data), await requests_answered(hub_data)
        # both seats serve the verb in one queue group: nats-server picks the member on n1's server
        for _ in range(ASKED):
            assert await registry_kinds(n1) == at_the_hub
        assert await requests_answered(site_data) - site_before >= ASKED
        assert await requests_answered(hub_data) == hub_before  # none of n1's crossed the link

        # n1 writes at the hub (fail fast) and lists its needs at its site, from the site's mirror
        assert await put(n1, buckets.NEEDS, "n1.app.secret.db", NEED) > 0

        async def n1_needs() -> list[dict[str, Any]] | None:
            answer = (await answer_of(n1, {"what": "needs", "node": "n1"})).document()
            entries: list[dict[str, Any]] = answer["entries"]
            return entries or None

        assert [(e["node"], e["module"]) for e in await eventually(n1_needs, "n1's needs answered at its site")] == [
            ("n1", "app")
        ]
        assert await requests_answered(hub_data) == hub_before

        figures = {"site": await timed(n1), "hub": await timed(n3)}

        await mesh.hub_seat.stop()  # the hub's seat gone: n1 is still answered at its site
        assert await registry_kinds(n1) == at_the_hub

        mesh.relay.cut()  # the link cut: still answered, from the copies
        await anyio.sleep(0.5)
        assert await registry_kinds(n1) == at_the_hub
        assert [e["module"] for e in await eventually(n1_needs, "n1's needs answered at its site")] == ["app"]
        figures["site, link cut"] = await timed(n1, 10)

        await mesh.site_seat.stop()  # the site's seat restarted during the cut: its copies are checked here
        await mesh.tasks.start(mesh.site_seat.run)
        assert (
            await eventually(lambda: _answered(registry_kinds(n1)), "the registry answered at the site") == at_the_hub
        )

    print(f"FIGURE what=registry median over {ASKED}, relay {DELAY * 1000:.0f} ms each way: ", end="")
    print(", ".join(f"{where} {ms:.2f} ms" for where, ms in figures.items()))
    made = [r.getMessage() for r in caplog.records if r.name == "provisioner.seat.site_copies"]
    assert any("site copy KV_mesh-provisioner_registry created" in line for line in made)
    assert not [r for r in caplog.records if r.name.startswith("provisioner.seat") and r.levelno >= logging.ERROR]


async def test_without_the_site_seat_nobody_answers_the_verb_and_it_never_crosses(tmp_path: Path) -> None:
    """The verb does not cross the link (registry.access.sites.accounts): a site's node is answered
    by its site's seat alone, and without it is told nobody answers; the hub's seat is never asked."""
    async with hub_and_site(tmp_path, start_site_seat=False) as mesh, AsyncExitStack() as stack:
        n1 = await stack.enter_async_context(connect(mesh.options(mesh.site, "node-n1")))
        hub_data = await stack.enter_async_context(connect(mesh.options(mesh.hub, "seat")))
        before = await requests_answered(hub_data)
        for _ in range(3):
            with pytest.raises(NoResponders):
                await registry_kinds(n1)
        assert await requests_answered(hub_data) == before


async def test_a_change_at_the_hub_reaches_the_site_copies_and_live_updates(tmp_path: Path) -> None:
    async with hub_and_site(tmp_path) as mesh, AsyncExitStack() as stack:
        n1 = await stack.enter_async_context(connect(mesh.options(mesh.site, "node-n1")))
        hub_data = await stack.enter_async_context(connect(mesh.options(mesh.hub, "seat")))
        await eventually(
            lambda: _with(registry_kinds(n1), lambda kinds: "consumers" in kinds), "the consumers kind at the site"
        )
        watcher = await nats.connect(mesh.site.url, nkeys_seed=str(mesh.keys / "node-n1.nk"))
        stack.push_async_callback(watcher.close)
        live = await watcher.subscribe(buckets.REGISTRY.subject(">"))
        config_live = await watcher.subscribe(CONFIG.subject(">"))
        await watcher.flush()

        # a compile at the hub dropping a kind: its delete marker reaches the site and n1's watch
        domains = tmp_path / "domains.toml"
        domains.write_text(
            '[domains.vault-consumers]\nmodule = "mesh-vault"\nkinds = []\nverb = "mesh-vault.consumers"\n'
        )
        from provisioner.seat.registry_sync import sync_registry  # noqa: PLC0415

        assert (await sync_registry(hub_data, domains_file=domains)).deleted
        with anyio.fail_after(10):
            async for msg in live.messages:
                if msg.subject == buckets.REGISTRY.subject("consumers"):
                    break
        await eventually(
            lambda: _with(registry_kinds(n1), lambda kinds: "consumers" not in kinds),
            "the consumers kind gone at the site",
        )

        # a shared config write at the hub: at the site's mirror and on n1's live updates
        await put(hub_data, CONFIG, "db=3Aurl", b'"postgres://db"')
        msg = await config_live.next_msg(timeout=10)
        assert (msg.subject, msg.data) == (CONFIG.subject("db=3Aurl"), b'"postgres://db"')
        got = await get_direct(n1, CONFIG, "db=3Aurl")
        assert got is not None and got.value == b'"postgres://db"'


async def test_a_shared_collection_is_read_and_followed_at_the_site(tmp_path: Path) -> None:
    """n3 (at the hub) contributes to a collection the domains file shares: n1, at the site, is
    answered it by the site's seat, hears the write live from the site's mirror, and resolves it;
    n3's contribution to a collection not shared it is neither answered nor sent."""
    shared = "ssh-known-hosts"
    async with (
        hub_and_site(tmp_path, domains=f'[collections]\nshared = ["{shared}"]\n') as mesh,
        AsyncExitStack() as stack,
    ):
        n1 = await stack.enter_async_context(connect(mesh.options(mesh.site, "node-n1")))
        n3 = await stack.enter_async_context(connect(mesh.options(mesh.hub, "node-n3")))
        watcher = await nats.connect(mesh.site.url, nkeys_seed=str(mesh.keys / "node-n1.nk"))
        stack.push_async_callback(watcher.close)
        live = await watcher.subscribe(buckets.COLLECT.live_subject(">"))
        await watcher.flush()

        await put(n3, buckets.COLLECT, "n3.other.tools", b'{"items":["not shared"]}')
        await put(n3, buckets.COLLECT, f"n3.{shared}.tools", b'{"items":["n3 ssh-ed25519 KEY"]}')
        msg = await live.next_msg(timeout=20)
        assert msg.subject == buckets.COLLECT.live_subject(f"n3.{shared}.tools")  # not n3.other's, sent first

        async def contributors() -> set[str] | None:
            answer = await answer_of(n1, {"what": "collect", "collection": shared})
            return {row.key for row in answer.entries if not isinstance(row, NodeRow)} or None

        assert await eventually(contributors, "the contributors listed at the site") == {f"n3.{shared}.tools"}
        assert not (await answer_of(n1, {"what": "collect", "collection": "other"})).entries

        manifests = tmp_path / "manifests"
        manifests.mkdir()
        (manifests / "hosts.json").write_text(
            json.dumps({"module": "hosts", "env": {"KNOWN": f"${{collected:{shared}}}"}})
        )
        plan = ClientPlan("n1", manifests, tmp_path / "env", timedelta(seconds=5))
        report = await reconcile(n1, plan)
        assert report.ok, report
        assert "n3 ssh-ed25519 KEY" in (tmp_path / "env" / "hosts.env").read_text()


async def test_the_hubs_quota_purge_is_followed_by_the_sites_mirror(tmp_path: Path) -> None:
    """n1 passes its quota: the hub's guard purges its keys there, and the site's seat purges the
    same messages from its mirror (a purge is no message: the mirror alone would keep them)."""
    quota = {"node_quota_keys": 5, "node_quota_bytes": 1 << 20}
    async with hub_and_site(tmp_path, hub_settings=quota) as mesh, AsyncExitStack() as stack:
        n1 = await stack.enter_async_context(connect(mesh.options(mesh.site, "node-n1")))
        hub_data = await stack.enter_async_context(connect(mesh.options(mesh.hub, "seat")))
        site_data = await stack.enter_async_context(connect(mesh.options(mesh.site, "seat-site1")))
        for index in range(8):
            await put(n1, buckets.NEEDS, f"n1.m{index}.secret.db", NEED)

        async def purged_at(bus: Bus) -> bool | None:
            return True if await get_direct(bus, buckets.NEEDS, "n1.m0.secret.db") is None else None

        await eventually(lambda: purged_at(hub_data), "the purge at the hub")
        await eventually(
            lambda: purged_at(n1), "the purge at the site"
        )  # n1 reads at its site: its keys are gone there too

        async def alike() -> bool | None:
            """Both streams hold as many messages, once the mirror has the hub's last (writes after the
            first purge cross the link after it)."""
            hub = (await hub_data.jetstream(buckets.NEEDS.info_api, operation="hub's needs"))["state"]
            site = (await site_data.jetstream(buckets.NEEDS.info_api, operation="site's needs"))["state"]
            if site["last_seq"] < hub["last_seq"]:
                return None
            return site["messages"] == hub["messages"] or None

        assert await eventually(alike, "both ends alike")


async def test_a_copy_deleted_at_the_site_is_made_again_whole(tmp_path: Path) -> None:
    """The copy takes the hub's durable consumer, which its deleted predecessor had acknowledged to
    the end: the site's seat rewinds it before making the copy, so every key comes back."""
    async with hub_and_site(tmp_path) as mesh, AsyncExitStack() as stack:
        hub_data = await stack.enter_async_context(connect(mesh.options(mesh.hub, "seat")))
        site_data = await stack.enter_async_context(connect(mesh.options(mesh.site, "seat-site1")))
        for index in range(5):
            await put(hub_data, CONFIG, f"key{index}", b'"value"')

        async def site_holds(count: int) -> bool | None:
            info = await site_data.jetstream(CONFIG.info_api, operation="site's config")
            return True if info["state"]["messages"] == count else None

        await eventually(lambda: site_holds(5), "the site's copy holding 5")

        async def acknowledged() -> bool | None:  # by the copy's flow control, at the hub
            api = f"CONSUMER.INFO.{CONFIG.stream}.site-site1"
            info = await hub_data.jetstream(api, operation="the hub's consumer of site1's copy")
            return True if info["ack_floor"]["stream_seq"] == 5 else None

        await eventually(acknowledged, "the write acknowledged")
        await mesh.site_seat.stop()
        await site_data.jetstream(f"STREAM.DELETE.{CONFIG.stream}", operation="an operator deletes the copy")
        await mesh.tasks.start(mesh.site_seat.run)
        await eventually(lambda: site_holds(5), "the site's copy holding 5")
        first = await get_direct(site_data, CONFIG, "key0")
        assert first is not None and first.value == b'"value"'


async def _answered(ask: Awaitable[set[str]]) -> set[str] | None:
    try:
        return await ask
    except NoResponders:
        return None


async def _with(ask: Awaitable[T], holds: Callable[[T], bool]) -> T | None:
    found = await ask
    return found if holds(found) else None


def test_serve_help_says_how_to_run_at_a_site(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    said = capsys.readouterr().out
    assert "--site SITE" in said and "--sites-file PATH" in said
    assert "it compiles nothing, runs no quota guard, writes nothing at the hub" in said


def test_a_site_the_file_does_not_name_is_a_settings_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = grants(tmp_path, free_port(), free_port())
    sites = str(out / "sites" / "sites.json")
    grants_file = str(out / "grants.json")
    asked = ["serve", "--site", "nowhere", "--sites-file", sites, "--grants-file", grants_file]
    code = main([*asked, "--nats-url", "nats://127.0.0.1:1"])
    assert code == 2
    assert "site (--site, MESH_PROVISIONER_SITE): 'nowhere' is not a site of" in capsys.readouterr().err
    with pytest.raises(SettingsError, match="--site"):
        ServerSettings(site="site1")
    hub = ServerSettings(sites_file=Path(sites))  # no site: the hub's seat, making the sites' consumers
    topology = sites_of_the_hub(hub)
    assert site_of(hub) is None and topology is not None and topology.site("site1") is not None
    with pytest.raises(SettingsError, match="--site: needs --grants-file"):
        ServerSettings(site="site1", sites_file=Path(sites))
    (tmp_path / "other.json").write_text('{"version": 2, "hub": {}, "sites": []}')
    with pytest.raises(SettingsError, match=r"sites_file .*other\.json is not a sites\.json .*version"):
        site_of(ServerSettings(site="site1", sites_file=tmp_path / "other.json", grants_file=Path(grants_file)))
    with pytest.raises(SettingsError, match=r"sites_file .*other\.json is not a sites\.json"):
        sites_of_the_hub(ServerSettings(sites_file=tmp_path / "other.json"))


def test_the_copies_are_those_the_data_link_permits(tmp_path: Path) -> None:
    """Every copy the site's seat makes resets a consumer of the hub's that the data link permits it
    to reset and whose deliveries it permits, every reset the link permits is a copy the seat makes,
    and the link permits no consumer create: a site takes the consumers the hub's seat made."""
    from provisioner.seat.site_consumers import wanted_consumers  # noqa: PLC0415
    from provisioner.seat.site_copies import consumer_resets  # noqa: PLC0415

    out, _ = grants(tmp_path, free_port(), free_port())
    topology = read_sites_file(out / "sites" / "sites.json")
    site = topology.site("site1")
    assert site is not None and site.data_link is not None
    copies = site_copies(site, ["postgres"])
    made = {subject for copy in copies for subject in consumer_resets(copy, topology.hub.domain)}
    permitted = {p.subject for p in site.data_link.publish if ".CONSUMER." in p.subject}
    assert made == permitted
    assert not [p for p in site.data_link.publish if ".CONSUMER.CREATE." in p.subject]
    delivered = {c.delivery for copy in copies for c in copy.consumers}
    assert delivered <= {p.subject for p in site.data_link.subscribe}
    assert not [p for p in site.data_link.subscribe if p.subject in ("$JS.M.>", "$JS.S.>")]
    # the hub's seat makes exactly the consumers the site's copies take
    at_the_hub = wanted_consumers(topology, ["postgres"])
    assert {(c.bucket.stream, c.name) for copy in copies for c in copy.consumers} == set(at_the_hub)
    assert ("KV_postgres_bound", "site-site1-n1") in at_the_hub
    assert at_the_hub[("KV_postgres_bound", "site-site1-n1")].filter == "$KV.postgres_bound.n1.>"
    kinds = {copy.bucket.name: (copy.kind, copy.live) for copy in copies}
    assert kinds[buckets.REGISTRY.name] == ("mirror", True)
    assert kinds[buckets.NEEDS.name] == ("mirror", False)
    assert kinds["postgres_bound"] == ("sources", True)
    assert kinds["mesh-config_values"] == ("mirror", True)
