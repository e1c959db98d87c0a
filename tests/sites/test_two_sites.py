"""Two sites, one long cut: a hub and two sites on loopback from the
generated configuration (`tests.sites.generated_hub_and_two_sites`), each site's leaf link
through a relay of its own, the hub's seat (the sites' consumers) and each site's seat
(`serve --site`: its copies) running, and a watching client at each site: n1 at site 1, n2 at
site 2, each with module `app` reading the shared `${config:greeting}` and a change action that
counts its runs.

What it shows, in order: both env files resolved; a change at the hub reaching both (each action
run once more); site 1's link cut for 30 s while the value changes at the hub: site 2's env file
gets it (its action run once), site 1's env file keeps what it held all through the cut and its
status says its writes wait for the hub; after the link is back: converged within 5 s (the
figure is printed with `-s`), site 1's action run exactly once for the change, no key of either
node lost at the hub, the hub's buckets grown only by what changed, nothing written again in the
seconds after.

Why 30 s is the long cut: within it site 1's copies stall (no heartbeat of the hub's consumer for
10 s), nats-server's reset of their consumer is sent into the cut and lost (it waits 5 s for the
answer) and the next waits on its backoff, so only the product's own path (the reset when the
consumer's heartbeat is heard again, the site seat's resend) converges site 1 within 5 s, as after
a 60 s cut. A longer cut only lengthens nats-server's backoff, which that path does not wait for:
site 1 converged in 0.45 to 0.79 s after 60 s (5 runs), the copies alone were current 0.9 s after
60 s (`tests/sites/test_site_resume.py`, whose long cut is 30 s for the same reason).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest

from mesh_dev.standins import CONFIG, stand_ins
from provisioner_client.reconcile import ClientPlan
from provisioner_client.resolving import own
from provisioner_client.status import NodeStatus, read_status
from provisioner_client.status_view import status_text
from provisioner_client.watch.watching import watch
from registry.command_line import timestamp_of
from registry.contract import AppliedValue, Bucket, buckets, read_json
from registry.errors import BusError
from registry.wire import Bus, Message, connect, get_direct, get_last_many, node_key, put
from tests.helpers import eventually, serving, sh_env
from tests.sites import SITE, SITE2, GeneratedTwoSites, generated_hub_and_two_sites
from tests.sites.client_at_site import LEASE_TTL, TIMING, last_sequences, manifest, runs_of

CUT_SECONDS = 30.0  # past the copies' stall (10 s) and their lost reset's wait (5 s): see above
CONVERGED_WITHIN = 5.0  # after the link returns, converged within 5 s
NODES = {SITE: "n1", SITE2: "n2"}
KEPT: tuple[Bucket, ...] = (buckets.NEEDS, buckets.APPLIED)  # a node's keys at the hub, none to be lost
FIRST, SECOND, DURING = "Hello", "changed at the hub", "changed during the cut"


@dataclass
class Client:
    """A node's watching client at its site."""

    node: str
    bus: Bus
    plan: ClientPlan
    runs: Path

    def greeting(self) -> str:
        return sh_env(self.plan.materialize / "app.env")["GREETING"]

    def actions(self) -> int:
        return runs_of(self.runs)


