"""How a node at a site writes its keys: fail fast through the hub, or buffered at the
site and sourced by the hub. Each test runs a hub and a site on real nats-servers in their own
JetStream domains, the site a leaf node of the hub through a relay adding 20 ms each way
(`tests.sites`), and writes as the node client does (`registry.wire.kv`, `registry.wire.lease`).

What they show, and the decision it leads to, is in `docs/sites-write-path.md`. The figures each
test prints (`-s`) are measurements, not assertions: the assertions are about what is stored where.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest

from provisioner.verb.nodes import REMOVED_LEASE
from registry.contract import Bucket, buckets
from registry.errors import BusError, BusTimeout, NoResponders, WrongLastSequence
from registry.wire import (
    Bus,
    KvItem,
    Lease,
    LeaseLost,
    converge,
    delete,
    get_direct,
    get_stamped,
    node_key,
    purge,
    update,
)
from tests.helpers import NEVER, last_sequence, wait_for
from tests.sites import HUB, NODE, SITE, Sites, WritePath, hub_and_site, make_streams, site_mirror

DELAY = 0.02  # seconds each way across the relay: a WAN link
NEEDS, COLLECT, LEASES = buckets.NEEDS, buckets.COLLECT, buckets.LEASES
LEASE_KEY = node_key(NODE)


@dataclass
class Parties:
    """The pair running, the seat at the hub, the site's data account, the node at its site."""

    sites: Sites
    seat: Bus
    site: Bus
    node: Bus


@asynccontextmanager
async def running(tmp_path: Path, path: WritePath, site_extra: str = "") -> AsyncIterator[Parties]:
    pair = hub_and_site(tmp_path, path, delay=DELAY, site_extra=site_extra)
    async with pair as sites, sites.seat() as seat, sites.site_data() as site:
        await make_streams(sites, seat, site)
        async with sites.node(request_timeout=timedelta(seconds=2)) as node:
            parties = Parties(sites, seat, site, node)
            await _until_the_link_carries(parties)
            yield parties


async def _until_the_link_carries(p: Parties) -> None:
    """Waits until a node's write crosses the leaf link: through the node's import (fail fast),
    or into the hub's bucket from the site's (buffered)."""
    probe = f"{NODE}.probe"
    if p.sites.path == "fail fast":
        await seconds_until(lambda: _written(p.node, NEEDS, probe), within=10)
    else:
        await update(p.node, NEEDS, probe, b"probe", last=0)
        await seconds_until(holds(p.seat, NEEDS, probe, b"probe"), within=10)


async def _link_is_away(node: Bus) -> bool:
    """Whether a node's write (one the hub would refuse, storing nothing) finds nobody to take it."""
    try:
        await update(node, NEEDS, f"{NODE}.probe", b"", last=NEVER)
    except NoResponders:
        return True
    except (WrongLastSequence, BusTimeout):
        return False
    raise AssertionError("a write expecting a revision never reached was stored")


async def _hub_is_away(site: Bus) -> bool:
    """Whether a request of the site's data account to the hub's JetStream, across the link, finds
    nobody to take it."""
    try:
        await site.request(f"$JS.{HUB}.API.INFO", reply_wait=timedelta(seconds=0.5), operation="the hub's account")
    except NoResponders:
        return True
    except BusTimeout:
        return False
    return False


async def _written(bus: Bus, bucket: Bucket, key: str) -> bool:
    try:
        await update(bus, bucket, key, b"probe", last=0)
    except WrongLastSequence:
        return True
    except (NoResponders, BusTimeout):
        return False
    return True


async def seconds_until(check: Callable[[], Awaitable[bool]], within: float) -> float:
    """Seconds until `check()` holds, asked every 20 ms; fails the test past `within`."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > within:
            pytest.fail(f"not within {within} s")
        await anyio.sleep(0.02)
    return time.monotonic() - started


def holds(bus: Bus, bucket: Bucket, key: str, value: bytes | None) -> Callable[[], Awaitable[bool]]:
    """Whether `key` holds `value` (None: a delete marker) as `bus` reads it."""

    async def check() -> bool:
        item = await get_direct(bus, bucket, key)
        if value is None:
            return item is not None and item.deleted
        return item is not None and not item.deleted and item.value == value

    return check


async def stored_headers(bus: Bus, bucket: Bucket, key: str) -> str:
    """The headers of `key`'s latest message as its stream stores them."""
    answer = await bus.jetstream(bucket.message_get_api, {"last_by_subj": bucket.subject(key)}, operation="headers")
    return base64.b64decode(answer["message"].get("hdrs") or b"").decode()


