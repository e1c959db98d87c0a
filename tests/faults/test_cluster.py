"""On a three-node JetStream cluster the test starts on loopback: the
seat waits for enough peers instead of exiting, and a listing is never older than the stream's
leader after a server rejoins."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest

from provisioner.seat.buckets import until_enough_peers
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from registry.contract import buckets
from registry.errors import BusError, NoResponders, NotFound
from registry.wire import BucketConfig, Bus, BusOptions, KvItem, connect, create_bucket, current_snapshot, put, snapshot
from tests.cluster import Cluster, cluster
from tests.helpers import in_own_task, logged

log = logging.getLogger(__name__)

SHORT = timedelta(seconds=1)
KEYS = [f"n1.web.config.k{i}" for i in range(20)]
LISTINGS = 300  # of each kind, from a connection to the server that rejoined


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with in_own_task(cluster(tmp_path / "cluster")) as three:
        yield three


def options(urls: tuple[str, ...], name: str = "test") -> BusOptions:
    return BusOptions(servers=urls, name=name, request_timeout=SHORT, reconnect_wait=timedelta(seconds=0.2))


async def test_a_seat_started_before_the_cluster_has_enough_peers_waits_then_serves(servers: Cluster) -> None:
    await servers.start(0)
    stop, ready = anyio.Event(), anyio.Event()
    settings = ServerSettings(bucket_replicas=3)

    async def seat() -> None:
        await run_server(bus_options=options(servers.urls, buckets.SEAT), settings=settings, stop=stop)

    async with anyio.create_task_group() as tg:
        with logged("cannot be made yet") as waiting, logged("no suitable peers for placement") as too_few:
            tg.start_soon(_setting, seat, ready)
            await waiting.wait(within=30)  # one server of three: no meta leader
            await servers.start(1)
            await too_few.wait(within=30)  # two of three: a leader, but not three peers
        assert not ready.is_set()
        await servers.start(2)
        async with connect(options(servers.urls)) as bus:
            with anyio.fail_after(60):
                while not await _answers(bus):
                    await anyio.sleep(0.2)  # polling the verb, deadline above
            info = await bus.jetstream(buckets.REGISTRY.info_api, operation="registry stream info")
            assert info["config"]["num_replicas"] == 3
        stop.set()
    assert ready.is_set()


async def _setting(run: Callable[[], Awaitable[None]], done: anyio.Event) -> None:
    await run()
    done.set()


async def _answers(bus: Bus) -> bool:
    try:
        reply = await bus.request(buckets.VERB_SUBJECT, b"{}")
    except BusError:
        return False
    return bool(json.loads(reply.data).get("entries"))


async def test_a_listing_is_not_older_than_the_leader_after_a_server_rejoins(servers: Cluster) -> None:
    await servers.start()
    async with connect(options(servers.urls)) as writer:
        await until_enough_peers(buckets.NEEDS, lambda: create_bucket(writer, buckets.NEEDS, BucketConfig(replicas=3)))
        await _write_all(writer, b'"before"')
        info = await writer.jetstream(buckets.NEEDS.info_api, operation="needs stream info")
        victim = next(i for i, p in enumerate(servers.peers) if p.name != info["cluster"]["leader"])
        await servers.kill(victim)
        await _write_all(writer, b'"after"')
        await servers.start(victim)
    stale = {"snapshot": 0, "current_snapshot": 0}
    unanswered = {"snapshot": 0, "current_snapshot": 0}
    async with connect(options((servers.peers[victim].url,))) as rejoined:
        for _ in range(LISTINGS):
            for name, read in (("snapshot", snapshot), ("current_snapshot", current_snapshot)):
                items = await _listed(read, rejoined)
                unanswered[name] += items is None
                stale[name] += items is not None and any(item.value != b'"after"' for item in items)
    log.info("stale listings of %d from the rejoined server: %s; unanswered: %s", LISTINGS, stale, unanswered)
    assert stale["current_snapshot"] == 0
    assert unanswered["current_snapshot"] < LISTINGS // 2, "the rejoined server left most listings unanswered"


async def _write_all(bus: Bus, value: bytes) -> None:
    """Writes every key, retrying while the cluster elects a new leader."""
    for key in KEYS:
        with anyio.fail_after(30):
            while True:
                try:
                    await put(bus, buckets.NEEDS, key, value)
                    break
                except BusError:
                    await anyio.sleep(0.2)  # a new leader is being elected


async def _listed(read: Callable[..., Awaitable[list[KvItem]]], bus: Bus) -> list[KvItem] | None:
    try:
        return await read(bus, buckets.NEEDS, ["n1.>"])
    except BusError:  # the rejoined server still settling: no answer is not a stale answer
        return None


RACES = 10
SEAT_LOGGERS = ("provisioner.seat.registry_sync", "registry.wire.lease")


class SeatLog(logging.Handler):
    """What the seats said about the compile lease and the registry."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def count(self, text: str) -> int:
        return sum(text in message for message in self.messages)