@asynccontextmanager
async def two_sites(tmp_path: Path) -> AsyncIterator[tuple[GeneratedTwoSites, Bus, dict[str, Client]]]:
    """The hub, both sites, the seats, and each site's node watching, once both nodes' `app` is
    applied and recorded at the hub: the mesh, the hub seat's connection, the clients by site."""
    async with generated_hub_and_two_sites(tmp_path, delay=0.01) as mesh, AsyncExitStack() as stack:
        grants, sites_json = mesh.out / "grants.json", mesh.out / "sites" / "sites.json"
        seat_options = mesh.options(mesh.hub, "seat")
        await stack.enter_async_context(
            serving(mesh.hub.url, bus_options=seat_options, grants_file=grants, providers=[], sites_file=sites_json)
        )
        seat = await stack.enter_async_context(connect(seat_options))
        for node in NODES.values():
            await stack.enter_async_context(stand_ins(seat, node, with_vault=False))
        for site, server in mesh.sites.items():  # each site's seat: its copies of the hub's buckets
            options = mesh.options(server, f"seat-{site}").model_copy(update={"name": buckets.SEAT})
            await stack.enter_async_context(
                serving(
                    server.url, bus_options=options, grants_file=grants, providers=[], sites_file=sites_json, site=site
                )
            )
        clients = {site: await _client(stack, mesh, site, tmp_path / site) for site in NODES}
        tasks = await stack.enter_async_context(anyio.create_task_group())
        for client in clients.values():
            tasks.start_soon(partial(watch, client.bus, client.plan, TIMING))
        for client in clients.values():
            await eventually(partial(_settled, seat, client, FIRST), f"{client.node}'s app applied at the hub")
        yield mesh, seat, clients
        tasks.cancel_scope.cancel()


async def _client(stack: AsyncExitStack, mesh: GeneratedTwoSites, site: str, folder: Path) -> Client:
    node = NODES[site]
    bus = await stack.enter_async_context(connect(mesh.options(mesh.sites[site], f"node-{node}")))
    manifests, runs = folder / "manifests", folder / "runs"
    manifests.mkdir(parents=True)
    runs.mkdir()
    (manifests / "app.json").write_text(manifest("app", {"GREETING": "${config:greeting}"}, runs / "app"))
    plan = ClientPlan(node, manifests, folder / "env", timedelta(seconds=2), LEASE_TTL)
    return Client(node, bus, plan, runs / "app")


async def renewals_went_on(seat: Bus) -> None:
    """Two renewals of each node's lease stored at the hub since now: each node's client went on
    reconciling and writing to the hub through its site."""
    for node in NODES.values():
        seen = {await _lease_revision(seat, node)}

        async def renewed_twice(node: str = node, seen: set[int] = seen) -> bool | None:
            seen.add(await _lease_revision(seat, node))
            return True if len(seen) > 2 else None

        await eventually(renewed_twice, f"two renewals of {node}'s lease stored at the hub")


async def _lease_revision(seat: Bus, node: str) -> int:
    lease = await get_direct(seat, buckets.LEASES, node_key(node))
    assert lease is not None, f"{node}'s lease is not at the hub"
    return lease.revision


async def hub_applied(seat: Bus, node: str) -> AppliedValue | None:
    item = await get_direct(seat, buckets.APPLIED, f"{node}.app")
    return None if item is None or item.deleted else AppliedValue.model_validate(read_json(item.value))


async def _settled(seat: Bus, client: Client, greeting: str) -> bool | None:
    """`greeting` in the env file (`FIRST`: as it begins), nothing waiting for the hub, status ok
    and read at the hub, and the hub's record of `app` the one status reads."""
    env = client.plan.materialize
    if not await anyio.Path(env / "app.env").exists() or not client.greeting().startswith(greeting):
        return None
    if own.read_waiting(env, client.node) is not None:
        return None
    try:
        status = await read_status(client.bus, client.node, env)
    except BusError:
        return None
    if not status.ok or status.read_at_site is not None:
        return None
    applied, app = await hub_applied(seat, client.node), status.modules.get("app")
    if app is None or applied is None or applied.state != "applied" or applied.digest != app.applied.digest:
        return None
    return True


async def _stale(client: Client) -> NodeStatus | None:
    """Status once it says the lease's renewals wait for the hub."""
    try:
        status = await read_status(client.bus, client.node, client.plan.materialize)
    except BusError:  # the verb out of reach before the client's own writes told it the link is down
        return None
    return status if status.waiting is not None and "lease" in status.waiting.parts else None