async def must_get(bus: Bus, bucket: Bucket, key: str) -> KvItem:
    item = await get_direct(bus, bucket, key)
    assert item is not None, f"{key} not found"
    return item


def figure(what: str, value: float, unit: str = "ms") -> None:
    shown = value * 1000 if unit == "ms" else value
    print(f"FIGURE {what}: {shown:.1f} {unit}")  # read with -s into docs/sites-write-path.md


# ---------------------------------------------------------------------------------------------
# A. Fail fast: the node's writes cross the link and are decided by the hub's bucket.


async def test_fail_fast_writes_are_decided_at_the_hub_and_read_back_at_the_site(tmp_path: Path) -> None:
    async with running(tmp_path, "fail fast") as p:
        started = time.perf_counter()
        first = await update(p.node, NEEDS, f"{NODE}.app", b"1", last=0)
        figure("fail fast: one conditional write across the link (20 ms each way)", time.perf_counter() - started)
        with pytest.raises(WrongLastSequence):
            await update(p.node, NEEDS, f"{NODE}.app", b"again", last=0)  # create-if-absent, refused
        second = await update(p.node, NEEDS, f"{NODE}.app", b"2", last=first)
        with pytest.raises(WrongLastSequence):
            await update(p.node, NEEDS, f"{NODE}.app", b"3", last=first)  # a stale expected revision
        with pytest.raises(WrongLastSequence):
            await delete(p.node, NEEDS, f"{NODE}.app", last=first)
        marker = await delete(
            p.node, NEEDS, f"{NODE}.gone", last=await update(p.node, NEEDS, f"{NODE}.gone", b"x", last=0)
        )

        at_hub = await must_get(p.seat, NEEDS, f"{NODE}.app")
        assert at_hub.revision == second, "the revision the writer is told is the hub's"
        lag = await seconds_until(holds(p.node, NEEDS, f"{NODE}.gone", None), within=5)
        figure("fail fast: a write seen in the site's mirror after its ack", lag)
        mirrored = await get_stamped(p.node, NEEDS, f"{NODE}.app")
        hub_stamped = await get_stamped(p.seat, NEEDS, f"{NODE}.app")
        assert mirrored is not None and hub_stamped is not None
        assert mirrored.item.revision == second, "the site's mirror keeps the hub's revisions"
        assert mirrored.stored_at == hub_stamped.stored_at, "and the hub's time stamps"
        stamp = await must_get(p.node, NEEDS, f"{NODE}.>")  # what the client compares to its memory
        assert stamp.revision == marker == (await must_get(p.seat, NEEDS, f"{NODE}.>")).revision
        assert (await must_get(p.node, NEEDS, f"{NODE}.gone")).deleted, "a delete marker is mirrored as one"

        desired = {f"{NODE}.many.{number}": b"1" for number in range(100)}
        started = time.perf_counter()
        changes = await converge(p.node, NEEDS, [], desired, in_flight=64)  # as the client converges
        figure("fail fast: a converge of 100 new keys, 64 in flight", time.perf_counter() - started)
        assert len(changes.written) == 100


async def test_fail_fast_lease_and_removal_are_decided_in_one_place(tmp_path: Path) -> None:
    async with running(tmp_path, "fail fast") as p:
        lease = Lease(p.node, LEASE_KEY, ttl=timedelta(seconds=30))
        await lease.try_take()
        await lease.renew()
        renewed = await must_get(p.seat, LEASES, LEASE_KEY)
        await delete(p.seat, LEASES, LEASE_KEY, last=renewed.revision, note=REMOVED_LEASE)  # remove-node

        async def renewal_finds_it_lost() -> bool:
            try:
                await lease.renew()
            except LeaseLost:
                return True
            except BusError:  # the site's mirror not yet past the removal: the lease says retry
                return False
            pytest.fail("a renewal after remove-node was stored")

        await seconds_until(renewal_finds_it_lost, within=5)
        removed = await must_get(p.seat, LEASES, LEASE_KEY)
        assert removed.deleted and removed.value == REMOVED_LEASE, "the removal stands: nothing resurrected it"

        key = f"{NODE}.app"
        written = await update(p.node, NEEDS, key, b"1", last=0)
        await delete(p.seat, NEEDS, key, last=written)  # remove-node's delete of a node key
        with pytest.raises(WrongLastSequence):
            await update(p.node, NEEDS, key, b"1", last=written)  # the node's next write, from what it knew


