"""The seat pauses a module's rollout when a node running it fails its change, and only then
(`provisioner.seat.rollouts`), on a real nats-server with the generated grants, static
and JWT accounts: the nodes write their claims on their own accounts, the seat holds on its own.

A failure that must pause nothing is judged after a later failure that does pause, written after
it: the seat judges the failures in the order it reads them (one node's waiting behind another's
in turn), so once the later hold is there the earlier claim was read and judged."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import anyio
import nats.errors
import pytest
from nats.aio.client import Client

from provisioner.seat.rollouts import (
    FailedClaim,
    FailuresWaiting,
    Placement,
    RolloutsSeen,
    hold_failed_rollouts,
    refuse_if_not_counted,
)
from registry.access import Kind
from registry.contract import buckets, fleet
from registry.wire import SKEW, Bus, KvItem, delete, get_last_many, get_latest, put
from tests.attacks import barrier_through
from tests.helpers import eventually, in_own_task, stream_barrier, until, wait_for
from tests.isolation import Mesh, jwt_mesh_server, mesh_server, party

N1, N2, SEAT = party(Kind.NODE, "n1"), party(Kind.NODE, "n2"), party(Kind.SEAT)
PLACEMENT = Placement.of_catalogue()
DECLARED = Placement.of_catalogue(declared=True)  # `pause_on_failure = "declared"`
A_PLAN = b'{"plan":{}}'
A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'
WITHIN = 20.0  # seconds a hold may take to appear on a loaded machine: a bound to fail, not a speed


def claim(state: str, change: str = "c1", reason: str = "") -> bytes:
    value = fleet.Claim(state=state, change=change, since=datetime.now(UTC), ttl_seconds=60, reason=reason)  # type: ignore[arg-type]
    return value.model_dump_json().encode()


@asynccontextmanager
async def holding(seat: Bus, placement: Placement = PLACEMENT) -> AsyncIterator[RolloutsSeen]:
    """The seat's rollout task on its own connection, with what it saw."""
    seen = RolloutsSeen()
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(hold_failed_rollouts, seat, placement=placement, seen=seen))
        yield seen
        tasks.cancel_scope.cancel()


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    """The mesh of tests/conftest.py, its seat told not to pause rollouts itself: each test runs the
    seat's rollout task on its own connection, and reads what it saw."""
    start = mesh_server if request.param == "static" else jwt_mesh_server
    async with in_own_task(start(tmp_path / "mesh", seat={"pause_on_failure": False})) as running:
        yield running


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    """The seat's connection, with placement saying n1 runs web, db and api, n2 runs web; n2
    registered needs of `tool`, which placement knows of no node."""
    async with in_own_task(mesh.connect(SEAT)) as bus:
        assert PLACEMENT.bucket is not None
        for key in ("n1.web", "n1.db", "n1.api", "n2.web"):
            await put(bus, PLACEMENT.bucket, key, A_PLAN)
        await put(bus, buckets.NEEDS, "n2.tool.config.x", A_NEED)
        yield bus


@pytest.fixture
async def seen(seat: Bus) -> AsyncIterator[RolloutsSeen]:
    async with in_own_task(holding(seat)) as watching:
        yield watching


async def hold_of(seat: Bus, module: str) -> tuple[fleet.Hold, int]:
    """`module`'s hold once there (and its revision); fails after `WITHIN` seconds without."""

    async def standing() -> tuple[fleet.Hold, int] | None:
        found = await get_latest(seat, fleet.FLEET, fleet.hold_key(module))
        if found is None or found.deleted:
            return None
        return fleet.Hold.model_validate_json(found.value), found.revision

    return await eventually(standing, f"a hold of {module}", WITHIN)


