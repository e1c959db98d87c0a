"""The seat's gone marks on a real nats-server and seat:
a node whose lease was last renewed or released longer than `forget_after` ago is marked
`gone.<node>` in the fleet bucket, its mark deleted once it is back, an unchanged fleet written
nothing; the seat's clock is injected (`Clock`) so that time passes without waiting for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.seat.gone_marks import GoneMarks, keep_gone_marks
from provisioner.verb.answering import Answering
from provisioner.verb.nodes import REMOVED_LEASE, read_fleet
from provisioner.verb.paging import PageCache
from registry.contract import buckets, fleet, to_json
from registry.wire import Bus, Holder, KvItem, Lease, ask, delete, get_direct, get_last_many, node_key, put
from tests.helpers import in_own_task, last_sequence, serving

FORGET_AFTER = timedelta(seconds=60)
ITEMS = b'{"items":["x"]}'


@pytest.fixture
async def server(nats_server: LocalNats) -> AsyncIterator[LocalNats]:
    """The seat serving, its own gone marks kept once at its start and not again for an hour: each
    test runs the task itself, with its own clock, and the seat's would delete what it marks."""
    async with in_own_task(serving(nats_server.url, gone_marks_interval=timedelta(hours=1))):
        yield nats_server


class Clock:
    """The seat's clock: the real one, moved on by `ahead`."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.ahead


async def marks(bus: Bus) -> dict[str, fleet.Gone]:
    found = await get_last_many(bus, fleet.FLEET, f"{fleet.GONE}.>")
    return {fleet.parse_fleet_key(i.key).node or "": fleet.Gone.model_validate_json(i.value) for i in live(found)}


def live(items: list[KvItem]) -> list[KvItem]:
    return [item for item in items if not item.deleted]


async def contribute(bus: Bus, *nodes: str) -> None:
    for node in nodes:
        await put(bus, buckets.COLLECT, f"{node}.shell=3Azsh=3Anormal.web", ITEMS)


@pytest.mark.usefixtures("server")
async def test_gone_nodes_are_marked_and_unmarked_as_their_leases_say(bus: Bus) -> None:
    held = Lease(bus, node_key("held"), ttl=timedelta(seconds=30))
    await held.try_take()
    released = Lease(bus, node_key("released"), ttl=timedelta(seconds=30))
    await released.try_take()
    await released.release()
    removed = Lease(bus, node_key("removed"), ttl=timedelta(seconds=30))
    await removed.try_take()
    record = await get_direct(bus, buckets.LEASES, node_key("removed"))
    assert record is not None
    await delete(bus, buckets.LEASES, node_key("removed"), last=record.revision, note=REMOVED_LEASE)
    await contribute(bus, "held", "released", "removed", "unleased")
    clock = Clock()
    seat = GoneMarks(forget_after=FORGET_AFTER, clock=clock)

    assert not await seat.converge(bus)  # nobody gone yet: nothing written
    assert await marks(bus) == {}

    clock.ahead = timedelta(seconds=61)
    changes = await seat.converge(bus)
    assert sorted(changes.written) == ["gone.held", "gone.released", "gone.unleased"]
    found = await marks(bus)
    assert set(found) == {"held", "released", "unleased"}  # removed: remove-node deletes its contributions
    assert found["unleased"].last_seen is None
    assert found["released"].last_seen is not None
    assert datetime.now(UTC) - found["released"].last_seen < timedelta(seconds=30)

    before = await last_sequence(bus, fleet.FLEET)
    assert not await seat.converge(bus)
    assert await last_sequence(bus, fleet.FLEET) == before  # an unchanged fleet costs no write


@pytest.mark.usefixtures("server")
async def test_a_held_lease_is_not_gone_within_its_ttl_whatever_forget_after_says(bus: Bus) -> None:
    holder = Holder(id="h", host="h", pid=1, since=datetime.now(UTC), ttl_seconds=600)
    await Lease(bus, node_key("slow"), ttl=timedelta(seconds=600), holder=holder).try_take()
    clock = Clock()
    seat = GoneMarks(forget_after=timedelta(seconds=1), clock=clock)
    clock.ahead = timedelta(seconds=300)
    assert not await seat.converge(bus)
    clock.ahead = timedelta(seconds=606)  # past its ttl and the skew
    assert (await seat.converge(bus)).written == ["gone.slow"]


@pytest.mark.usefixtures("server")
async def test_a_node_contributing_without_a_lease_is_gone_only_after_this_seat_saw_it_so_for_forget_after(
    bus: Bus,
) -> None:
    await contribute(bus, "orphan")
    clock = Clock()
    clock.ahead = timedelta(days=365)  # the contribution is old by the server's stamp: no matter
    seat = GoneMarks(forget_after=FORGET_AFTER, clock=clock)
    assert not await seat.converge(bus)
    clock.ahead += timedelta(seconds=59)
    assert not await seat.converge(bus)
    clock.ahead += timedelta(seconds=2)
    assert (await seat.converge(bus)).written == ["gone.orphan"]
    await Lease(bus, node_key("orphan"), ttl=timedelta(seconds=30)).try_take()
    clock.ahead = timedelta(0)
    assert (await seat.converge(bus)).deleted == ["gone.orphan"]


@pytest.mark.usefixtures("server")
async def test_a_seat_started_later_keeps_the_mark_of_a_node_without_a_lease(bus: Bus) -> None:
    """A restarted seat, or a second one, has seen the unleased node for less than `forget_after`:
    it keeps the mark another seat wrote (before, it deleted it at once, and two seats flipped it
    every round, each flip waking every node)."""
    await contribute(bus, "orphan")
    clock = Clock()
    first = GoneMarks(forget_after=FORGET_AFTER, clock=clock)
    await first.converge(bus)
    clock.ahead += timedelta(seconds=61)
    assert (await first.converge(bus)).written == ["gone.orphan"]
    later = GoneMarks(forget_after=FORGET_AFTER, clock=clock)
    before = await last_sequence(bus, fleet.FLEET)
    assert not await later.converge(bus)
    assert not await first.converge(bus)
    assert await last_sequence(bus, fleet.FLEET) == before
    assert set(await marks(bus)) == {"orphan"}


async def test_the_task_marks_a_released_node_and_unmarks_it_when_it_takes_its_lease_again(
    server: LocalNats, bus: Bus
) -> None:
    lease = Lease(bus, node_key("n2"), ttl=timedelta(seconds=30))
    await lease.try_take()
    await lease.release()
    keep = partial(keep_gone_marks, bus, forget_after=timedelta(seconds=0.3), every=timedelta(seconds=0.1))
    async with anyio.create_task_group() as tasks:
        await tasks.start(keep)
        with anyio.fail_after(10):
            while "n2" not in await marks(bus):
                await anyio.sleep(0.05)
        mark = (await marks(bus))["n2"]
        assert mark.last_seen is not None and mark.since - mark.last_seen > timedelta(seconds=0.3)
        await Lease(bus, node_key("n2"), ttl=timedelta(seconds=30)).try_take()
        with anyio.fail_after(10):
            while "n2" in await marks(bus):
                await anyio.sleep(0.05)
        tasks.cancel_scope.cancel()


async def test_a_round_the_bus_fails_is_said_and_the_task_goes_on(nats_server: LocalNats, bus: Bus) -> None:
    """No seat: the buckets do not exist; the task starts all the same and says why."""
    seat = GoneMarks(forget_after=FORGET_AFTER)
    assert await seat.round(bus) is None
    keep = partial(keep_gone_marks, bus, forget_after=FORGET_AFTER, every=timedelta(seconds=0.1))
    async with anyio.create_task_group() as tasks:
        await tasks.start(keep)
        tasks.cancel_scope.cancel()


async def nodes_answer_until(bus: Bus, check: Callable[[dict[str, str]], bool]) -> dict[str, str]:
    """Each node's `because` in the seat's `what=nodes` once `check` holds (its view follows the
    marks a few milliseconds behind a write)."""
    with anyio.fail_after(15):
        while True:
            answer = await ask(bus, {"what": "nodes"})
            because = {entry["node"]: entry["because"] for entry in answer["entries"]}
            if check(because):
                return because
            await anyio.sleep(0.05)


@pytest.mark.usefixtures("server")
async def test_what_nodes_says_which_nodes_collections_forget_and_stops_once_they_are_back(bus: Bus) -> None:
    lease = Lease(bus, node_key("n2"), ttl=timedelta(seconds=30))
    await lease.try_take()
    await lease.release()
    await contribute(bus, "orphan")
    clock = Clock()
    seat = GoneMarks(forget_after=FORGET_AFTER, clock=clock)
    await seat.converge(bus)
    clock.ahead = timedelta(seconds=61)
    await seat.converge(bus)
    since = (await marks(bus))["n2"].since.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    # Leases and gone marks reach the seat's view by separate watches, and n2's mark is written
    # before orphan's: the wait is for n2's release, n2's mark and orphan's mark.
    because = await nodes_answer_until(
        bus,
        lambda b: b.get("n2", "").startswith("lease released") and "forgotten" in b["n2"] and "orphan" in b,
    )
    assert because["n2"].endswith(f"; forgotten by collections since {since}")
    assert because["n2"].startswith("lease released")
    assert "forgotten by collections" in because["orphan"]  # known by its mark alone
    listed = await read_fleet(bus, "n2")  # the answer without the view: one node's mark read
    assert "forgotten by collections" in listed.reports("n2", now=clock(), stale_after=FORGET_AFTER)[0].because

    await Lease(bus, node_key("n2"), ttl=timedelta(seconds=30)).try_take()
    clock.ahead = timedelta(0)
    await seat.converge(bus)
    because = await nodes_answer_until(
        bus, lambda b: b.get("n2", "").startswith("lease renewed") and "forgotten" not in b["n2"]
    )
    assert because["n2"].startswith("lease renewed")
    listed = await read_fleet(bus, "n2")
    assert "forgotten" not in listed.reports("n2", now=clock(), stale_after=FORGET_AFTER)[0].because


async def collect_until(bus: Bus, request: dict[str, str], check: Callable[[dict[str, bool]], bool]) -> dict[str, bool]:
    """Each collect entry's key and whether it is forgotten, once `check` holds."""
    with anyio.fail_after(15):
        while True:
            answer = await ask(bus, {"what": "collect", **request})
            found = {entry["key"]: entry.get("forgotten", False) for entry in answer["entries"]}
            if check(found):
                return found
            await anyio.sleep(0.05)