async def test_fail_fast_a_purge_at_the_hub_is_not_mirrored(tmp_path: Path) -> None:
    """The quota guard's purge (`STREAM.PURGE` with a filter) is no message: the site's mirror
    keeps the purged keys and the node's stamp there does not move, so a client that trusts its
    stamp never registers again. The seat can purge the site's mirror too, through the site's
    JetStream domain (`$JS.site1.API`), with the same filter."""
    async with running(tmp_path, "fail fast") as p:
        for name in ("a", "b"):
            await update(p.node, NEEDS, f"{NODE}.{name}", b"1", last=0)
        await seconds_until(holds(p.node, NEEDS, f"{NODE}.b", b"1"), within=5)
        stamp = (await must_get(p.node, NEEDS, f"{NODE}.>")).revision
        assert await purge(p.seat, NEEDS, f"{NODE}.>") == 3  # a, b and the link probe
        await update(p.seat, NEEDS, "other.key", b"1", last=0)  # the mirror has moved past the purge
        await seconds_until(holds(p.site, NEEDS, "other.key", b"1"), within=5)
        assert await get_direct(p.seat, NEEDS, f"{NODE}.a") is None
        assert (await must_get(p.node, NEEDS, f"{NODE}.a")).value == b"1", "the mirror still holds it"
        assert (await must_get(p.node, NEEDS, f"{NODE}.>")).revision == stamp, "the node's stamp did not move"

        body = json.dumps({"filter": NEEDS.subject(f"{NODE}.>")}).encode()  # the seat, through the site's domain
        answer = await p.seat.request(f"$JS.{SITE}.API.{NEEDS.purge_api}", body, operation="purge the site's mirror")
        assert json.loads(answer.data)["purged"] == 3, "a mirror can be purged by the same filter"
        assert await get_direct(p.node, NEEDS, f"{NODE}.>") is None


async def test_fail_fast_during_a_cut_the_write_fails_at_once_and_a_stall_times_out(tmp_path: Path) -> None:
    async with running(tmp_path, "fail fast") as p:
        key = f"{NODE}.app"
        revision = await update(p.node, NEEDS, key, b"before", last=0)
        p.sites.relay.cut()
        await wait_for(partial(_link_is_away, p.node), "the site's server saw its leaf connection close")
        failures = []
        for _ in range(5):
            started = time.perf_counter()
            with pytest.raises(NoResponders):
                await update(p.node, NEEDS, key, b"during", last=revision)
            failures.append(time.perf_counter() - started)
        figure("fail fast, link cut: slowest of 5 writes to fail (NoResponders)", max(failures))
        assert (await must_get(p.seat, NEEDS, key)).value == b"before"

        p.sites.relay.restore()
        back = await seconds_until(lambda: _written_over(p.node, key, b"after", revision), within=10)
        figure("fail fast, link restored: until a write is stored again", back, "s")
        revision = (await must_get(p.seat, NEEDS, key)).revision

        p.sites.relay.stall()  # the link stops carrying bytes; nobody is told
        started = time.perf_counter()
        with pytest.raises(BusTimeout):
            await update(p.node, NEEDS, key, b"stalled", last=revision)
        figure("fail fast, link stalled: a write gives up after the bus timeout", time.perf_counter() - started)
        p.sites.relay.restore()
        late = await seconds_until(holds(p.seat, NEEDS, key, b"stalled"), within=10)
        figure("fail fast, link unstalled: the write given up on is stored at the hub after", late)
        with pytest.raises(WrongLastSequence):  # its writer retrying from what it knew learns so
            await update(p.node, NEEDS, key, b"stalled", last=revision)


