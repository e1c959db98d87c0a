"""One client per node: a second client is refused, naming the first, and writes
nothing to needs, applied or collect while the first holds the node's lease."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskStatus

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, Report
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import buckets
from registry.wire import Bus, Holder, Message, get_direct, node_key
from tests.helpers import NODE, last_sequence, logged

TIMING = WatchTiming(debounce=timedelta(0))


async def last_sequences(bus: Bus) -> dict[str, int]:
    return {
        bucket.name: await last_sequence(bus, bucket) for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)
    }


async def holder_of_lease(bus: Bus) -> Holder:
    item = await get_direct(bus, buckets.LEASES, node_key(NODE))
    assert item is not None and not item.deleted
    return Holder.model_validate_json(item.value)


class Renewals:
    """Counts the writes to the node's lease key, as they happen."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = anyio.Event()

    async def on_message(self, msg: Message) -> None:
        self.count += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def at_least(self, count: int) -> None:
        with anyio.fail_after(30):
            while self.count < count:
                await self._changed.wait()


async def test_a_second_watch_client_waits_writes_nothing_and_takes_over_when_the_first_stops(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first_plan = replace(plan, lease_ttl=timedelta(seconds=1))
    second_manifests = tmp_path / "second-manifests"
    second_manifests.mkdir()
    (second_manifests / "other.json").write_text(json.dumps({"module": "other", "env": {"A": "${config:greeting}"}}))
    second_plan = replace(first_plan, manifests=second_manifests, materialize=tmp_path / "second-env")
    second_reports: list[Report] = []
    took_over = anyio.Event()

    def on_second_report(report: Report) -> None:
        second_reports.append(report)
        took_over.set()

    renewals = Renewals()
    await bus.subscribe(buckets.LEASES.subject(node_key(NODE)), renewals.on_message)
    async with anyio.create_task_group() as tg:
        first = anyio.CancelScope()

        async def run_first(*, task_status: TaskStatus[None]) -> None:
            with first:
                await watch(bus, first_plan, TIMING, task_status=task_status)

        await tg.start(run_first)
        holder = await holder_of_lease(bus)
        before = await last_sequences(bus)
        with logged("waiting for it to expire", "registry.wire.lease") as refused:
            tg.start_soon(lambda: watch(bus, second_plan, TIMING, on_report=on_second_report))
            await refused.wait(within=10)
        said = [r.getMessage() for r in caplog.records if "waiting for it to expire" in r.getMessage()]
        assert len(said) == 1 and holder.describe() in said[0]
        seen = renewals.count
        await renewals.at_least(seen + 6)  # two ttls of renewals: the second client tried again meanwhile
        assert await last_sequences(bus) == before
        assert len([r for r in caplog.records if "waiting for it to expire" in r.getMessage()]) == 1  # said once
        assert not second_reports
        first.cancel()  # the first stops and releases its lease: the second takes over
        with anyio.fail_after(10):
            await took_over.wait()
        assert set(second_reports[0].modules) == {"other"}
        tg.cancel_scope.cancel()