async def judged(seen: RolloutsSeen, failures: int, *, held: str | None = None) -> None:
    """Once the seat's rollout task counted `failures` failures judged and, `held` naming a module,
    its watch brought that module's hold paused; fails after `WITHIN` seconds without. `hold_of`
    alone does not say so: its read of a hold can come back before the write's acknowledgement,
    after which the task counts the pause, and before the watch's push of the same message."""
    await wait_for(
        lambda: seen.pauses.total() >= failures and (held is None or seen.holds.get(held) == "paused"),
        f"{failures} failures judged" + (f", {held} held" if held else ""),
        WITHIN,
    )


async def holds(seat: Bus) -> list[tuple[str, bytes, int, bool]]:
    """Every `rollout.<module>` key of the fleet as the seat reads it: key, value, revision, deleted."""
    items: list[KvItem] = await get_last_many(seat, fleet.FLEET, f"{fleet.ROLLOUT}.>")
    return sorted((i.key, i.value, i.revision, i.deleted) for i in items)


async def write_claim(mesh: Mesh, node: str, module: str, value: bytes) -> None:
    async with mesh.connect(party(Kind.NODE, node)) as bus:
        await put(bus, fleet.FLEET, fleet.claim_key(module, node), value)


async def test_a_failed_claim_of_a_node_running_the_module_pauses_its_rollout(
    mesh: Mesh, seat: Bus, seen: RolloutsSeen
) -> None:
    await write_claim(mesh, "n1", "web", claim("running"))
    await write_claim(mesh, "n1", "web", claim("failed", reason="health check exited 3"))
    hold, revision = await hold_of(seat, "web")
    assert (hold.state, hold.by, hold.node) == ("paused", "seat", "n1")
    assert "health check exited 3" in hold.reason
    await write_claim(mesh, "n2", "web", claim("failed", reason="action exited 1"))
    await write_claim(mesh, "n1", "api", claim("failed"))  # the barrier: n2's failure is read once this pauses api
    await hold_of(seat, "api")
    await judged(seen, 3, held="api")
    assert await get_latest(seat, fleet.FLEET, fleet.hold_key("web")) == await _at(seat, "web", revision)
    assert seen.pauses == {"paused": 2, "already_held": 1}
    assert seen.claims_by_state()["failed"] == 3
    assert seen.holds_by_state() == {"paused": 2, "aborted": 0}


async def _at(seat: Bus, module: str, revision: int) -> KvItem | None:
    found = await get_latest(seat, fleet.FLEET, fleet.hold_key(module))
    assert found is not None and found.revision == revision, "the first hold was written over"
    return found


async def test_a_module_placement_knows_no_node_of_is_paused_by_no_node_by_default(
    mesh: Mesh, seat: Bus, seen: RolloutsSeen
) -> None:
    """n2's needs of `tool` are its own word: any node could register them, and so pause any module
    placement does not know (`pause_on_failure = "placed"`, the default)."""
    await write_claim(mesh, "n2", "tool", claim("failed", reason="exit 2"))
    await write_claim(mesh, "n1", "api", claim("failed"))  # the barrier: n2's failure was judged once api is held
    await hold_of(seat, "api")
    await judged(seen, 2)
    assert (await get_latest(seat, fleet.FLEET, fleet.hold_key("tool"))) is None
    assert seen.pauses == {"not_running": 1, "paused": 1}


async def test_declared_a_module_placement_knows_no_node_of_is_paused_by_a_node_that_needs_it(
    mesh: Mesh, seat: Bus
) -> None:
    async with holding(seat, DECLARED) as seen:
        await write_claim(mesh, "n1", "tool", claim("failed"))  # n1 registered no need of tool
        await write_claim(mesh, "n2", "web", claim("waiting"))
        await write_claim(mesh, "n2", "tool", claim("failed", reason="exit 2"))
        hold, _ = await hold_of(seat, "tool")
        await judged(seen, 2)
        assert hold.node == "n2"
        assert seen.pauses == {"not_running": 1, "paused": 1}
        assert seen.refused == {"not_running": 1}
        n1s = await get_latest(seat, fleet.FLEET, fleet.claim_key("tool", "n1"))
        assert n1s is not None and n1s.deleted, "a claim of a module its node does not run stands"
        left = {"waiting": 1, "running": 0, "failed": 1, "expired": 0}
        assert await until(lambda: seen.claims_by_state() == left, WITHIN), seen.claims_by_state()