@contextmanager
def seats_said() -> Iterator[SeatLog]:
    said = SeatLog()
    loggers = [logging.getLogger(name) for name in SEAT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(said)
        logger.setLevel(logging.INFO)
    try:
        yield said
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(said)
            logger.setLevel(level)


@pytest.mark.parametrize("race", range(RACES), ids=lambda race: f"race {race + 1} of {RACES}")
async def test_two_seats_started_at_once_on_a_fresh_cluster_both_stay_up_and_one_compiles(
    servers: Cluster, race: int
) -> None:
    """The seat that lost the race for the compile lease asked for it before the
    leases bucket's replicated stream answered direct gets, and exited 1 ("nobody answers")."""
    await servers.start()
    stops = [anyio.Event(), anyio.Event()]
    settings = ServerSettings(bucket_replicas=3)
    with seats_said() as said:
        async with anyio.create_task_group() as seats:
            for index, stop in enumerate(stops):
                seat = partial(run_server, bus_options=options(servers.urls, f"seat {index}"), settings=settings)
                seats.start_soon(partial(seat, stop=stop))  # a seat that exits fails the test here
            with anyio.fail_after(60):
                while not (said.count("registry compiled") and said.count("waiting for it to expire")):
                    await anyio.sleep(0.05)  # polling what the seats said, deadline above
            for stop in stops:
                stop.set()
    assert said.count("lease seat.compile taken") == 1, said.messages
    assert said.count("registry compiled") == 1, said.messages
    assert said.count("disagrees with this seat's catalogue") == 0, said.messages


async def test_a_write_while_its_stream_elects_a_leader_is_not_said_to_be_a_missing_stream(servers: Cluster) -> None:
    """Nobody stores a write while the stream's leader is being elected (about
    7 s after the leader is killed); that is no proof that no stream stores its subject."""
    await servers.start()
    async with connect(options(servers.urls)) as writer:
        await until_enough_peers(buckets.NEEDS, lambda: create_bucket(writer, buckets.NEEDS, BucketConfig(replicas=3)))
        await _write_all(writer, b'"before"')
        info = await writer.jetstream(buckets.NEEDS.info_api, operation="needs stream info")
        await servers.kill(next(i for i, p in enumerate(servers.peers) if p.name == info["cluster"]["leader"]))
        failures: list[BusError] = []
        with anyio.fail_after(60):
            while True:
                try:
                    await put(writer, buckets.NEEDS, KEYS[0], b'"after"')
                    break
                except BusError as err:
                    failures.append(err)
                    await anyio.sleep(0.1)  # a new leader is being elected
    assert failures, "the write never failed: no election seen"
    assert not [err for err in failures if isinstance(err, NotFound)], failures[:3]
    leaderless = [err for err in failures if isinstance(err, NoResponders)]
    assert all("no leader yet" in err.reason for err in leaderless), leaderless[:3]
