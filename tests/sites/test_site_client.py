"""The node client at a site while its leaf link is cut, then restored: a hub and site 1 on the generated configuration
(`tests.sites.generated_hub_and_site`, the site's link through a relay the test cuts), the seat
at the hub, the site's copies of the hub's buckets made by hand, and node n1's watching client
connected to its site's server on its own key.

During a cut of about 10 s, while a value changes at the hub: the env file keeps what it held; a
manifest added at the node is materialized from the site's copy of the values; `status` says
which writes wait for the hub, since when and what answered them (the lease's renewals and the
new module's applied record: NoResponders); the watch goes on. After the link is back: the
changed value materialized once, each change action run exactly once for its change, the writes
done once (the hub buckets' last sequences grow by what changed and no more), nothing stale,
within 5 s (the figure is printed with `-s`).

Live updates a mirror sends again (after a hub restart) wake a reconcile that writes nothing and
runs no action. A hub restart (marked slow): a value changed at the hub as it comes back reaches
the site's env file once, about 20 s later (the mirror's own recovery; no entry republished twice
was seen on nats-server 2.15.1), and nothing waits for the hub after.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from mesh_dev.standins import CONFIG, stand_ins
from provisioner.commands.removal import remove_node
from provisioner_client.materializing.envfile import EnvFolder
from provisioner_client.reconcile import ClientPlan, Report
from provisioner_client.resolving import own
from provisioner_client.status import NodeStatus, read_status
from provisioner_client.status_view import status_text
from provisioner_client.watch.watching import watch
from registry.command_line import timestamp_of
from registry.contract import AppliedValue, buckets, read_json
from registry.errors import BusError
from registry.wire import SKEW, Bus, KvItem, Message, connect, get_direct, get_last_many, node_key, put
from tests.helpers import eventually, logged, serving, sh_env
from tests.sites import GeneratedSites, generated_hub_and_site
from tests.sites.client_at_site import LEASE_TTL, TIMING, last_sequences, manifest, runs_of

T = TypeVar("T")

NODE = "n1"
CUT_SECONDS = 10.0
CONVERGED_WITHIN = 5.0  # after the link returns, converged within 5 s: what a person can predict
WATCHING = "provisioner_client.watch.watching"
HOLDING = "provisioner_client.watch.holding"


async def hub_applied(seat: Bus, module: str) -> AppliedValue | None:
    item = await get_direct(seat, buckets.APPLIED, f"{NODE}.{module}")
    if item is None or item.deleted:
        return None
    return AppliedValue.model_validate(read_json(item.value))


@dataclass
class Site:
    sites: GeneratedSites
    seat: Bus
    node: Bus
    plan: ClientPlan
    runs: Path
    reports: list[Report]
    site_data: Bus

    async def seat_registry(self) -> list[KvItem]:
        """The registry's entries at the hub."""
        return await get_last_many(self.seat, buckets.REGISTRY, ">")


@asynccontextmanager
async def site_client(tmp_path: Path, *, request_timeout: float = 5.0) -> AsyncIterator[Site]:
    """The hub, site 1, the seat serving at the hub with the stand-ins' values, the site's copies,
    and n1's watching client at its site (waiting `request_timeout` seconds for each answer), once
    it has applied module `app` (greeting)."""
    async with generated_hub_and_site(tmp_path, delay=0.01) as sites:
        patience = {"request_timeout": timedelta(seconds=request_timeout)}
        node_options = sites.options(sites.site, f"node-{NODE}").model_copy(update=patience)
        seat_options = sites.options(sites.hub, "seat")
        grants = sites.out / "grants.json"
        sites_json = sites.out / "sites" / "sites.json"  # the hub's seat makes the consumers the copies take
        site_seat = sites.options(sites.site, "seat-site1").model_copy(update={"name": buckets.SEAT})
        async with (
            serving(sites.hub.url, bus_options=seat_options, grants_file=grants, providers=[], sites_file=sites_json),
            connect(seat_options) as seat,
            stand_ins(seat, NODE, with_vault=False),
            # the site's seat: its copies of the hub's buckets, and the verb answered at the site
            serving(
                sites.site.url,
                bus_options=site_seat,
                grants_file=grants,
                providers=[],
                sites_file=sites_json,
                site="site1",
            ),
            connect(sites.options(sites.site, "seat-site1")) as site_data,
            connect(node_options) as node,
        ):
            manifests, runs = tmp_path / "manifests", tmp_path / "runs"
            manifests.mkdir()
            runs.mkdir()
            (manifests / "app.json").write_text(manifest("app", {"GREETING": "${config:greeting}"}, runs / "app"))
            plan = ClientPlan(NODE, manifests, tmp_path / "env", timedelta(seconds=2), LEASE_TTL)
            reports: list[Report] = []
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: watch(node, plan, TIMING, on_report=reports.append))
                site = Site(sites, seat, node, plan, runs, reports, site_data)
                await eventually(lambda: _applied_at_hub(site, "app"), "app applied and recorded at the hub")
                yield site
                tasks.cancel_scope.cancel()


