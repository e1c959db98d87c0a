"""The seat's Prometheus endpoint (provisioner.metrics), on a seat serving a real nats-server."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from pydantic import ValidationError

from mesh_dev.local_nats import LocalNats
from provisioner import ServerSettings
from provisioner.metrics.seat import NODES_AT_ONCE, VERDICTS, FleetCount
from provisioner.seat.buckets import seat_buckets
from provisioner.settings import DEFAULT_STALE_AFTER
from provisioner.verb.nodes import Fleet, LeaseSeen
from provisioner_client.watch.holding import holding
from registry.contract import PENDING_CAUSES, AppliedValue, buckets, to_json
from registry.errors import SettingsError
from registry.runtime import listen_address, serve_metrics
from registry.wire import Bus, BusOptions, Holder, put
from tests.helpers import restartable_nats, serving
from tests.prometheus import Figures, free_port
from tests.provisioner.scrape import fetch, scrape_until


def fleet_is(healthy: int, gone: int) -> Callable[[Figures], bool]:
    def check(found: Figures) -> bool:
        nodes = {v: found[("mesh_seat_nodes", frozenset({("verdict", v)}))] for v in ("healthy", "gone")}
        return found[("mesh_seat_fleet_ready", frozenset())] == 1 and nodes == {"healthy": healthy, "gone": gone}

    return check


async def test_the_seat_serves_the_fleet_its_buckets_lease_and_connections(nats_server: LocalNats, bus: Bus) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    before = time.time()
    async with (
        serving(nats_server.url, metrics_listen=str(port)),
        holding(bus, "n1", timedelta(seconds=15)),
    ):
        refused = "${secret:db}: mesh-vault.secret answered error 403: not yours"
        await put(bus, buckets.APPLIED, "n2.db", to_json(AppliedValue(state="pending", reasons=(refused,))))
        await put(bus, buckets.APPLIED, "n2.app", to_json(AppliedValue(state="applied")))  # no lease: gone
        found, text = await scrape_until(url, fleet_is(healthy=1, gone=1), "n1 healthy, n2 gone")

        def value(name: str, **labels: str) -> float:
            return found[(name, frozenset(labels.items()))]

        nodes = {verdict: value("mesh_seat_nodes", verdict=verdict) for verdict in ("healthy", "stale", "gone")}
        assert nodes == {"healthy": 1, "stale": 0, "gone": 1}
        assert value("mesh_seat_nodes", verdict="over_quota") == 0
        pending = {cause: value("mesh_seat_modules_pending_by_cause", cause=cause) for cause in PENDING_CAUSES}
        assert pending == {cause: int(cause == "verb_refused") for cause in PENDING_CAUSES}
        settings = ServerSettings()
        for bucket in seat_buckets():
            assert value("mesh_seat_bucket_max_bytes", bucket=bucket.name) == settings.bucket_max_bytes
            assert value("mesh_seat_bucket_max_keys", bucket=bucket.name) == -1
        assert value("mesh_seat_bucket_keys", bucket=buckets.APPLIED.name) == 2
        assert value("mesh_seat_bucket_bytes", bucket=buckets.APPLIED.name) > 0
        assert value("mesh_seat_bucket_keys", bucket=buckets.LEASES.name) == 2  # the compile lease, n1's
        assert value("mesh_seat_compile_lease_held") == 1
        assert before - 1 <= value("mesh_seat_compile_lease_since_timestamp_seconds") <= time.time()
        for connection in ("data", "verb", "guard"):
            assert value("mesh_seat_nats_connected", connection=connection) == 1
            assert value("mesh_seat_nats_reconnects_total", connection=connection) == 0
        assert "n1" not in text and "n2" not in text  # no series names a node
        assert (await anyio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/other"))[0] == 404
        assert (await anyio.to_thread.run_sync(fetch, url, "POST"))[0] == 405
    with pytest.raises(urllib.error.URLError):
        fetch(url)  # stopped with the seat


async def test_without_the_setting_nothing_listens(nats_server: LocalNats) -> None:
    assert ServerSettings().metrics_listen is None
    async with serving(nats_server.url):
        pass  # the seat starts and stops with no endpoint: nothing to bind, nothing to refuse


async def test_a_port_already_taken_is_a_settings_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def render() -> bytes:
            return b""

        with pytest.raises(SettingsError, match=f"metrics_listen.*cannot listen on 127.0.0.1:{port}"):
            await serve_metrics(f"127.0.0.1:{port}", render)


@pytest.mark.parametrize(
    ("listen", "address"),
    [
        pytest.param("9464", ("127.0.0.1", 9464), id="a port alone is on loopback"),
        pytest.param("0.0.0.0:9464", ("0.0.0.0", 9464), id="every address when asked"),  # noqa: S104
        pytest.param("[::1]:9464", ("::1", 9464), id="an IPv6 address in brackets"),
    ],
)
def test_the_listen_address(listen: str, address: tuple[str, int]) -> None:
    assert listen_address(listen) == address
    assert ServerSettings(metrics_listen=listen).metrics_listen == listen


@pytest.mark.parametrize("listen", ["", "localhost", "host:port", "1:2:3", "9464 ", "70000", "127.0.0.1:99999"])
def test_a_listen_address_out_of_shape_is_refused(listen: str) -> None:
    with pytest.raises(ValidationError, match="metrics_listen"):
        ServerSettings(metrics_listen=listen)


def by_connection(found: Figures, name: str) -> tuple[float, float]:
    """The sample of `name` for the data connection and for the verb's."""
    return found[(name, frozenset({("connection", "data")}))], found[(name, frozenset({("connection", "verb")}))]