async def test_a_failed_claim_renewed_after_a_resume_pauses_nothing_and_a_new_failure_does(
    mesh: Mesh, seat: Bus, seen: RolloutsSeen
) -> None:
    await write_claim(mesh, "n1", "web", claim("failed", change="c1"))
    _, revision = await hold_of(seat, "web")
    await delete(seat, fleet.FLEET, fleet.hold_key("web"), last=revision)  # resumed
    await write_claim(mesh, "n1", "web", claim("failed", change="c1"))  # renewed, not failed again
    await write_claim(mesh, "n1", "api", claim("failed"))
    await hold_of(seat, "api")
    found = await get_latest(seat, fleet.FLEET, fleet.hold_key("web"))
    assert found is not None and found.deleted, "a renewal of the same failure paused again"
    await write_claim(mesh, "n1", "web", claim("failed", change="c2"))
    hold, _ = await hold_of(seat, "web")
    assert "c2" in hold.reason


async def test_an_operators_hold_is_left_as_it_is(mesh: Mesh, seat: Bus, seen: RolloutsSeen) -> None:
    aborted = fleet.Hold(state="aborted", since=datetime.now(UTC), by="ops", reason="bad value")
    await put(seat, fleet.FLEET, fleet.hold_key("web"), aborted.model_dump_json().encode())
    before = await holds(seat)
    await write_claim(mesh, "n1", "web", claim("failed"))
    await write_claim(mesh, "n1", "api", claim("failed"))
    await hold_of(seat, "api")
    assert [h for h in await holds(seat) if h[0] == fleet.hold_key("web")] == before
    assert seen.pauses["already_held"] == 1


async def test_a_seat_started_after_a_failure_pauses_for_it(mesh: Mesh, seat: Bus) -> None:
    await write_claim(mesh, "n1", "db", claim("failed"))
    async with holding(seat) as seen:
        hold, _ = await hold_of(seat, "db")
        await judged(seen, 1)  # before the task is cancelled
    assert hold.node == "n1"
    assert seen.pauses == {"paused": 1}


# The attacks: a hostile node, through nats-py itself, sends what its account lets it.


async def _send(client: Client, subject: str, data: bytes, headers: dict[str, str] | None = None) -> None:
    """A write as the bus takes it, a refusal (no responders, a timeout, an error) being its expected end."""
    with contextlib.suppress(nats.errors.Error):
        await client.request(subject, data, timeout=1.0, headers=headers)


async def test_attack_a_node_failing_a_module_it_does_not_run_pauses_nothing(mesh: Mesh, seat: Bus) -> None:
    hostile = await mesh.raw(N2)
    try:
        async with holding(seat) as seen:
            before = await holds(seat)
            # n2 registers needs of db (its own keys): placement says db runs on n1 alone
            await _send(hostile, buckets.NEEDS.subject("n2.db.config.x"), A_NEED)
            await _send(hostile, fleet.FLEET.subject(fleet.claim_key("db", "n2")), claim("failed", reason="evil"))
            # under n1's name: refused by the bus, so nothing the seat reads either
            await _send(hostile, fleet.FLEET.subject(fleet.claim_key("db", "n1")), claim("failed", reason="evil"))
            await write_claim(mesh, "n1", "api", claim("failed"))  # the barrier
            await hold_of(seat, "api")
            await judged(seen, 2)
            assert [h for h in await holds(seat) if h[0] != fleet.hold_key("api")] == before
            assert seen.pauses == {"not_running": 1, "paused": 1}
            own = await get_latest(seat, fleet.FLEET, fleet.claim_key("db", "n2"))
            assert own is not None, "n2's own claim was not written: the attack proved nothing"
            assert await get_latest(seat, fleet.FLEET, fleet.claim_key("db", "n1")) is None
    finally:
        await hostile.close()