async def _applied_at_hub(site: Site, module: str) -> AppliedValue | None:
    applied = await hub_applied(site.seat, module)
    return applied if applied is not None and applied.state == "applied" else None


async def test_a_cut_link_keeps_the_env_files_says_what_is_stale_and_converges_once_after(tmp_path: Path) -> None:
    async with site_client(tmp_path) as site:
        env = site.plan.materialize
        assert sh_env(env / "app.env")["GREETING"].startswith("Hello")
        assert runs_of(site.runs / "app") == 1
        before = await last_sequences(site.seat)

        site.sites.relay.cut()
        cut_at = time.monotonic()
        await put(site.seat, CONFIG, "greeting", json.dumps("changed during the cut").encode())
        (site.plan.manifests / "local.json").write_text(
            manifest("local", {"LOG_LEVEL": "${config:log-level}"}, site.runs / "local")
        )

        # the new module is materialized from the site's copy of the values; its record waits
        local = await eventually(
            lambda: _file(env / "local.env"), "the module added during the cut materialized at the site"
        )
        assert local == {"LOG_LEVEL": "info"}
        status = await eventually(lambda: _stale(site, {"lease", buckets.APPLIED.name}, f"{NODE}.local"), "stale", 60)
        assert status.waiting is not None
        text = status_text(status)
        print(f"FIGURE status during the cut:\n{text}")
        assert (
            f"writes of the lease to the hub waiting since {timestamp_of(status.waiting.parts['lease'].since)}" in text
        )
        assert "NoResponders" in status.waiting.parts["lease"].how
        # local's record waits; app's may too, rewritten as it was when its listing was out of reach
        assert set(status.waiting.parts[buckets.APPLIED.name].keys) <= {f"{NODE}.local", f"{NODE}.app"}
        assert status.modules["local"].applied.state == "applied"  # read at the site, from the waiting record
        assert status.read_at_site is not None and not status.ok

        while time.monotonic() - cut_at < CUT_SECONDS:
            assert sh_env(env / "app.env")["GREETING"].startswith("Hello"), "the env file changed during the cut"
            await anyio.sleep(0.2)
        assert await last_sequences(site.seat) == before, "a write reached the hub during the cut"
        assert runs_of(site.runs / "app") == 1 and runs_of(site.runs / "local") == 1
        local_applied = own.read_waiting(env, NODE)
        assert local_applied is not None
        recorded = AppliedValue.model_validate(
            read_json(local_applied.applied_records(buckets.APPLIED.name)[f"{NODE}.local"])
        )

        site.sites.relay.restore()
        restored_at = time.monotonic()
        await eventually(lambda: _converged(site), "converged after the link returned", within=30)
        took = time.monotonic() - restored_at
        print(f"FIGURE converged {took:.2f} s after the link returned (cut {restored_at - cut_at:.1f} s)")
        assert took <= CONVERGED_WITHIN

        assert sh_env(env / "app.env")["GREETING"] == "changed during the cut"
        assert runs_of(site.runs / "app") == 2, "the change action ran once for the change"
        assert runs_of(site.runs / "local") == 1, "the action that ran during the cut did not run again"
        at_hub = await hub_applied(site.seat, "local")
        assert at_hub is not None and at_hub.changed_at == recorded.changed_at  # when it was applied
        after = await last_sequences(site.seat)
        assert after[buckets.APPLIED.name] == before[buckets.APPLIED.name] + 2  # app changed, local added
        assert after[buckets.NEEDS.name] == before[buckets.NEEDS.name] + 1  # local's need of log-level
        assert after[buckets.COLLECT.name] == before[buckets.COLLECT.name]

        await renewals_and_a_reconcile_went_on(site)
        assert await last_sequences(site.seat) == after, "something was written twice"
        assert runs_of(site.runs / "app") == 2 and runs_of(site.runs / "local") == 1