async def test_fail_fast_a_stalled_link_fails_fast_once_the_site_pings_it_dead(tmp_path: Path) -> None:
    """nats-server pings a leaf link every `ping_interval` (2 min by default) and drops it after
    `ping_max` unanswered: until then a silent link makes every write time out. Pinged every
    second, the site drops it within about 3 s and writes fail at once again; what the link held
    is gone with it."""
    async with running(tmp_path, "fail fast", site_extra='ping_interval: "1s"\nping_max: 2') as p:
        key = f"{NODE}.app"
        revision = await update(p.node, NEEDS, key, b"before", last=0)
        p.sites.relay.stall()
        started, timeouts = time.perf_counter(), 0
        while time.perf_counter() - started < 30:
            try:
                await update(p.node, NEEDS, key, b"stalled", last=revision)
            except BusTimeout:
                timeouts += 1
                continue
            except NoResponders:
                break
            pytest.fail("a write crossed a stalled link")
        else:
            pytest.fail("the site never dropped its stalled leaf link")
        figure(
            f"fail fast, link stalled, pinged every 1 s: until writes fail at once ({timeouts} timed out)",
            time.perf_counter() - started,
            "s",
        )
        p.sites.relay.restore()
        await seconds_until(lambda: _written_over(p.node, key, b"after", revision), within=10)
        assert (await must_get(p.seat, NEEDS, key)).revision == revision + 1, "the stalled writes were never stored"


async def _written_over(node: Bus, key: str, value: bytes, last: int) -> bool:
    try:
        await update(node, NEEDS, key, value, last=last)
    except (NoResponders, BusTimeout):
        return False
    return True


async def test_fail_fast_hub_restart(tmp_path: Path) -> None:
    async with running(tmp_path, "fail fast") as p:
        key = f"{NODE}.app"
        revision = await update(p.node, NEEDS, key, b"before", last=0)
        await p.sites.hub.stop()
        with pytest.raises((NoResponders, BusTimeout)):
            await update(p.node, NEEDS, key, b"during", last=revision)
        await p.sites.tasks.start(p.sites.hub.run)
        back = await seconds_until(lambda: _written_over(p.node, key, b"after", revision), within=20)
        figure("fail fast, hub restarted: until a write is stored again", back, "s")
        async with p.sites.seat() as seat:
            assert (await must_get(seat, NEEDS, key)).revision == revision + 1, "stored once"


# ---------------------------------------------------------------------------------------------
# B. Buffered: the site's bucket acknowledges the node's writes; the hub's bucket sources it.


async def test_buffered_writes_reach_the_hub_unconditionally_with_other_revisions_and_stamps(tmp_path: Path) -> None:
    async with running(tmp_path, "buffered") as p:
        for name in ("a", "b", "c"):  # other parties' keys at the hub: its sequence runs ahead
            await update(p.seat, NEEDS, f"other.{name}", b"1", last=0)
        key = f"{NODE}.app"
        started = time.perf_counter()
        first = await update(p.node, NEEDS, key, b"1", last=0)
        figure("buffered: one conditional write acknowledged at the site", time.perf_counter() - started)
        with pytest.raises(WrongLastSequence):
            await update(p.node, NEEDS, key, b"again", last=0)  # decided at the site
        second = await update(p.node, NEEDS, key, b"2", last=first)
        gone = await update(p.node, NEEDS, f"{NODE}.gone", b"x", last=0)
        await delete(p.node, NEEDS, f"{NODE}.gone", last=gone)

        reached = await seconds_until(holds(p.seat, NEEDS, f"{NODE}.gone", None), within=5)
        figure("buffered: the last write seen at the hub after its site ack", reached)
        at_site = await get_stamped(p.node, NEEDS, key)
        at_hub = await get_stamped(p.seat, NEEDS, key)
        assert at_site is not None and at_hub is not None and at_hub.item.value == b"2"
        assert at_site.item.revision == second
        assert at_hub.item.revision != second, "the hub's revision is its own"
        assert at_hub.stored_at > at_site.stored_at, "the hub's stamp is when the copy arrived"
        headers = await stored_headers(p.seat, NEEDS, key)
        assert "Nats-Stream-Source" in headers and "Expected" not in headers, "stored at the hub unconditionally"
        assert "KV-Operation: DEL" in await stored_headers(p.seat, NEEDS, f"{NODE}.gone")

        with pytest.raises(WrongLastSequence):  # what a verb at the hub would tell the node to expect
            await update(p.node, NEEDS, key, b"3", last=at_hub.item.revision)