async def test_attack_a_node_cannot_write_change_or_free_a_hold(mesh: Mesh, seat: Bus) -> None:
    paused = fleet.Hold(state="paused", since=datetime.now(UTC), by="seat", reason="n1 failed", node="n1")
    await put(seat, fleet.FLEET, fleet.hold_key("web"), paused.model_dump_json().encode())
    before = await holds(seat)
    hostile = await mesh.raw(N2)
    try:
        resumed = {"KV-Operation": "DEL"}
        aborted = paused.model_copy(update={"state": "aborted", "by": "n2"}).model_dump_json().encode()
        await _send(hostile, fleet.FLEET.subject(fleet.hold_key("web")), b"", resumed)
        await _send(hostile, fleet.FLEET.subject(fleet.hold_key("web")), aborted)
        await _send(hostile, fleet.FLEET.subject(fleet.hold_key("db")), aborted)
        purge = f'{{"filter":"{fleet.FLEET.subject("rollout.>")}"}}'.encode()
        await _send(hostile, f"$JS.API.{fleet.FLEET.purge_api}", purge)
        await barrier_through(hostile, fleet.FLEET.subject(fleet.claim_key("web", "n2")))  # behind the attack
    finally:
        await hostile.close()
    await stream_barrier(seat, [fleet.FLEET])
    assert await holds(seat) == before


async def test_attack_a_flood_of_failures_under_other_module_names_keeps_no_honest_failure_waiting(
    mesh: Mesh, seat: Bus
) -> None:
    hostile = await mesh.raw(N2)
    try:
        async with holding(seat) as seen:
            flood = [
                hostile.request(fleet.FLEET.subject(fleet.claim_key(f"m{i}", "n2")), claim("failed"), timeout=5.0)
                for i in range(200)
            ]
            await asyncio.gather(*flood, return_exceptions=True)
            await write_claim(mesh, "n1", "api", claim("failed"))
            hold, _ = await hold_of(seat, "api")
            assert hold.node == "n1"
            assert seen.pauses["not_running"] + seen.pauses["dropped"] <= 200
            assert not [h for h in await holds(seat) if h[0] != fleet.hold_key("api")]
    finally:
        await hostile.close()


def test_failures_wait_node_by_node_within_each_nodes_share() -> None:
    waiting = FailuresWaiting(per_node=2, most=3)
    failures = {key: FailedClaim(module, node, "c1", "") for key, module, node in KEYS}
    added = [waiting.add(key, failed) for key, failed in failures.items()]
    assert added == [True, True, False, True, False]  # n2's third: past its share; n3's: past the whole
    assert waiting.add("claim.a.n2", FailedClaim("a", "n2", "c2", "")), "a later write of a waiting key takes its place"
    taken = [anyio.run(waiting.next) for _ in range(len(waiting))]
    assert [(f.node, f.module, f.change) for f in taken] == [("n2", "a", "c2"), ("n1", "x", "c1"), ("n2", "b", "c1")]


KEYS = [
    ("claim.a.n2", "a", "n2"),
    ("claim.b.n2", "b", "n2"),
    ("claim.c.n2", "c", "n2"),
    ("claim.x.n1", "x", "n1"),
    ("claim.y.n3", "y", "n3"),
]


def test_a_failure_not_renewed_within_its_ttl_pauses_nothing_and_a_renewal_is_no_new_failure() -> None:
    seen = RolloutsSeen()
    now = datetime.now(UTC)
    key = fleet.claim_key("web", "n1")
    dead = KvItem(key, claim("failed"), 1, stored_at=now - timedelta(seconds=120))  # ttl 60 s, skew 5 s
    assert seen.note(dead, now) is None
    assert seen.claims_by_state(now)["expired"] == 1
    fresh = KvItem(key, claim("failed"), 2, stored_at=now)
    again = FailedClaim("web", "n1", "c1", "", 2, failed=True, new=True)
    assert seen.note(fresh, now) == again  # failed again while standing: judged
    assert seen.note(KvItem(key, claim("failed"), 3, stored_at=now), now) is None  # its renewal
    assert seen.note(KvItem(key, b"", 4, deleted=True, stored_at=now), now) is None
    assert seen.claims == {}


