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
from collections.abc import Awaitable
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import nats
import pytest

from provisioner.commands.cli import main
from provisioner.seat.server import site_of, sites_of_the_hub
from provisioner.seat.settings import ServerSettings
from provisioner.seat.site_copies import site_copies
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.access import read_sites_file
from registry.contract import NodeRow, buckets
from registry.errors import NoResponders, SettingsError
from registry.wire import Bus, answer_of, connect, get_direct, put
from tests.cluster import free_port
from tests.helpers import eventually, wait_for
from tests.prometheus import sample, samples
from tests.sites.seat_at_site import (
    ASKED,
    CONFIG,
    DELAY,
    MODES,
    NEED,
    grants,
    hub_and_site,
    registry_kinds,
    requests_answered,
    scrape,
    timed,
    with_holding,
)


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
        await wait_for(lambda: _not(mesh.data_link_up()), "the site's data link down at the hub")
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
            lambda: with_holding(registry_kinds(n1), lambda kinds: "consumers" in kinds),
            "the consumers kind at the site",
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
            lambda: with_holding(registry_kinds(n1), lambda kinds: "consumers" not in kinds),
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


async def _not(holds: Awaitable[bool]) -> bool:
    return not await holds


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
