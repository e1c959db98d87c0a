"""The seat is held once: two seats with disagreeing catalogues on one bus, one
compiles, the other says so and never writes, a watching client rewrites nothing; the other
takes over once the compiling seat stops.

The first check asked for a minute of two seats at a 1 s compile interval: what counts is the compiles
(and the client's refreshes) that go by, so the interval and the client's timers run at a fifth
of that, and sixty compiles stand for the minute."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import stand_ins
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from provisioner_client.reconcile import ClientPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import Bucket, KeyShape, RegistryEntry, buckets
from registry.wire import SKEW, BucketConfig, Bus, BusOptions, create_bucket, get_latest, put
from tests.helpers import EXAMPLES, NODE, last_sequence, logged, sh_env

log = logging.getLogger(__name__)

SCALE = 5
INTERVAL = timedelta(seconds=1) / SCALE
TTL = timedelta(seconds=2)
TAKEOVER_BOUND = TTL + SKEW + TTL / 3 + INTERVAL  # docs/verb.md, "The registry"
TIMING = WatchTiming(
    debounce=timedelta(seconds=0.1) / SCALE,
    refresh=timedelta(seconds=1) / SCALE,
    poll=timedelta(seconds=0.2) / SCALE,
    backoff_max=timedelta(seconds=1) / SCALE,
)

OTHER_CONFIG = Bucket("mesh-config_other", KeyShape("<name>"))
SEAT_A = """
[domains.pki]
module = "mesh-pki"
kinds = ["cert"]
verb = "mesh-pki.cert"
"""
SEAT_B = """
[domains.config]
module = "mesh-config"
kinds = ["config"]
bucket = "mesh-config_other"
key = "<name>"
"""


class Compiles(logging.Handler):
    """Counts the compiles logged, and wakes whoever waits for a number of them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self._event = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("registry compiled"):
            self.count += 1
            self._event.set()
            self._event = anyio.Event()

    async def until(self, count: int, within: float) -> None:
        with anyio.fail_after(within):
            while self.count < count:
                await self._event.wait()


@asynccontextmanager
async def seat(url: str, domains: Path) -> AsyncIterator[anyio.Event]:
    """A seat running in-process for the block, or until the event it yields is set."""
    stop = anyio.Event()
    settings = ServerSettings(domains_file=domains, compile_interval=INTERVAL, compile_lease_ttl=TTL)
    run = partial(run_server, bus_options=BusOptions(servers=(url,), name=buckets.SEAT), settings=settings, stop=stop)
    async with anyio.create_task_group() as tasks:
        await tasks.start(run)
        try:
            yield stop
        finally:
            stop.set()


def stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.env"))}


async def config_bucket(bus: Bus) -> str | None:
    item = await get_latest(bus, buckets.REGISTRY, "config")
    if item is None:
        return None
    return RegistryEntry.model_validate_json(item.value).answer.model_dump().get("bucket")


@pytest.fixture
def plan(tmp_path: Path) -> ClientPlan:
    manifests = tmp_path / "manifests"
    shutil.copytree(EXAMPLES, manifests, ignore=shutil.ignore_patterns("*.md"))
    return ClientPlan(node=NODE, manifests=manifests, materialize=tmp_path / "env", verb_timeout=timedelta(seconds=1))


@pytest.mark.parametrize(
    "compiles",
    [pytest.param(10, id="over ten compiles"), pytest.param(60, id="over sixty compiles")],
)
@pytest.mark.slow
async def test_two_seats_with_disagreeing_catalogues_compile_once_and_say_so(
    nats_server: LocalNats, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture, compiles: int
) -> None:
    caplog.set_level(logging.INFO, logger="provisioner.seat.registry_sync")
    tmp_path = plan.materialize.parent
    (tmp_path / "a.toml").write_text(SEAT_A)
    (tmp_path / "b.toml").write_text(SEAT_B)
    await create_bucket(bus, OTHER_CONFIG, BucketConfig())
    await put(bus, OTHER_CONFIG, "greeting", b'"hi"')
    await put(bus, OTHER_CONFIG, "log-level", b'"warning"')
    with counting_compiles() as counted, logged("disagrees with this seat's catalogue on kinds cert, config") as told:
        async with seat(nats_server.url, tmp_path / "a.toml") as stop_a, stand_ins(bus, NODE):
            written_by_a = await last_sequence(bus, buckets.REGISTRY)
            async with anyio.create_task_group() as client:
                await client.start(partial(watch, bus, plan, TIMING))
                first = stamps(plan.materialize)
                assert first and sh_env(plan.materialize / "app.env")["LOG_LEVEL"] == "info"
                async with seat(nats_server.url, tmp_path / "b.toml"):
                    await told.wait(within=10)
                    await counted.until(counted.count + compiles, within=compiles * INTERVAL.total_seconds() + 30)
                    assert await last_sequence(bus, buckets.REGISTRY) == written_by_a, (
                        "the seat without the lease wrote"
                    )
                    assert stamps(plan.materialize) == first, "the watching client rewrote an env file"
                    assert await config_bucket(bus) == "mesh-config_values"
                    assert len([r for r in caplog.records if "is held by" in r.getMessage()]) == 1

                    with logged("registry compiled: 1 written, 1 deleted") as taken_over:
                        stopped_at = time.monotonic()
                        stop_a.set()
                        await taken_over.wait(within=TAKEOVER_BOUND.total_seconds())
                    took = time.monotonic() - stopped_at
                    assert await config_bucket(bus) == "mesh-config_other"
                    written_by_b = await last_sequence(bus, buckets.REGISTRY) - written_by_a
                    assert written_by_b == 2  # config rewritten, cert deleted: once
                client.cancel_scope.cancel()
    log.info(
        "registry writes: seat A %d, seat B 0 during %d compiles and %d after taking over (%.1f s, bound %.1f s)",
        written_by_a,
        compiles,
        written_by_b,
        took,
        TAKEOVER_BOUND.total_seconds(),
    )


@contextmanager
def counting_compiles() -> Iterator[Compiles]:
    counted = Compiles()
    target = logging.getLogger("provisioner.seat.registry_sync")
    target.addHandler(counted)
    try:
        yield counted
    finally:
        target.removeHandler(counted)
