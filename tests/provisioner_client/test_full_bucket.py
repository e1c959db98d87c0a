"""A bucket that refuses the client's writes (full: `discard: new` past its `max_bytes`) is visible
outside the client's log, on a real nats-server whose buckets the test shrinks and fills: the
modules whose keys were refused are recorded pending, saying why, where the applied bucket still
takes them (`status` and `query applied` show them); where it does not, `status` says from the
client's own state which write was refused and why; either way `status` exits 7."""

from __future__ import annotations

import json
import logging
import stat
import sys
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import StandIns
from provisioner_client.errors import MaterializeError
from provisioner_client.materializing.envfile import EnvFolder
from provisioner_client.reconcile import ClientPlan
from provisioner_client.resolving import own
from provisioner_client.state import files
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import Bucket, buckets
from registry.errors import BusError, BusTimeout, ConvergeError, JetStreamError, PermissionDenied, WrongLastSequence
from registry.wire import Bus, put
from tests.helpers import NODE, Reports, clean_environment, logged
from tests.provisioner_client.cli import client, client_env

REFUSED = "maximum bytes exceeded"
BOUND = 10.0


async def fill(bus: Bus, js: JetStreamContext, bucket: Bucket) -> None:
    """`bucket` shrunk to a few KiB, then filled by another node's keys, each value half the last
    refused one, until it refuses even a one-byte value."""
    info = await js.stream_info(bucket.stream)
    info.config.max_bytes = 8 * 1024
    await js.update_stream(info.config)
    size = 1024
    for index in range(1000):
        try:
            await put(bus, bucket, f"filler.web.config.v{index}", b"x" * size)
        except BusError as err:
            refused = str(err)
        else:
            continue
        assert REFUSED in refused, refused
        if size == 1:
            return
        size //= 2
    raise AssertionError(f"{bucket.name} never filled")


async def query_applied(url: str) -> tuple[int, dict[str, object]]:
    command = [sys.executable, "-m", "provisioner.commands.cli", "query", "applied", "--nats-url", url, "--json"]
    command += ["--node", NODE]
    done = await anyio.run_process(command, env=clean_environment(), check=False)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}


async def test_needs_refused_leave_pending_records_that_status_and_query_applied_show(
    domains: StandIns, bus: Bus, js: JetStreamContext, nats_server: LocalNats, plan: ClientPlan
) -> None:
    await fill(bus, js, buckets.NEEDS)
    env = client_env(nats_server.url, plan)
    code, out, err = await client("reconcile", env=env)
    assert code == 7, (out, err)  # pending, not "the bus refused": the records were written
    code, out, err = await client("status", env=env)
    assert code == 7, out
    assert f"{buckets.NEEDS.name} refused" in out and REFUSED in out, out
    code, answer = await query_applied(nats_server.url)
    assert code == 0, answer
    entries = answer["entries"]
    assert isinstance(entries, list)
    states = {entry["module"]: entry["value"]["state"] for entry in entries}
    assert states == {"app": "pending", "postgres": "pending", "tools": "applied"}, "tools declares no needs"
    for entry in entries:
        if entry["module"] != "tools":
            [reason] = entry["value"]["reasons"]
            assert reason.startswith(f"its {buckets.NEEDS.name} keys were refused: ") and REFUSED in reason, reason


async def test_needs_and_applied_refused_make_status_say_so_from_the_clients_own_state(
    domains: StandIns, bus: Bus, js: JetStreamContext, nats_server: LocalNats, plan: ClientPlan
) -> None:
    await fill(bus, js, buckets.NEEDS)
    await fill(bus, js, buckets.APPLIED)
    env = client_env(nats_server.url, plan)
    code, out, err = await client("reconcile", env=env)
    assert code == 4, (out, err)
    code, out, err = await client("status", env=env)
    assert code == 7, out
    assert f"the last reconcile could not record what it did: {buckets.APPLIED.name} refused" in out, out
    assert f"{buckets.NEEDS.name} refused" in out and REFUSED in out, out
    code, out, _ = await client("status", "--json", env=env)
    document = json.loads(out)
    assert code == 7
    assert set(document["refused"]["buckets"]) == {buckets.NEEDS.name, buckets.APPLIED.name}


