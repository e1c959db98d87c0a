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
from pathlib import Path

import pytest

from registry.access import Kind
from registry.contract import buckets
from registry.wire import Bus, ask, put
from tests.attacks import (
    barrier_through,
    data_buckets,
)
from tests.helpers import in_own_task, stream_barrier
from tests.isolation import party
from tests.isolation import test_isolation as at_the_hub
from tests.sites.seat_at_site import requests_answered
from tests.sites.site_mesh import (
    ASKED,
    ATTACKER,
    SITE,
    Ends,
    SiteMesh,
    site_mesh,
)


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
