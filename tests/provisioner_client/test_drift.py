"""Drift of the env files the client wrote: seen by watch mode and put back from what is applied,
on a real nats-server; files the client did not write are never touched."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest

from mesh_dev.standins import StandIns
from provisioner_client.materializing.envfile import EnvFolder
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.watch.drift import DriftWatch, put_back
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import AppliedValue
from registry.wire import Bus, put
from tests.helpers import Reports, logged, sh_env


def _timers(timing: WatchTiming) -> float:
    """The longest a drift waits on the watch's timers before it is put back: a poll, a debounce."""
    return (timing.drift_poll + timing.debounce).total_seconds()


PROMISE = 5.0  # the promise: a hand edit put back within 5 s, with the default timing (a 1 s poll, a 0.5 s debounce)
TIMING = WatchTiming(drift_poll=timedelta(seconds=0.2), debounce=timedelta(seconds=0.1))
# The same promise on shorter timers: what the put-back itself may take is unchanged.
PUT_BACK_WITHIN = PROMISE - _timers(WatchTiming()) + _timers(TIMING)


async def test_a_hand_edit_a_chmod_and_a_removal_are_each_put_back_within_5_s(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    app = plan.materialize / "app.env"
    stranger = plan.materialize / "stranger.env"
    reports = Reports()
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, TIMING, on_report=reports, task_status=task_status))
        await reports.until(lambda: len(reports.all) >= 2, "the resync once its buckets are followed")
        written = app.read_bytes()
        stranger.write_text("MINE=1\n")
        drifts: list[tuple[str, Callable[[], object]]] = [
            ("edited", lambda: app.write_text("DATABASE_URL=elsewhere\n")),
            ("removed", app.unlink),
            ("edited", lambda: app.chmod(0o644)),
        ]
        for how, drift in drifts:
            with logged(
                f"drift put back: {app} of module app had been {how}", "provisioner_client.watch.watching"
            ) as back:
                drift()
                stranger.write_text(f"MINE={how}\n")
                await back.wait(within=PUT_BACK_WITHIN)
            assert app.read_bytes() == written
            assert stat.S_IMODE(app.stat().st_mode) == 0o600
        stranger.unlink()
        with logged("drift put back: ", "provisioner_client.watch.watching") as anything:
            with anyio.move_on_after(2.5 * TIMING.drift_poll.total_seconds()):  # a file not its own is never followed
                await anything.seen.wait()
        tg.cancel_scope.cancel()
    assert not anything.seen.is_set()
    assert not stranger.exists()


async def test_put_back_writes_only_what_renders_the_applied_digest(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    report = await reconcile(bus, plan)
    applied = report.modules["app"].applied
    assert applied.digest is not None
    app = plan.materialize / "app.env"
    app.write_text("EDITED=1\n")
    await put(bus, domains.config, "log-level", b'"debug"')
    assert not await put_back(bus, plan, "app", applied.digest), "the values moved on: a reconcile's work"
    assert app.read_text() == "EDITED=1\n"
    await put(bus, domains.config, "log-level", b'"info"')
    assert await put_back(bus, plan, "app", applied.digest)
    assert EnvFolder(plan.materialize).digest_on_disk("app") == applied.digest


async def test_only_the_files_of_applied_modules_inside_the_folder_are_followed(tmp_path: Path) -> None:
    folder = EnvFolder(tmp_path / "env")
    done = folder.materialize("app", b"A=1\n")
    outside = tmp_path / "outside.env"
    outside.write_text("B=1\n")
    drift = DriftWatch(folder.folder)
    drift.expect(
        {
            "app": AppliedValue(state="applied", digest=done.digest, file=str(done.path)),
            "pending": AppliedValue(state="pending", digest=done.digest, file=str(done.path)),
            "outside": AppliedValue(state="applied", digest=done.digest, file=str(outside)),
        }
    )
    assert drift.drifted() == {}
    outside.unlink()
    folder.materialize("app", b"A=1\n")  # the client's own write of the same content: no drift
    assert drift.drifted() == {}
    os.chmod(done.path, 0o640)
    assert drift.drifted() == {"app": "edited"}
    assert drift.drifted() == {}, "told once per change"
    done.path.unlink()
    assert drift.drifted() == {"app": "removed"}


FAST = WatchTiming(drift_poll=timedelta(seconds=0.002), debounce=timedelta(seconds=0.02))
CHANGES = 20


async def test_reconciles_rewriting_the_files_under_a_fast_drift_poll_log_no_drift_and_a_hand_edit_still_is(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    """The poll runs all through each reconcile (its change action too) while the values move: a
    file the client itself rewrote is never judged against what the previous reconcile wrote."""
    app = plan.materialize / "app.env"
    reports = Reports()
    caplog.set_level(logging.WARNING, "provisioner_client.watch.watching")
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, FAST, on_report=reports, task_status=task_status))
        for change in range(CHANGES):
            level = f"level-{change}"
            await put(bus, domains.config, "log-level", json.dumps(level).encode())
            await reports.until(partial(_holds_level, app, level), f"change {change} written")
        put_back_line = f"drift put back: {app} of module app had been edited"
        with logged(put_back_line, "provisioner_client.watch.watching") as back:
            app.write_text("LOG_LEVEL=by-hand\n")
            await back.wait(within=PUT_BACK_WITHIN)
        tg.cancel_scope.cancel()
    assert _holds_level(app, f"level-{CHANGES - 1}")
    drift_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("drift put back")]
    assert drift_lines == [put_back_line], "the hand edit's alone"


def _holds_level(env_file: Path, level: str) -> bool:
    return sh_env(env_file)["LOG_LEVEL"] == level


def test_a_file_is_judged_against_what_the_client_last_wrote_into_it_and_one_it_removed_is_let_go(
    tmp_path: Path,
) -> None:
    drift = DriftWatch(tmp_path / "env")
    folder = EnvFolder(tmp_path / "env", observer=drift)
    first = folder.materialize("app", b"A=1\n")
    drift.expect({"app": AppliedValue(state="applied", digest=first.digest, file=str(first.path))})
    folder.materialize("app", b"A=2\n")  # a reconcile's write, before it has expected anything new
    assert drift.drifted() == {}
    first.path.write_text("A=by-hand\n")
    assert drift.drifted() == {"app": "edited"}
    folder.materialize("app", b"A=2\n")
    assert drift.drifted() == {}
    folder.remove_except(set())  # the module is no longer declared
    assert drift.drifted() == {}, "a file the client removed is not drift"