async def room_again(js: JetStreamContext, bucket: Bucket) -> None:
    info = await js.stream_info(bucket.stream)
    info.config.max_bytes = 1024 * 1024
    await js.update_stream(info.config)


async def test_once_the_bucket_has_room_the_next_reconcile_applies_and_status_no_longer_says_refused(
    domains: StandIns, bus: Bus, js: JetStreamContext, nats_server: LocalNats, plan: ClientPlan
) -> None:
    await fill(bus, js, buckets.NEEDS)
    env = client_env(nats_server.url, plan)
    code, _, _ = await client("reconcile", env=env)
    assert code == 7
    await room_again(js, buckets.NEEDS)
    code, out, err = await client("reconcile", env=env)
    assert code == 0, (out, err)
    code, out, _ = await client("status", env=env)
    assert code == 0, out
    assert "refused" not in out


async def test_watch_mode_asks_a_full_bucket_again_and_applies_once_it_has_room(
    domains: StandIns, bus: Bus, js: JetStreamContext, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "provisioner_client.watch.watching")
    await fill(bus, js, buckets.NEEDS)
    reports = Reports(BOUND)
    timing = WatchTiming(debounce=timedelta(seconds=0.05), backoff_max=timedelta(seconds=0.5))
    async with anyio.create_task_group() as tg:
        with logged("woken by retry of refused writes", "provisioner_client.watch.watching") as asked_again:
            await tg.start(lambda task_status: watch(bus, plan, timing, on_report=reports, task_status=task_status))
            assert set(reports.all[-1].refused) == {buckets.NEEDS.name}
            assert reports.all[-1].modules["app"].applied.state == "pending"
            await asked_again.wait(within=BOUND)
        await room_again(js, buckets.NEEDS)  # nothing the client follows changes: only asking again applies
        await reports.until(lambda: reports.all[-1].ok, "applied once the bucket has room")
        tg.cancel_scope.cancel()


def _converge_failed(cause: BusError) -> ConvergeError:
    try:
        raise ConvergeError(buckets.NEEDS.name, "n1.app.config.x", cause.reason, "0 written, 0 deleted") from cause
    except ConvergeError as err:
        return err


@pytest.mark.parametrize(
    ("cause", "refusal"),
    [
        (JetStreamError("write", 503, 10077, REFUSED), f"{REFUSED} (code 503, error 10077)"),
        (PermissionDenied("write", "$KV.x.y", "permissions violation"), "permissions violation"),
        (WrongLastSequence("write", 400, 10071, "wrong last sequence: 3"), None),
        (JetStreamError("write", 503, 10008, "JetStream system temporarily unavailable"), None),
        (BusTimeout("write", "no answer within 2 s"), None),
    ],
    ids=["a full bucket", "a denied subject", "another writer first", "a cluster between leaders", "a timeout"],
)
def test_only_an_answer_that_asking_again_at_once_would_not_change_is_a_refusal(
    cause: BusError, refusal: str | None
) -> None:
    assert own.refusal_of(_converge_failed(cause)) == refusal
    assert own.refusal_of(cause) == refusal


def test_the_record_is_the_nodes_own_mode_0600_gone_once_nothing_is_refused_and_its_leftovers_removed(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "env"
    own.record_refusals(folder, NODE, {buckets.NEEDS.name: REFUSED})
    kept = own.read_refusals(folder, NODE)
    assert kept is not None and kept.buckets == {buckets.NEEDS.name: REFUSED}
    assert stat.S_IMODE((folder / own.REFUSALS_RECORD).stat().st_mode) == 0o600
    assert own.read_refusals(folder, "another-node") is None
    own.record_refusals(folder, NODE, {})
    assert own.read_refusals(folder, NODE) is None
    assert not (folder / own.REFUSALS_RECORD).exists()
    left = folder / files.temporary_name(own.REFUSALS_RECORD)
    left.write_text("{}")
    assert EnvFolder(folder).remove_leftovers() == [left]


def test_a_record_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / own.REFUSALS_RECORD).write_text('{"node": 1}')
    with pytest.raises(MaterializeError, match="is not a record of refused writes"):
        own.read_refusals(tmp_path, NODE)