async def renewals_and_a_reconcile_went_on(site: Site) -> None:
    """The barrier before "nothing was written twice" is judged: two renewals of the node's lease
    stored at the hub, then a reconcile begun after them finished."""
    seen = {await _lease_revision(site)}

    async def renewed_twice() -> bool | None:
        seen.add(await _lease_revision(site))
        return True if len(seen) > 2 else None

    await eventually(renewed_twice, "two renewals of the lease stored at the hub")
    reconciled = len(site.reports)
    await eventually(lambda: _reconciled_since(site, reconciled), "a reconcile begun after them", every=0.2)


async def _lease_revision(site: Site) -> int:
    lease = await get_direct(site.seat, buckets.LEASES, node_key(NODE))
    assert lease is not None, "the node's lease is not at the hub"
    return lease.revision


async def _reconciled_since(site: Site, reports: int) -> bool | None:
    """Whether a reconcile begun after the first `reports` finished (the one under way then ends
    first); until one has, another is asked for by touching the app's manifest, unchanged."""
    if len(site.reports) > reports + 1:
        return True
    os.utime(site.plan.manifests / "app.json")
    return None


async def _file(path: Path) -> dict[str, str] | None:
    return sh_env(path) if await anyio.Path(path).exists() else None


async def _stale(site: Site, parts: set[str], applied: str | None = None) -> NodeStatus | None:
    """Status once it says these parts wait (and, given, that record among the applied waiting)."""
    try:
        status = await read_status(site.node, NODE, site.plan.materialize)
    except BusError:  # the verb out of reach before the client's own writes told it the link is down
        return None
    if status.waiting is None or not parts <= set(status.waiting.parts):
        return None
    held = status.waiting.parts.get(buckets.APPLIED.name)
    return status if applied is None or (held is not None and applied in held.keys) else None


async def _converged(site: Site) -> bool | None:
    """The changed value in the env file, both modules' records at the hub as applied, nothing waiting."""
    env = site.plan.materialize
    if sh_env(env / "app.env")["GREETING"] != "changed during the cut":
        return None
    if own.read_waiting(env, NODE) is not None:
        return None
    status = await read_status(site.node, NODE, env)
    if not status.ok or status.read_at_site is not None:
        return None
    app, local = await hub_applied(site.seat, "app"), await hub_applied(site.seat, "local")
    if app is None or local is None or app.digest != status.modules["app"].applied.digest:
        return None
    return True


async def test_a_stalled_link_times_the_writes_out_and_what_was_stored_late_is_not_written_again(
    tmp_path: Path,
) -> None:
    """The link stalled (no byte carried, nothing closed) for 8 s while a module is added at the
    node: its writes time out (2 s here) and wait, said so by status; held by the relay, some are
    stored when it flows again. Then: converged once, each write stored once (the retry of a write
    stored late finds it there), the change action run once."""
    async with site_client(tmp_path, request_timeout=2.0) as site:
        before = await last_sequences(site.seat)
        site.sites.relay.stall()
        stalled_at = time.monotonic()
        (site.plan.manifests / "local.json").write_text(
            manifest("local", {"LOG_LEVEL": "${config:log-level}"}, site.runs / "local")
        )
        status = await eventually(lambda: _stale(site, {"lease"}), "status saying the lease's renewals wait")
        assert status.waiting is not None and "timed out" in status.waiting.parts["lease"].how
        local = await eventually(lambda: _file(site.plan.materialize / "local.env"), "local materialized at the site")
        assert local == {"LOG_LEVEL": "info"}
        await anyio.sleep(max(0.0, 8.0 - (time.monotonic() - stalled_at)))
        site.sites.relay.restore()
        restored_at = time.monotonic()
        await eventually(lambda: _registered(site, "local"), "converged after the link flowed again", within=30)
        print(f"FIGURE converged {time.monotonic() - restored_at:.2f} s after a stalled link flowed again")
        after = await last_sequences(site.seat)
        assert after[buckets.APPLIED.name] == before[buckets.APPLIED.name] + 1
        assert after[buckets.NEEDS.name] == before[buckets.NEEDS.name] + 1
        assert after[buckets.COLLECT.name] == before[buckets.COLLECT.name]
        await renewals_and_a_reconcile_went_on(site)
        assert await last_sequences(site.seat) == after, "something was written twice"
        assert runs_of(site.runs / "local") == 1