async def test_attack_a_failures_reason_reaches_the_hold_without_its_control_characters(
    mesh: Mesh, seat: Bus, seen: RolloutsSeen
) -> None:
    await write_claim(mesh, "n1", "web", claim("failed", reason="\x1b[2J\x9b31m\u202eevil\r\nline two\u2028"))
    hold, _ = await hold_of(seat, "web")
    assert "evil" in hold.reason
    assert all(char.isprintable() for char in hold.reason), repr(hold.reason)


async def test_attack_a_squat_by_every_field_a_node_writes_holds_no_slot(
    mesh: Mesh, seat: Bus, seen: RolloutsSeen
) -> None:
    """Hostile n2 against honest n1, whose claims of web and api (budget 1) came first: a claim of
    db, which n2 does not run; a claim of api after registering needs of it (placement runs api on
    n1 alone: n2's needs are its own word); a claim of web naming revision 1 as its place, standing a
    day; a claim under a literal wildcard module. The seat deletes each; every reader's queue of each
    module is n1's alone, and n2's honest claim of `tool` (no placement, its needs) stands."""
    await write_claim(mesh, "n1", "web", claim("waiting"))
    await write_claim(mesh, "n1", "api", claim("waiting"))
    day = fleet.Claim(state="waiting", change="c1", since=datetime.now(UTC), ttl_seconds=86400, queued=1)
    hostile = await mesh.raw(N2)
    try:
        await _send(hostile, fleet.FLEET.subject(fleet.claim_key("tool", "n2")), claim("waiting"))
        await _send(hostile, fleet.FLEET.subject(fleet.claim_key("db", "n2")), claim("running"))
        await _send(hostile, buckets.NEEDS.subject("n2.api.config.x"), A_NEED)
        await _send(hostile, fleet.FLEET.subject(fleet.claim_key("api", "n2")), claim("running"))
        await _send(hostile, fleet.FLEET.subject(fleet.claim_key("web", "n2")), day.model_dump_json().encode())
        await _send(hostile, fleet.FLEET.subject("claim.*.n2"), claim("running"))
    finally:
        await hostile.close()

    squats = [fleet.claim_key(module, "n2") for module in ("db", "api", "web")]

    async def squats_deleted() -> bool:
        found = [await get_latest(seat, fleet.FLEET, key) for key in squats]
        return all(item is not None and item.deleted for item in found)

    assert await until(squats_deleted, WITHIN), "a squatting claim stands"
    refused = {"not_running": 2, "position": 1, "unshaped": 1}  # not running: db and api, not tool
    assert await until(lambda: seen.refused == refused, WITHIN), seen.refused
    for module, queued in (("web", ["n1"]), ("api", ["n1"]), ("db", []), ("tool", ["n2"])):
        queue = fleet.live_claims(
            await get_last_many(seat, fleet.FLEET, fleet.claims_of(module)), datetime.now(UTC), skew=SKEW
        )
        assert [live.node for live in queue] == queued, module