async def test_buffered_cut_writes_are_acknowledged_at_the_site_and_follow_in_order(tmp_path: Path) -> None:
    async with running(tmp_path, "buffered") as p:
        key = f"{NODE}.counter"
        revision = await update(p.node, NEEDS, key, b"0", last=0)
        await seconds_until(holds(p.seat, NEEDS, key, b"0"), within=5)
        hub_before = await last_sequence(p.seat, NEEDS)
        assert not await _hub_is_away(p.site), "the premise: the site's requests reach the hub"
        p.sites.relay.cut()
        await wait_for(partial(_hub_is_away, p.site), "the site's server saw its leaf connection close")

        started = time.perf_counter()
        for count in range(1, 21):
            revision = await update(p.node, NEEDS, key, str(count).encode(), last=revision)
        for name in ("k1", "k2", "k3"):
            await update(p.node, NEEDS, f"{NODE}.{name}", b"1", last=0)
        gone = await must_get(p.node, NEEDS, f"{NODE}.k2")
        await delete(p.node, NEEDS, f"{NODE}.k2", last=gone.revision)
        figure("buffered, link cut: 24 writes acknowledged at the site", time.perf_counter() - started)
        # the time spent under the cut is what is simulated, not a wait for a state: no event says
        # that a copy did not cross (over the link up, one crosses within tens of ms)
        await anyio.sleep(1.0)
        assert (await must_get(p.seat, NEEDS, key)).value == b"0", "nothing crosses while cut"

        p.sites.relay.restore()
        reached = await seconds_until(holds(p.seat, NEEDS, f"{NODE}.k2", None), within=20)
        figure("buffered, link restored: until the last write is at the hub", reached, "s")
        assert (await must_get(p.seat, NEEDS, key)).value == b"20", "the latest value, nothing lost"
        order = [(await must_get(p.seat, NEEDS, f"{NODE}.{name}")).revision for name in ("counter", "k1", "k3", "k2")]
        assert order == sorted(order), "in the site's order"
        await update(p.node, NEEDS, f"{NODE}.barrier", b"1", last=0)  # follows in the site's order
        await seconds_until(holds(p.seat, NEEDS, f"{NODE}.barrier", b"1"), within=20)
        # One message per key touched: the site's bucket keeps one per key, so the 20 values in
        # between were gone before the link returned; none arrived twice (the barrier's one more).
        assert await last_sequence(p.seat, NEEDS) == hub_before + 5


async def test_buffered_hub_writes_to_node_keys_stay_at_the_hub(tmp_path: Path) -> None:
    async with running(tmp_path, "buffered") as p:
        key = f"{NODE}.app"
        await update(p.node, NEEDS, key, b"1", last=0)
        lease = Lease(p.node, LEASE_KEY, ttl=timedelta(seconds=30))
        await lease.try_take()
        await seconds_until(holds(p.seat, LEASES, LEASE_KEY, (await must_get(p.node, LEASES, LEASE_KEY)).value), 5)
        await seconds_until(holds(p.seat, NEEDS, key, b"1"), within=5)

        # remove-node at the hub: a delete marker there, conditional on the hub's revisions
        await delete(p.seat, NEEDS, key, last=(await must_get(p.seat, NEEDS, key)).revision)
        hub_lease = await must_get(p.seat, LEASES, LEASE_KEY)
        await delete(p.seat, LEASES, LEASE_KEY, last=hub_lease.revision, note=REMOVED_LEASE)
        await update(p.node, NEEDS, f"{NODE}.other", b"1", last=0)
        await seconds_until(holds(p.seat, NEEDS, f"{NODE}.other", b"1"), within=5)
        assert (await must_get(p.node, NEEDS, key)).value == b"1", "the site never hears of the removal"
        assert (await must_get(p.seat, NEEDS, key)).deleted, "another key's write does not resurrect it"
        await lease.renew()  # decided at the site, where nothing was removed
        renewed = await seconds_until(lambda: _live(p.seat, LEASES, LEASE_KEY), within=5)
        figure("buffered: a renewal at the site overwrote remove-node's marker at the hub after", renewed)

        # the quota guard's purge at the hub
        stamp = (await must_get(p.node, NEEDS, f"{NODE}.>")).revision
        await purge(p.seat, NEEDS, f"{NODE}.>")
        await update(p.node, NEEDS, f"{NODE}.next", b"1", last=0)
        await seconds_until(holds(p.seat, NEEDS, f"{NODE}.next", b"1"), within=5)
        assert await get_direct(p.seat, NEEDS, f"{NODE}.other") is None, "purged at the hub for good"
        assert (await must_get(p.node, NEEDS, f"{NODE}.other")).value == b"1", "still at the site"
        assert (await must_get(p.node, NEEDS, f"{NODE}.>")).revision > stamp, "(moved by the node's own write)"