async def _registered(site: Site, module: str) -> bool | None:
    """`module` applied at the hub and nothing waiting for it."""
    if own.read_waiting(site.plan.materialize, NODE) is not None:
        return None
    return True if await _applied_at_hub(site, module) is not None else None


async def test_a_lease_removed_during_the_cut_is_found_lost_once_the_link_is_back(tmp_path: Path) -> None:
    """remove-node at the hub during the cut (the lease expired there: no --force needed): once the
    link is back, the renewal (tried before the reconcile's writes) raises `LeaseLost`, and the
    watch goes on as it does at the hub: it waits for the lease, free since the removal, takes it
    again and registers again; the change action that ran during the cut does not run again."""
    async with site_client(tmp_path) as site:
        site.sites.relay.cut()
        cut_at = time.monotonic()
        (site.plan.manifests / "local.json").write_text(
            manifest("local", {"LOG_LEVEL": "${config:log-level}"}, site.runs / "local")
        )
        await eventually(lambda: _stale(site, {"lease", buckets.APPLIED.name}), "the lease and local's record wait")
        await anyio.sleep(max(0.0, (LEASE_TTL + SKEW).total_seconds() + 1 - (time.monotonic() - cut_at)))
        removed = await remove_node(site.seat, NODE)
        assert buckets.LEASES.name in removed
        with logged(f"lease {node_key(NODE)} was lost", HOLDING) as lost:
            site.sites.relay.restore()
            await lost.wait(within=20)
        await eventually(lambda: _applied_at_hub(site, "local"), "the client registered again, as at the hub")
        await eventually(lambda: _nothing_waits(site), "nothing waits for the hub")
        assert runs_of(site.runs / "local") == 1


async def test_live_updates_a_mirror_republishes_again_change_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a hub restart a site's mirror may republish entries it had sent already (NATS-NOTES,
    "Across sites"). Sent here by the site's data account on the live subjects the mirror
    republishes to, as the mirror would: each wakes the watch, whose reconcile is idempotent, so
    nothing is written at the hub and no change action runs again."""
    async with site_client(tmp_path) as site:
        await eventually(lambda: _registered(site, "app"), "app applied at the hub, nothing waiting")
        # the first reconciles' writes are done once one of them finds nothing to write
        await eventually(lambda: _an_idle_reconcile(site), "a reconcile with nothing to do", every=0.5)
        before, runs, reports = await last_sequences(site.seat), runs_of(site.runs / "app"), len(site.reports)
        entries = [item for item in await site.seat_registry() if not item.deleted]
        assert entries
        caplog.set_level(logging.DEBUG, logger=WATCHING)
        with logged(f"{buckets.REGISTRY.name} config", WATCHING) as woken_by_config:
            for item in entries:  # the same message again, on the subject the mirror republishes it to
                await site.site_data.publish(buckets.REGISTRY.live_subject(item.key), item.value)
            await site.site_data.flush()  # each on its way to the node before the honest change below
            await woken_by_config.wait(within=20)
        await eventually(lambda: _some(site.reports[reports:]), "a reconcile woken by the duplicates")
        # the barrier: an honest change, reaching the node after the duplicates; once its action
        # ran, every reconcile they woke is done
        await put(site.seat, CONFIG, "greeting", json.dumps("changed after the duplicates").encode())
        honest = await eventually(
            lambda: _action_ran_for(site, "changed after the duplicates"), "the honest change's action"
        )
        one_write = before | {buckets.APPLIED.name: before[buckets.APPLIED.name] + 1}  # the honest change's
        assert await last_sequences(site.seat) == one_write, "a duplicate made a write"
        assert runs_of(site.runs / "app") == runs + 1, "a duplicate ran a change action"
        woken = [report for report in site.reports[reports:] if report is not honest]
        print(f"FIGURE {len(entries)} registry entries republished again woke {len(woken)} reconciles")
        assert all(_idle(report) for report in woken)


async def _an_idle_reconcile(site: Site) -> bool | None:
    """Whether a reconcile found nothing to write; until one has, another is asked for by touching
    the app's manifest, unchanged (the watch polls the manifests: nothing else need wake it)."""
    if any(_idle(report) for report in site.reports):
        return True
    os.utime(site.plan.manifests / "app.json")
    return None