async def kept_keys(seat: Bus) -> dict[str, set[str]]:
    """Each node's keys in the hub's needs and applied buckets."""
    found: dict[str, set[str]] = {}
    for bucket in KEPT:
        for node in NODES.values():
            items = await get_last_many(seat, bucket, f"{node}.>")
            found[f"{bucket.name} {node}"] = {item.key for item in items if not item.deleted}
    return found


@asynccontextmanager
async def resets_sent(mesh: GeneratedTwoSites, site: str) -> AsyncIterator[list[str]]:
    """The resets of the hub's consumers `site`'s copies send, heard in the site's data account."""
    sent: list[str] = []

    async def heard(msg: Message) -> None:
        sent.append(msg.subject)

    async with connect(mesh.options(mesh.sites[site], f"seat-{site}")) as site_data:
        await site_data.subscribe("$JS.hub.API.CONSUMER.RESET.>", heard)
        yield sent


async def _greeting_put(seat: Bus, value: str) -> None:
    await put(seat, CONFIG, "greeting", json.dumps(value).encode())


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_site_cut_for_30s_keeps_its_env_files_the_other_goes_on_and_it_converges_once_after(
    tmp_path: Path,
) -> None:
    async with two_sites(tmp_path) as (mesh, seat, clients), resets_sent(mesh, SITE) as resets:
        site1, site2 = clients[SITE], clients[SITE2]
        assert all(client.greeting().startswith(FIRST) for client in clients.values())
        assert site1.actions() == site2.actions() == 1

        await _greeting_put(seat, SECOND)
        for client in clients.values():
            await eventually(partial(_settled, seat, client, SECOND), f"the change at {client.node}")
        assert site1.actions() == site2.actions() == 2
        keys, before = await kept_keys(seat), await last_sequences(seat)
        assert all(keys.values()), f"a node's keys missing at the hub: {keys}"

        mesh.relays[SITE].cut()
        cut_at = time.monotonic()
        resets.clear()
        await _greeting_put(seat, DURING)
        await eventually(lambda: _settled(seat, site2, DURING), "the change during the cut at site 2")
        assert site2.actions() == 3, "site 2's action ran once for the change"
        status = await eventually(lambda: _stale(site1), "site 1's status saying it waits for the hub")
        assert status.waiting is not None and not status.ok
        text = status_text(status)
        print(f"FIGURE site 1's status during the cut:\n{text}")
        assert (
            f"writes of the lease to the hub waiting since {timestamp_of(status.waiting.parts['lease'].since)}" in text
        )
        while time.monotonic() - cut_at < CUT_SECONDS:
            assert site1.greeting() == SECOND, "site 1's env file changed during the cut"
            await anyio.sleep(0.2)
        assert site1.actions() == 2
        assert resets, "no copy of site 1 sent its consumer's reset into the cut: the cut was too short"
        during = await last_sequences(seat)
        assert during == {**before, buckets.APPLIED.name: before[buckets.APPLIED.name] + 1}  # site 2's app only

        mesh.relays[SITE].restore()
        restored_at = time.monotonic()
        await eventually(lambda: _settled(seat, site1, DURING), "site 1 converged after the link returned", within=60)
        took = time.monotonic() - restored_at
        print(f"FIGURE converged {took:.2f} s after site 1's link returned (cut {restored_at - cut_at:.1f} s)")
        assert took <= CONVERGED_WITHIN

        assert site1.actions() == 3, "site 1's action ran exactly once for the change during the cut"
        assert site2.actions() == 3
        assert await kept_keys(seat) == keys, "a key was lost at the hub"
        after = await last_sequences(seat)
        assert after == {**before, buckets.APPLIED.name: before[buckets.APPLIED.name] + 2}  # each node's app, once

        await renewals_went_on(seat)  # the barrier before "nothing was written twice" is judged
        assert await last_sequences(seat) == after, "something was written twice"
        assert site1.actions() == site2.actions() == 3
        assert site1.greeting() == site2.greeting() == DURING