async def _live(bus: Bus, bucket: Bucket, key: str) -> bool:
    item = await get_direct(bus, bucket, key)
    return item is not None and not item.deleted


async def test_buffered_rollup_from_a_weak_site_bucket_is_stored_at_the_hub_without_effect(tmp_path: Path) -> None:
    """The seat's buckets refuse rollups; a site bucket made weaker (by hand) would take a node's
    `Nats-Rollup: all` and wipe itself. Sourced, the message is stored at the hub as it is, header
    included, and wipes nothing there."""
    async with running(tmp_path, "buffered") as p:
        stream = await p.site.jetstream(COLLECT.info_api, operation="info")
        await p.site.jetstream(COLLECT.update_api, {**stream["config"], "allow_rollup_hdrs": True}, operation="weaken")
        await update(p.seat, COLLECT, "other.a", b"1", last=0)
        await update(p.node, COLLECT, f"{NODE}.x", b"1", last=0)
        await update(p.node, COLLECT, f"{NODE}.y", b"1", last=0)
        await seconds_until(holds(p.seat, COLLECT, f"{NODE}.y", b"1"), within=5)
        await p.node.store(COLLECT.subject(f"{NODE}.x"), b"wipe", headers={"Nats-Rollup": "all"}, operation="rollup")
        assert await get_direct(p.node, COLLECT, f"{NODE}.y") is None, "the weak site bucket wiped itself"
        await seconds_until(holds(p.seat, COLLECT, f"{NODE}.x", b"wipe"), within=5)
        assert "Nats-Rollup: all" in await stored_headers(p.seat, COLLECT, f"{NODE}.x")
        assert (await must_get(p.seat, COLLECT, "other.a")).value == b"1", "the hub wiped nothing"
        assert (await must_get(p.seat, COLLECT, f"{NODE}.y")).value == b"1"


@pytest.mark.slow
async def test_buffered_hub_restart_brings_the_writes_once_but_late(tmp_path: Path) -> None:
    async with running(tmp_path, "buffered") as p:
        key = f"{NODE}.counter"
        revision = await update(p.node, NEEDS, key, b"0", last=0)
        await seconds_until(holds(p.seat, NEEDS, key, b"0"), within=5)
        hub_before = await last_sequence(p.seat, NEEDS)
        await p.sites.hub.stop()
        for count in range(1, 11):
            revision = await update(p.node, NEEDS, key, str(count).encode(), last=revision)
        await update(p.node, NEEDS, f"{NODE}.k1", b"1", last=0)
        await p.sites.tasks.start(p.sites.hub.run)
        async with p.sites.seat() as seat:
            reached = await seconds_until(holds(seat, NEEDS, f"{NODE}.k1", b"1"), within=90)
            figure("buffered, hub restarted: until the writes made meanwhile are at the hub", reached, "s")
            assert (await must_get(seat, NEEDS, key)).value == b"10"
            await update(p.node, NEEDS, f"{NODE}.barrier", b"1", last=0)  # follows in the site's order
            await seconds_until(holds(seat, NEEDS, f"{NODE}.barrier", b"1"), within=20)
            assert await last_sequence(seat, NEEDS) == hub_before + 3, "one message per key, none twice"


async def test_buffered_a_site_bucket_and_a_mirror_of_the_hub_bucket_both_answer_its_direct_gets(
    tmp_path: Path,
) -> None:
    """A site that keeps its own bucket for its nodes' writes cannot also read the hub's bucket of
    the same name through a `mirror_direct` mirror: both answer `DIRECT.GET.KV_<bucket>`, in one
    queue group, so a get is answered by either."""
    async with running(tmp_path, "buffered") as p:
        hub_copy = {**site_mirror(NEEDS), "name": f"{NEEDS.stream}_hub"}
        await p.site.jetstream(f"STREAM.CREATE.{hub_copy['name']}", hub_copy, operation="mirror the hub's bucket")
        await update(p.seat, NEEDS, "other.x", b"hub", last=0)
        await update(p.site, NEEDS, "other.x", b"site", last=0)
        await seconds_until(lambda: _answered_by_both(p.site, NEEDS, "other.x"), within=10)


async def _answered_by_both(bus: Bus, bucket: Bucket, key: str) -> bool:
    answers = {(await must_get(bus, bucket, key)).value for _ in range(20)}
    return answers == {b"hub", b"site"}
