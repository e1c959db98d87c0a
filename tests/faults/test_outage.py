"""A NATS outage under the seat and a watching node client, on a real nats-server stopped and
started again on the same port and store: afterwards every stream holds as many consumers as
before, no key is lost, and both programs follow changes again.

What an outage does to the programs is counted in their own timers: reconnect attempts, watch
polls and retries, lease renewals, and whether the leases expired meanwhile (ttl and clock skew).
So every timer of both programs runs here at a fifth of its length when 15 s and 60 s outages were
first measured, and an outage as long as the lease ttl (3 s) stands for the 15 s one, four ttls (12 s) for the 60 s
one: the same attempts, the same renewals missed, the leases expired after the long one and not
after the short one (`registry.wire.lease.SKEW`, 5 s, is not scaled: neither outage is near it).

The figures are printed (run with `-s` to see them), so they can be quoted."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import anyio
import nats
import pytest
from anyio.abc import TaskStatus

from mesh_dev.standins import StandIns, stand_ins
from provisioner_client.reconcile import ClientPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import APPLIED, Bucket, buckets
from registry.errors import BusError
from registry.wire import Bus, BusOptions, connect, put, snapshot
from tests.helpers import EXAMPLES, NODE, Reports, restartable_nats, serving, sh_env

SCALE = 5  # every timer below is a fifth of what it was when 15 s and 60 s outages were first measured
TIMING = WatchTiming(
    debounce=timedelta(seconds=0.1) / SCALE,
    refresh=timedelta(seconds=5) / SCALE,
    poll=timedelta(seconds=0.5) / SCALE,
    backoff_max=timedelta(seconds=1) / SCALE,
)
LEASE_TTL = timedelta(seconds=15) / SCALE  # the seat's compile lease and the node's lease, by default 15 s
CLIENT_RECONNECT_WAIT = timedelta(seconds=0.5) / SCALE
SEAT_RECONNECT_WAIT = BusOptions().reconnect_wait / SCALE
BOUND = 30.0
LISTING_THRESHOLD = 1.0  # seconds: the inactive threshold of a one-off listing's consumer


Counts = dict[str, int]


async def consumer_counts(url: str) -> tuple[Counts, int]:
    """Consumers per stream, and how many of them are one-off listings (they expire in a second)."""
    nc = await nats.connect(url, name="consumer counter")
    try:
        js = nc.jetstream()
        counts: Counts = {}
        listings = 0
        for stream in await js.streams_info():
            name = stream.config.name or ""
            found = await js.consumers_info(name)
            counts[name] = len(found)
            listings += sum(1 for c in found if (c.config.inactive_threshold or 0) <= LISTING_THRESHOLD)
        return counts, listings
    finally:
        await nc.close()


async def settled_consumers(url: str, wanted: Callable[[Counts], bool] = lambda _: True) -> Counts:
    """The consumers per stream once no one-off listing's consumer is left, `wanted` holds and the
    counts have stayed the same for three readings (the seat answers before its views' watches
    have made their consumers); after a deadline, what there was."""
    counts: Counts = {}
    readings: list[Counts] = []
    with anyio.move_on_after(BOUND):
        while True:
            counts, listings = await consumer_counts(url)
            readings = [*readings[-2:], counts] if listings == 0 and wanted(counts) else []
            if len(readings) == 3 and readings[0] == readings[1] == readings[2]:
                break
            await anyio.sleep(0.25)
    return counts


async def until_the_seat_answers(bus: Bus) -> None:
    with anyio.fail_after(BOUND):
        while True:
            try:
                await bus.request(buckets.VERB_SUBJECT, b"{}", reply_wait=timedelta(seconds=1))
            except BusError:
                await anyio.sleep(0.2)
            else:
                return


async def every_key(bus: Bus) -> dict[str, set[str]]:
    """The live keys of every bucket."""
    nc = await nats.connect(bus.options.servers[0], name="key lister")
    try:
        names = [s.config.name or "" for s in await nc.jetstream().streams_info()]
    finally:
        await nc.close()
    found: dict[str, set[str]] = {}
    for stream in names:
        if stream.startswith("KV_"):
            items = await snapshot(bus, Bucket(stream.removeprefix("KV_"), APPLIED))
            found[stream] = {item.key for item in items}
    return found


@dataclass
class Figures:
    outage: float
    consumers_before: Counts = field(default_factory=dict)
    consumers_after: Counts = field(default_factory=dict)
    keys_before: int = 0
    keys_lost: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        streams = sorted(set(self.consumers_before) | set(self.consumers_after))
        scaled = f"every timer at 1/{SCALE}: {self.outage * SCALE:.0f} s at full length"
        lines = [f"NATS outage of {self.outage:.0f} s ({scaled}) under a seat and a watching client:"]
        lines += [
            f"  {s}: consumers before {self.consumers_before.get(s, 0)}, after {self.consumers_after.get(s, 0)}"
            for s in streams
        ]
        lines.append(f"  keys before {self.keys_before}, keys lost {len(self.keys_lost)} {self.keys_lost or ''}")
        return "\n".join(lines)


async def run_outage(tmp_path: Path, lease_ttls: int) -> Figures:
    outage = (LEASE_TTL * lease_ttls).total_seconds()
    figures = Figures(outage)
    plan = ClientPlan(
        node=NODE,
        manifests=tmp_path / "manifests",
        materialize=tmp_path / "env",
        verb_timeout=timedelta(seconds=1),
        lease_ttl=LEASE_TTL,
    )
    shutil.copytree(EXAMPLES, plan.manifests, ignore=shutil.ignore_patterns("*.md"))
    async with restartable_nats(tmp_path / "nats") as server:
        options = BusOptions(servers=(server.url,), name="client", reconnect_wait=CLIENT_RECONNECT_WAIT)
        async with connect(options) as bus, anyio.create_task_group() as tg:
            await tg.start(_serving_until_cancelled, server.url)
            domains: StandIns = await tg.start(_stand_ins_until_cancelled, bus)
            reports = Reports(BOUND)
            await tg.start(lambda task_status: watch(bus, plan, TIMING, on_report=reports, task_status=task_status))
            await reports.until(lambda: bool(reports.all) and reports.all[-1].ok, "the first reconcile")

            figures.consumers_before = await settled_consumers(server.url)
            keys_before = await every_key(bus)
            figures.keys_before = sum(len(keys) for keys in keys_before.values())
            await server.stop()
            await anyio.sleep(outage)  # the outage itself: the stimulus, not a synchronisation
            await server.start()
            seen = len(reports.all)
            await reports.until(lambda: len(reports.all) > seen and reports.all[-1].ok, "a reconcile after the outage")
            await until_the_seat_answers(bus)

            figures.consumers_after = await settled_consumers(server.url, lambda c: c == figures.consumers_before)
            keys_after = await every_key(bus)
            figures.keys_lost = sorted(
                f"{stream}:{key}"
                for stream, keys in keys_before.items()
                for key in keys - keys_after.get(stream, set())
            )
            await put(bus, domains.config, "log-level", b'"after-outage"')
            await reports.until(
                lambda: sh_env(plan.materialize / "app.env")["LOG_LEVEL"] == "after-outage",
                "a change after the outage materialized",
            )
            tg.cancel_scope.cancel()
    print(f"\n{figures}")
    return figures


def check(figures: Figures) -> None:
    assert figures.consumers_before[buckets.REGISTRY.stream] == 1, figures  # the seat's registry view
    assert figures.consumers_after == figures.consumers_before, figures
    assert figures.keys_before > 0
    assert figures.keys_lost == [], figures


async def test_an_outage_as_long_as_the_lease_ttl_leaves_as_many_consumers_as_before_and_every_key(
    tmp_path: Path,
) -> None:
    check(await run_outage(tmp_path, 1))


@pytest.mark.slow
async def test_an_outage_of_four_lease_ttls_leaves_as_many_consumers_as_before_and_every_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        check(await run_outage(tmp_path, 4))
    # The premise of the scaled timers: the outage outlasts the seat's compile lease renewals, and
    # the lease is not taken for lost (nobody else claimed it).
    said = [r.getMessage() for r in caplog.records if "seat.compile" in r.getMessage()]
    assert any("lease seat.compile not renewed" in m for m in said), "the outage did not outlast a renewal"
    assert not any("stops compiling" in m for m in said), said


async def _serving_until_cancelled(url: str, *, task_status: TaskStatus[None]) -> None:
    options = BusOptions(servers=(url,), name=buckets.SEAT, reconnect_wait=SEAT_RECONNECT_WAIT)
    async with serving(url, bus_options=options, shutdown_timeout=timedelta(seconds=1), compile_lease_ttl=LEASE_TTL):
        task_status.started()
        await anyio.sleep_forever()


async def _stand_ins_until_cancelled(bus: Bus, *, task_status: TaskStatus[StandIns]) -> None:
    async with stand_ins(bus, NODE) as parts:
        task_status.started(parts)
        await anyio.sleep_forever()
