"""The isolation attack suite run by a node living at a site, static and JWT, on exactly what
`mesh-provisioner grants --mesh` writes: the hub and site 1 (node n1, the attacker, lives there;
n2, the victim, at the hub), the hub's seat and the site's seat running (`serve --site`), so the
site's copies exist and n1's verb is answered at its site.

The attacks are `tests/isolation/test_isolation.py`'s own test functions, collected again here with this
module's `mesh` (n1 connects to its site's server, every other party to the hub's) and judged as
there, by the hub's data; each is also judged at both ends by `judged_at_both_ends`: every bucket
at the hub and every copy at the site, keys, revisions and contents, are unchanged after it but
for n1's own keys (a copy is compared once it has caught up with the hub).

What the topology changes in an attack's path (the verdicts are the same):
- a write of n1 crosses the link and is decided by the hub's bucket (fail fast); its rollup is
  refused there;
- a read of n1 (direct get, batch get, stream info) is answered, or refused, at its site: the
  site's mirror answers only what n1's account imports;
- the verb is answered by the site's seat, from the site's copies;
- a reply subject an attacker chooses names its own account at its site: nothing at the hub.

The judges see a change at both ends and none of the attacker's own keys
(`test_the_judges_see_...`); n1's verb requests are answered by the site's seat alone
(`test_the_attackers_verb_is_answered_at_its_site`). The site's data link credential in an
attacker's hands: `tests/sites/test_site_link_isolation.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest
from nats.aio.client import Client

from mesh_dev.local_nats import LocalNats
from registry.access import Kind, Party, account_key, creds_path
from registry.contract import buckets
from registry.wire import Bus, BusOptions, ask, connect, put
from tests.attacks import (
    barrier_through,
    data_buckets,
    everything,
    outside_own_keys,
)
from tests.cluster import free_port
from tests.helpers import eventually, in_own_task, stream_barrier
from tests.isolation import party
from tests.isolation import test_isolation as at_the_hub
from tests.sites import Relay
from tests.sites.test_site_seat import Seat, connecting, requests_answered, seat_settings
from tests.sites.test_sites_topology import leafz, server

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


@pytest.fixture(params=[False, True], ids=["static accounts", "decentralized JWT accounts"])
async def mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SiteMesh]:
    async with in_own_task(site_mesh(tmp_path / "mesh", jwt=request.param)) as running:
        yield running


# The suite's own fixture and tests, run here on the mesh above (n1 at its site).
seat = at_the_hub.seat
test_a_node_writes_and_reads_its_own_keys_and_asks_the_verb = (
    at_the_hub.test_a_node_writes_and_reads_its_own_keys_and_asks_the_verb
)
test_a_node_cannot_write_outside_its_own_keys = at_the_hub.test_a_node_cannot_write_outside_its_own_keys
test_a_direct_get_answered_to_a_chosen_reply_subject_lands_nowhere = (
    at_the_hub.test_a_direct_get_answered_to_a_chosen_reply_subject_lands_nowhere
)
test_a_put_acknowledged_to_a_chosen_reply_subject_lands_nowhere = (
    at_the_hub.test_a_put_acknowledged_to_a_chosen_reply_subject_lands_nowhere
)
test_the_verbs_answer_to_a_chosen_reply_subject_lands_nowhere = (
    at_the_hub.test_the_verbs_answer_to_a_chosen_reply_subject_lands_nowhere
)
test_a_rollup_header_on_a_nodes_own_put_wipes_nothing = at_the_hub.test_a_rollup_header_on_a_nodes_own_put_wipes_nothing
test_a_node_reads_nothing_of_another_node_or_the_whole_bucket = (
    at_the_hub.test_a_node_reads_nothing_of_another_node_or_the_whole_bucket
)
test_a_node_holds_no_jetstream_api_in_the_data_account = (
    at_the_hub.test_a_node_holds_no_jetstream_api_in_the_data_account
)
test_a_provider_cannot_create_a_stream_to_capture_inboxes_or_verbs = (
    at_the_hub.test_a_provider_cannot_create_a_stream_to_capture_inboxes_or_verbs
)
test_a_node_asking_the_verb_about_another_node_learns_nothing = (
    at_the_hub.test_a_node_asking_the_verb_about_another_node_learns_nothing
)
test_an_operator_and_a_provider_see_the_mesh = at_the_hub.test_an_operator_and_a_provider_see_the_mesh
test_the_vault_cannot_answer_the_seats_service_api_in_its_place = (
    at_the_hub.test_the_vault_cannot_answer_the_seats_service_api_in_its_place
)


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


@pytest.fixture
async def ends(mesh: SiteMesh, seat: Bus) -> AsyncIterator[Ends]:
    """The hub's seat (the suite's `seat`) and the site's seat user, once the suite has seeded the hub."""
    if mesh.site is None:
        yield Ends(seat, None)
        return
    async with in_own_task(mesh.connect(f"seat-{SITE}", mesh.site)) as site:
        yield Ends(seat, site)


@pytest.fixture
def answering_seat(ends: Ends) -> Bus:
    """A connection to the server whose seat answers n1's verb requests: its site's."""
    assert ends.site is not None
    return ends.site


@pytest.fixture
def judges_itself() -> None:
    """Asked by a test that judges the data itself (it changes some on purpose)."""


@pytest.fixture(autouse=True)
async def judged_at_both_ends(request: pytest.FixtureRequest, mesh: SiteMesh, ends: Ends) -> AsyncIterator[None]:
    """Every test here: nothing outside the attacker's own keys changed, at the hub or at the site."""
    if "judges_itself" in request.fixturenames:
        yield
        return
    before = await ends.outside(ATTACKER)
    yield
    await after_the_attack(mesh, ends.hub)
    assert await ends.outside(ATTACKER) == before


async def after_the_attack(mesh: SiteMesh, hub: Bus) -> None:
    """The barrier before the judgement: n1's refused write on its path (across the link, in order
    behind whatever it sent before), then every bucket at the hub past what was routed to it."""
    n1 = await mesh.raw(party(Kind.NODE, ATTACKER))
    try:
        await barrier_through(n1, buckets.NEEDS.subject(f"{ATTACKER}.web.config.x"))
    finally:
        await n1.close()
    await stream_barrier(hub, await data_buckets(hub))


async def test_the_judges_see_a_change_at_both_ends_and_none_of_the_attackers_own_keys(
    seat: Bus, ends: Ends, judges_itself: None
) -> None:
    before = await ends.outside(ATTACKER)
    await put(seat, buckets.NEEDS, "n1.web.config.x", b'{"placeholder":"${config:own}"}')
    assert await ends.outside(ATTACKER) == before
    await put(seat, buckets.NEEDS, "n2.web.config.x", b'{"placeholder":"${config:changed}"}')
    after = await ends.outside(ATTACKER)
    assert after["hub"] != before["hub"] and after["site"] != before["site"]


async def test_the_attackers_verb_is_answered_at_its_site(mesh: SiteMesh, ends: Ends) -> None:
    """n1's requests are answered by the site's seat, from the site's copies: none crosses the link."""
    assert ends.site is not None
    site_before, hub_before = await requests_answered(ends.site), await requests_answered(ends.hub)
    async with mesh.connect(party(Kind.NODE, ATTACKER)) as n1:
        for _ in range(ASKED):
            entries = (await ask(n1, {"what": "needs"}))["entries"]
            assert {entry["node"] for entry in entries} == {ATTACKER}
    assert await requests_answered(ends.site) - site_before == ASKED
    assert await requests_answered(ends.hub) == hub_before
