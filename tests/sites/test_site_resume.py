"""A site's copies resume soon after a cut link (converged within 5 s), on
the generated configuration: the hub and site 1 with both seats, the link through the tests' relay
(20 ms each way), cut while values change at the hub.

Each copy takes a durable consumer the hub's seat made (`provisioner.seat.site_consumers`) and
resets it when the hub's heartbeats reach it again; a copy that created its own consumer resumed
50 s after a 60 s cut (nats-server's retry), which is why the copies are durable. What is checked
after the cut: a shared config value (a mirror) and n1's `_bound` value (a node's source) changed
at the hub during the cut are at the site, the site's mirror holds as many messages as the hub's
stream, n1's writes go through again. Run with `-s` for the figures (`FIGURE ...`).

Measured (20 ms each way): current again 0.88 s after a 60 s cut (median of 3, static; JWT 0.55
and 0.84 s), 0.18 s after a 5 s cut (median of 6; 1.2 s when the site's server waits its 1 s
before dialling again), 1.2 s when the cut ends while a reset waits for its answer (5.1 s
without the site's seat's resend), 1.1 s after a value changed as the hub came back from a
restart.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import anyio
import pytest

from provisioner.seat.buckets import ensure_buckets
from provisioner.seat.site_consumers import ensure_site_consumers
from provisioner.seat.site_copies import ensure_site_copies
from provisioner.seat.site_resets import resend_lost_resets
from registry.access import read_sites_file
from registry.contract import Bucket, buckets
from registry.errors import BusError
from registry.wire import BucketConfig, Bus, Message, connect, get_direct, put
from tests.helpers import eventually
from tests.sites import generated_hub_and_site
from tests.sites.seat_at_site import CONFIG, DELAY, MODES, NEED, hub_and_site

BOUND = Bucket("postgres_bound", buckets.NEEDS.shape)
RESUMED_WITHIN = 15.0  # seconds: the bound asserted (5 s is the aim, measured and said in FIGURE lines)
# A long cut: the copies stall (no heartbeat for 10 s: 10 to 20 s in), nats-server's reset of their
# consumer is sent into the cut and lost (it waits 5 s for the answer), and the next waits on its
# backoff, as after 60 s; a longer cut only deepens that backoff, which the durable consumer's reset
# on its heartbeat does not wait for. The test checks a reset was lost in it.
LONG_CUT = 30.0


async def value_at(bus: Bus, bucket: Bucket, key: str) -> bytes | None:
    got = await get_direct(bus, bucket, key)
    return None if got is None else got.value


async def seconds_until(probe: Callable[[], Awaitable[bool]], within: float) -> float:
    """Seconds until `probe()` holds, asked every 20 ms."""
    start = time.monotonic()
    with anyio.fail_after(within):
        while not await probe():
            await anyio.sleep(0.02)
    return time.monotonic() - start


async def resumed_after_a_cut(
    tmp_path: Path, seconds: float, *, jwt: bool = False, with_a_lost_reset: bool = False
) -> float:
    """Cuts the link for `seconds` while values change at the hub; the seconds until both site
    copies (a mirror and a source) hold them once it is back. `with_a_lost_reset`: the cut lasts
    until the config mirror's reset of its consumer is sent (nats-server sends one when the copy
    stalls, 10 to 20 s in, and again on a backoff), and ends 0.3 s after it, while the copy waits
    for an answer that never comes."""
    async with hub_and_site(tmp_path, jwt=jwt) as mesh, AsyncExitStack() as stack:
        n1 = await stack.enter_async_context(connect(mesh.options(mesh.site, "node-n1")))
        hub = await stack.enter_async_context(connect(mesh.options(mesh.hub, "seat")))
        await put(hub, CONFIG, "db=3Aurl", b'"before"')
        await put(hub, BOUND, "n1.db.postgres", b'"before"')
        await eventually(lambda: _holds(value_at(n1, CONFIG, "db=3Aurl"), b'"before"'), "the config value at the site")
        await eventually(
            lambda: _holds(value_at(n1, BOUND, "n1.db.postgres"), b'"before"'), "the bound value at the site"
        )

        site_data = await stack.enter_async_context(connect(mesh.options(mesh.site, "seat-site1")))
        resets = anyio.Event()

        async def reset_sent(msg: Message) -> None:
            if CONFIG.stream in msg.subject:
                resets.set()

        await site_data.subscribe(f"$JS.hub.API.CONSUMER.RESET.{CONFIG.stream}.>", reset_sent)
        mesh.relay.cut()
        resets = anyio.Event()
        for index in range(3):  # changes all through the cut
            await anyio.sleep(seconds / 3)
            await put(hub, CONFIG, "db=3Aurl", f'"during {index}"'.encode())
            await put(hub, BOUND, "n1.db.postgres", f'"during {index}"'.encode())
        assert await value_at(n1, CONFIG, "db=3Aurl") == b'"before"'  # the site's copy, stale
        if seconds >= LONG_CUT:
            assert resets.is_set(), "the config mirror sent no reset of its consumer into the cut: too short a cut"
        if with_a_lost_reset:  # the link back just after the mirror's reset went nowhere
            resets = anyio.Event()
            with anyio.fail_after(60):
                await resets.wait()
            await anyio.sleep(0.3)
        mesh.relay.restore()

        async def current() -> bool:
            return await value_at(n1, CONFIG, "db=3Aurl") == b'"during 2"' and (
                await value_at(n1, BOUND, "n1.db.postgres") == b'"during 2"'
            )

        took = await seconds_until(current, RESUMED_WITHIN + 30)
        hub_info = await hub.jetstream(CONFIG.info_api, operation="hub's config")
        site_info = await site_data.jetstream(CONFIG.info_api, operation="site's config")
        assert site_info["state"]["messages"] == hub_info["state"]["messages"]
        # n1's writes go through again (fail fast, the link is back)
        await eventually(lambda: _written(n1), "n1's write through the link")
        await eventually(lambda: _holds(value_at(n1, buckets.NEEDS, "n1.app.secret.db"), NEED), "n1's need at the site")
    return took


async def _holds(value: Awaitable[bytes | None], wanted: bytes) -> bool | None:
    return True if await value == wanted else None


async def _written(n1: Bus) -> bool | None:
    try:
        await put(n1, buckets.NEEDS, "n1.app.secret.db", NEED)
    except BusError:
        return None
    return True


@pytest.mark.slow
@pytest.mark.parametrize("jwt", MODES)
async def test_the_site_copies_are_current_soon_after_a_cut_that_lost_their_reset(tmp_path: Path, jwt: bool) -> None:
    took = await resumed_after_a_cut(tmp_path, LONG_CUT, jwt=jwt)
    print(f"FIGURE site copies current {took:.2f} s after a {LONG_CUT:.0f} s cut ({'JWT' if jwt else 'static'})")
    assert took < RESUMED_WITHIN


@pytest.mark.slow
async def test_the_site_copies_are_current_soon_after_a_5s_cut(tmp_path: Path) -> None:
    took = await resumed_after_a_cut(tmp_path, 5)
    print(f"FIGURE site copies current {took:.2f} s after a 5 s cut")
    assert took < RESUMED_WITHIN


@pytest.mark.slow
async def test_a_reset_lost_in_the_cut_is_sent_again_once_the_link_is_back(tmp_path: Path) -> None:
    """The unlucky cut: without the site's seat's resend (`provisioner.seat.site_resets`), the copy
    waits out nats-server's 5 s for the lost reset's answer."""
    took = await resumed_after_a_cut(tmp_path, 9, with_a_lost_reset=True)
    print(f"FIGURE site copies current {took:.2f} s after a cut ending while a reset was lost")
    assert took < RESUMED_WITHIN


@pytest.mark.slow
async def test_the_site_copies_are_current_soon_after_a_hub_restart(tmp_path: Path) -> None:
    """The hub's server restarted (its store kept): the durable consumers are still there, and a
    value changed as it comes back reaches the site's copy."""
    async with generated_hub_and_site(tmp_path, delay=DELAY) as sites:
        topology = read_sites_file(sites.out / "sites" / "sites.json")
        entry = topology.site("site1")
        assert entry is not None
        async with connect(sites.options(sites.hub, "seat")) as hub:
            await ensure_buckets(hub, BucketConfig(), [])
            await ensure_site_consumers(hub, topology)
            await put(hub, CONFIG, "db=3Aurl", b'"before"')
        async with connect(sites.options(sites.site, "seat-site1")) as site, anyio.create_task_group() as tasks:
            await ensure_site_copies(site, entry, hub_domain="hub", config=BucketConfig())
            await tasks.start(partial(resend_lost_resets, site, "hub"))
            await eventually(
                lambda: _holds(value_at(site, CONFIG, "db=3Aurl"), b'"before"'),
                "the config value at the site",
                within=30,
            )
            await sites.restart_hub()
            async with connect(sites.options(sites.hub, "seat")) as hub:
                await put(hub, CONFIG, "db=3Aurl", b'"after"')
            took = await seconds_until(lambda: _is(value_at(site, CONFIG, "db=3Aurl"), b'"after"'), 120)
            tasks.cancel_scope.cancel()
    print(f"FIGURE site copy current {took:.2f} s after a value changed as the hub came back from a restart")


async def _is(value: Awaitable[bytes | None], wanted: bytes) -> bool:
    return await value == wanted