async def test_a_seat_losing_nats_says_so_and_counts_the_reconnect(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"

    def connected(found: Figures) -> tuple[float, float]:
        return by_connection(found, "mesh_seat_nats_connected")

    def reconnects(found: Figures) -> tuple[float, float]:
        return by_connection(found, "mesh_seat_nats_reconnects_total")

    async with restartable_nats(tmp_path / "nats") as nats:
        options = BusOptions(servers=(nats.url,), name=buckets.SEAT, reconnect_wait=timedelta(seconds=0.2))
        async with serving(nats.url, bus_options=options, metrics_listen=str(port)):
            found, _ = await scrape_until(url, lambda f: connected(f) == (1, 1), "both connections up")
            assert reconnects(found) == (0, 0)
            await nats.stop()
            found, _ = await scrape_until(url, lambda f: connected(f) == (0, 0), "both connections down")
            assert found[("mesh_seat_compile_lease_held", frozenset())] == 1  # as last read: the bus is away
            await nats.start()
            found, _ = await scrape_until(url, lambda f: connected(f) == (1, 1), "both connections back")
            assert reconnects(found) == (1, 1)


def mixed_fleet(size: int) -> Fleet:
    """Nodes of every verdict: held and renewed, held and expired, released lately and long ago,
    unreadable holders, applied records without a lease, and over quota."""
    now = datetime.now(UTC)
    over = {f"n{i:05}": "over its quota" for i in range(0, size, 97)}
    fleet = Fleet(over_quota=lambda: over)
    holder = Holder.me(timedelta(seconds=15))
    for i in range(size):
        name, age = f"n{i:05}", timedelta(seconds=(i * 7) % 600)
        match i % 5:
            case 0 | 1:
                fleet.leases[name] = LeaseSeen(i, now - age, released=False, holder=holder)
            case 2:
                fleet.leases[name] = LeaseSeen(i, now - age, released=True)
            case 3:
                fleet.leases[name] = LeaseSeen(i, now - age, released=False, holder=None)
            case _:
                fleet.modules[name] = {"app": (i, False, None, "")}
    return fleet


def by_the_verb(fleet: Fleet, now: datetime) -> dict[str, int]:
    reports = fleet.reports(None, now=now, stale_after=DEFAULT_STALE_AFTER)
    found = Counter(VERDICTS[report.verdict] for report in reports)
    return {verdict: found[verdict] for verdict in VERDICTS.values()}


async def test_the_fleet_is_counted_as_the_verb_judges_it_as_time_passes_and_leases_change() -> None:
    fleet, count = mixed_fleet(2000), FleetCount()
    start = datetime.now(UTC)
    for seconds in (0, 3, 19, 21, 250, 301, 599, 601, 900, 3600):
        now = start + timedelta(seconds=seconds)
        assert await count.count(fleet, now) == by_the_verb(fleet, now), f"{seconds} s on"
        renewed = f"n{seconds:05}"  # a node renews (a new record): its verdict is judged again
        fleet.leases[renewed] = LeaseSeen(seconds, now, released=False, holder=Holder.me(timedelta(seconds=15)))
    counted = await count.count(fleet, start)
    assert min(counted.values()) > 0  # every verdict is in the mix


@pytest.mark.parametrize("released", [False, True], ids=["held", "released"])
@pytest.mark.parametrize("ttl", [timedelta(seconds=15), timedelta(hours=1)], ids=["ttl first", "stale_after first"])
async def test_a_lease_turns_stale_at_the_same_microsecond_for_the_count_and_the_verb(
    released: bool, ttl: timedelta
) -> None:
    fleet, count = Fleet(), FleetCount()
    lease = LeaseSeen(1, datetime.now(UTC), released=released, holder=None if released else Holder.me(ttl))
    fleet.leases["n1"] = lease
    edge = count.healthy_until(lease)
    for now in (edge - timedelta(microseconds=1), edge, edge + timedelta(microseconds=1)):
        assert await count.count(fleet, now) == by_the_verb(fleet, now), now - lease.stored_at


async def test_the_count_lets_the_loop_go() -> None:
    fleet = mixed_fleet(2000)
    others_ran = 0

    async def other_task() -> None:
        nonlocal others_ran
        while True:
            others_ran += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(other_task)
        await anyio.lowlevel.checkpoint()
        ran_before = others_ran
        await FleetCount().count(fleet)
        ran_during = others_ran - ran_before
        tg.cancel_scope.cancel()
    assert ran_during >= 2000 // NODES_AT_ONCE - 1
