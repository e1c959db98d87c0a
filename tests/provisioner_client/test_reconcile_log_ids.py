"""Every line a reconcile logs, in the tasks it starts too, carries one reconcile id, new each
time and named in its report; the seat, answering in its own tasks, never carries it."""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import anyio
import pytest

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import buckets
from registry.runtime.logs import event_fields
from registry.wire import Bus
from tests.helpers import Reports

CLIENT = "provisioner_client"


async def reconciled(
    bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> tuple[Report, list[logging.LogRecord]]:
    """A reconcile's report and every record logged while it ran."""
    caplog.clear()
    report = await reconcile(bus, plan)
    return report, list(caplog.records)


def reconcile_ids(records: list[logging.LogRecord]) -> list[str | None]:
    return [event_fields(record).get("reconcile") for record in records]


def of_the_client(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [record for record in records if record.name.startswith(CLIENT)]


async def test_every_line_of_one_reconcile_carries_its_id_and_the_next_reconcile_another(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    first, first_records = await reconciled(bus, plan, caplog)
    second, second_records = await reconciled(bus, plan, caplog)

    assert re.fullmatch(r"[0-9a-f]{8}", first.reconcile_id)
    assert first.reconcile_id != second.reconcile_id
    first_lines, second_lines = of_the_client(first_records), of_the_client(second_records)
    assert len(first_lines) >= 3 and len(second_lines) >= 3, "the premise: each reconcile logs (at debug)"
    assert set(reconcile_ids(first_lines)) == {first.reconcile_id}
    assert set(reconcile_ids(second_lines)) == {second.reconcile_id}


async def test_the_lines_of_tasks_the_reconcile_starts_carry_its_id(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    """The first reconcile writes needs and collect at once, each bucket in a task of its own
    (`concurrently.all_of`), and each task logs what it wrote."""
    caplog.set_level(logging.INFO, logger=CLIENT)
    report, records = await reconciled(bus, plan, caplog)
    written = [
        r
        for r in records
        if r.funcName == "_converge" and event_fields(r).get("bucket") in {buckets.NEEDS.name, buckets.COLLECT.name}
    ]
    assert len(written) == 2, "the premise: both buckets written, each by its own task"
    assert reconcile_ids(written) == [report.reconcile_id] * 2


async def test_the_seats_lines_logged_during_a_reconcile_do_not_carry_its_id(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _, records = await reconciled(bus, plan, caplog)
    others = [record for record in records if not record.name.startswith(CLIENT)]
    assert others, "the premise: the seat answered the reconcile, logging (at debug)"
    assert reconcile_ids(others) == [None] * len(others)


async def test_the_watch_loops_line_about_a_reconcile_carries_its_id(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=CLIENT)
    reports = Reports()
    timing = WatchTiming(debounce=timedelta(seconds=0.1), refresh=timedelta(seconds=60), poll=timedelta(seconds=60))
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, timing, on_report=reports, task_status=task_status))
        tg.cancel_scope.cancel()
    said = [r for r in caplog.records if "reconciled:" in r.getMessage()]
    assert reconcile_ids(said) == [reports.all[0].reconcile_id]