def _idle(report: Report) -> bool:
    return not any(report.writes.values()) and not report.actions_run


async def _some(found: list[T]) -> bool | None:
    return True if found else None


@pytest.mark.slow
async def test_after_a_hub_restart_the_client_converges_again(tmp_path: Path) -> None:
    """A hub restarted: the lease's renewals and the writes wait while it is down, then are written
    again; a value changed after it is back reaches the env file once."""
    async with site_client(tmp_path) as site:
        runs = runs_of(site.runs / "app")
        heard: list[str] = []

        async def on_live(msg: Message) -> None:  # the registry does not change: any is a duplicate
            heard.append(msg.subject)

        await site.node.subscribe(buckets.REGISTRY.subject(">"), on_live)
        await site.node.flush()
        await site.sites.restart_hub()
        restarted = time.monotonic()
        await eventually(lambda: _put_greeting(site, "changed after the restart"), "the seat connected again")
        await eventually(lambda: _greeting(site, "changed after the restart"), "the change at the site", within=120)
        took = time.monotonic() - restarted
        print(f"FIGURE a change made at the hub's restart materialized at the site {took:.1f} s after it")
        await eventually(lambda: _nothing_waits(site), "nothing waits for the hub", within=60)
        print(f"FIGURE nothing waits for the hub {time.monotonic() - restarted:.1f} s after the hub's restart")
        # the env file is written before its change action runs: the action's run is waited for
        await eventually(lambda: _ran(site, "app", runs + 1), "the change action run for the change")
        # the barrier: a later change's action run; a node applies changes in order
        await put(site.seat, CONFIG, "greeting", json.dumps("changed once more").encode())
        await eventually(lambda: _action_ran_for(site, "changed once more"), "the later change's action")
        assert runs_of(site.runs / "app") == runs + 2, "the change action ran more than once for one change"
        print(f"FIGURE registry entries republished again after the hub's restart: {len(heard)}")


async def _action_ran_for(site: Site, greeting: str) -> Report | None:
    """The report of the reconcile that ran the app's change action for its env file holding `greeting`."""
    if sh_env(site.plan.materialize / "app.env")["GREETING"] != greeting:
        return None
    digest = EnvFolder(site.plan.materialize).digest_on_disk("app")
    for report in site.reports:
        done = report.modules.get("app")
        action = done.action if done is not None and "app" in report.actions_run else None
        if action is not None and action.digest == digest:
            return report
    return None


async def _ran(site: Site, module: str, times: int) -> bool | None:
    return True if runs_of(site.runs / module) >= times else None


async def _put_greeting(site: Site, value: str) -> bool | None:
    try:
        await put(site.seat, CONFIG, "greeting", json.dumps(value).encode())
    except BusError:
        return None
    return True


async def _nothing_waits(site: Site) -> bool | None:
    return True if own.read_waiting(site.plan.materialize, NODE) is None else None


async def _greeting(site: Site, value: str) -> bool | None:
    return True if sh_env(site.plan.materialize / "app.env")["GREETING"] == value else None