async def test_attack_a_need_of_a_placed_module_takes_no_slot_and_a_need_of_an_unplaced_one_does(
    mesh: Mesh, seat: Bus, seen: RolloutsSeen
) -> None:
    """Placement runs db on n1 alone; n2 registers needs of db and claims it, and claims `tool`,
    which placement holds for no node, on its needs: its claim of db is deleted, of tool stands."""
    await write_claim(mesh, "n1", "db", claim("waiting"))
    async with mesh.connect(N2) as n2:
        await put(n2, buckets.NEEDS, "n2.db.config.x", A_NEED)
        tool = await put(n2, fleet.FLEET, fleet.claim_key("tool", "n2"), claim("waiting"))
        await put(n2, fleet.FLEET, fleet.claim_key("db", "n2"), claim("running"))

    async def squat_deleted() -> bool:
        found = await get_latest(seat, fleet.FLEET, fleet.claim_key("db", "n2"))
        return found is not None and found.deleted

    assert await until(squat_deleted, WITHIN), "n2's claim of db stands on its needs alone"
    kept = await get_latest(seat, fleet.FLEET, fleet.claim_key("tool", "n2"))  # judged before db's, n2's in turn
    assert kept is not None and (kept.revision, kept.deleted) == (tool, False)
    assert await until(lambda: seen.refused == {"not_running": 1}, WITHIN), seen.refused
    claims = await get_last_many(seat, fleet.FLEET, fleet.claims_of("db"))
    queue = fleet.live_claims(claims, datetime.now(UTC), skew=SKEW)
    assert [live.node for live in queue] == ["n1"]


class RewrittenWhileJudged(Placement):
    """The catalogue's placement, whose first answer (`counts`: no) is given after `meanwhile`
    ran: a write landing between the seat's judgement of a claim and its delete."""

    def __init__(self, meanwhile: Callable[[], Awaitable[None]]) -> None:
        super().__init__(PLACEMENT.bucket)
        self.meanwhile: Callable[[], Awaitable[None]] | None = meanwhile

    async def counts(self, bus: Bus, node: str, module: str) -> bool:
        if self.meanwhile is None:
            return await super().counts(bus, node, module)
        meanwhile, self.meanwhile = self.meanwhile, None
        await meanwhile()
        return False


@pytest.mark.parametrize("placed", [True, False], ids=["placed meanwhile", "still not placed"])
async def test_a_claim_rewritten_after_its_judgement_is_deleted_only_if_the_rewrite_does_not_count(
    mesh: Mesh, seat: Bus, placed: bool
) -> None:
    """n2's claim of db is judged not to count; before the seat deletes it, n2 writes it again,
    placed on db meanwhile (an honest rewrite, which must stand) or not (a renewal, deleted). The
    mesh's own seat judges the same writes meanwhile: either seat's delete leaves the same data."""
    async with mesh.connect(N2) as n2:
        first = await put(n2, fleet.FLEET, fleet.claim_key("db", "n2"), claim("waiting"))
        rewrite = claim("running", change="c2")
        revisions: list[int] = []

        async def meanwhile() -> None:
            if placed:
                assert PLACEMENT.bucket is not None
                await put(seat, PLACEMENT.bucket, "n2.db", A_PLAN)
            revisions.append(await put(n2, fleet.FLEET, fleet.claim_key("db", "n2"), rewrite))

        judged = FailedClaim("db", "n2", "c1", "", first, failed=False, new=True)
        refusal = await refuse_if_not_counted(seat, judged, RewrittenWhileJudged(meanwhile))
    found = await get_latest(seat, fleet.FLEET, fleet.claim_key("db", "n2"))
    assert found is not None
    if placed:
        assert (refusal, found.revision, found.deleted, found.value) == (None, revisions[0], False, rewrite)
    else:
        assert (refusal, found.deleted) == ("not_running", True)


def test_a_claim_stands_no_longer_than_the_contracts_cap_whatever_it_says() -> None:
    now = datetime.now(UTC)
    day = fleet.Claim(state="waiting", change="c1", since=now, ttl_seconds=86400)
    item = KvItem(fleet.claim_key("web", "n2"), day.model_dump_json().encode(), 7, stored_at=now)
    assert fleet.live_claims([item], now, skew=SKEW)
    later = now + timedelta(seconds=fleet.MAX_CLAIM_TTL) + SKEW + timedelta(seconds=1)
    assert fleet.live_claims([item], later, skew=SKEW) == []
    seen = RolloutsSeen()
    seen.note(item, now)
    assert seen.claims_by_state(later)["expired"] == 1