@pytest.mark.parametrize(
    "request_",
    [{}, {"collection": "shell:zsh:normal"}, {"node": "n2"}],
    ids=["a whole listing, streamed", "one collection, narrowed", "one node, narrowed"],
)
@pytest.mark.usefixtures("server")
async def test_query_collect_says_which_contributions_are_forgotten(bus: Bus, request_: dict[str, str]) -> None:
    await contribute(bus, "n1", "n2")
    await put(bus, fleet.FLEET, fleet.gone_key("n2"), to_json(fleet.Gone(since=datetime.now(UTC))))
    found = await collect_until(bus, request_, lambda f: any(f.values()))
    assert found["n2.shell=3Azsh=3Anormal.web"] is True
    assert found.get("n1.shell=3Azsh=3Anormal.web", False) is False
    answer = await ask(bus, {"what": "collect", **request_})
    entry = next(e for e in answer["entries"] if e["node"] == "n2")
    assert list(entry) == ["key", "node", "collection", "contributor", "revision", "value", "forgotten"]

    mark = await get_direct(bus, fleet.FLEET, fleet.gone_key("n2"))
    assert mark is not None
    await delete(bus, fleet.FLEET, fleet.gone_key("n2"), last=mark.revision)
    found = await collect_until(bus, request_, lambda f: not any(f.values()))
    assert "n2.shell=3Azsh=3Anormal.web" in found


@pytest.mark.usefixtures("server")
async def test_a_listing_without_the_fleet_view_reads_the_marks_itself(bus: Bus) -> None:
    await put(bus, fleet.FLEET, fleet.gone_key("a.b"), to_json(fleet.Gone(since=datetime.now(UTC))))
    await put(bus, fleet.FLEET, "gone.x=zz", b"{}")  # a key of no shape marks no node
    answering = Answering(bus, PageCache(ttl=timedelta(seconds=60), max_listings=4, max_bytes=1 << 20))
    assert await answering.forgotten_tokens("collect") == {"a=2Eb"}
    assert await answering.forgotten_tokens("needs") == frozenset()


@pytest.mark.usefixtures("server")
async def test_the_contributing_nodes_are_read_again_once_a_quarter_of_forget_after_old(bus: Bus) -> None:
    await contribute(bus, "early")
    clock = Clock()
    seat = GoneMarks(forget_after=FORGET_AFTER, clock=clock)
    assert await seat.contributors(bus) == {"early"}
    await contribute(bus, "late")
    clock.ahead = timedelta(seconds=14)
    assert await seat.contributors(bus) == {"early"}
    clock.ahead = timedelta(seconds=15)
    assert await seat.contributors(bus) == {"early", "late"}
