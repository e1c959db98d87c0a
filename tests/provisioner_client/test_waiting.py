"""The record of writes that wait for the hub (`provisioner_client.resolving.own`): which
answers mean "link down", since when a part waits, and how `status` says it. Across a real cut
link: tests/sites/test_site_client.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.resolving import own
from provisioner_client.resolving.own import LEASE, WaitingWrites, link_down
from provisioner_client.status import ClientLease, NodeStatus
from provisioner_client.status_view import status_text
from registry.command_line import timestamp_of
from registry.contract import buckets
from registry.errors import (
    BusError,
    BusTimeout,
    ConvergeError,
    JetStreamError,
    NobodyBehindImport,
    NoResponders,
    NoRoute,
)
from registry.wire import Bus

APPLIED = buckets.APPLIED.name


def converge_error(cause: BusError) -> ConvergeError:
    try:
        raise ConvergeError(APPLIED, "n1.app", cause.reason, "nothing") from cause
    except ConvergeError as err:
        return err


def test_only_nobody_behind_an_import_and_timeouts_are_a_link_down() -> None:
    behind = NobodyBehindImport("write", "$KV.x.n1.a", "node-n1", "MESH", serves="the hub")
    assert link_down(NoResponders("write", "nobody stored it")) == "NoResponders"
    assert link_down(behind) == "NoResponders"
    assert link_down(BusTimeout("write", "no answer")) == "timed out"
    assert link_down(converge_error(NoResponders("write", "nobody stored it"))) == "NoResponders"
    assert link_down(NoRoute("write", "$KV.x.n2.a", "node-n1", serves="x")) is None  # grants, not a link
    assert link_down(converge_error(JetStreamError("write", 400, 10077, "maximum bytes exceeded"))) is None
    assert link_down(BusError("write", "not sent: the connection to nats is away")) is None


def test_a_part_waits_since_its_first_refusal_until_its_next_write(tmp_path: Path) -> None:
    waits = WaitingWrites(tmp_path, "n1")
    first = waits.failed(LEASE, "the lease renewal was answered NoResponders")
    again = waits.failed(LEASE, "the lease renewal was answered NoResponders")
    assert again.since == first.since
    waits.failed(APPLIED, "answered NoResponders", keys=["n1.app"], records={"n1.app": b'{"state":"applied"}'})
    found = own.read_waiting(tmp_path, "n1")
    assert found is not None and set(found.parts) == {LEASE, APPLIED}
    assert found.applied_records(APPLIED) == {"n1.app": b'{"state":"applied"}'}
    assert own.read_waiting(tmp_path, "n2") is None  # another node's record says nothing of n2
    waits.done(LEASE)
    waits.done(APPLIED)
    assert own.read_waiting(tmp_path, "n1") is None
    assert not (tmp_path / own.WAITING_RECORD).exists()


def test_status_says_what_waits_since_when_and_how_it_is_known(tmp_path: Path) -> None:
    waits = WaitingWrites(tmp_path, "n1")
    waits.failed(LEASE, "the lease renewal was answered NoResponders (nobody stored it)")
    waits.failed(APPLIED, "the applied writes were answered NoResponders", keys=["n1.app"])
    found = own.read_waiting(tmp_path, "n1")
    assert found is not None
    status = NodeStatus("n1", {}, {}, ClientLease(), waiting=found)
    text = status_text(status)
    assert not status.ok
    assert f"writes to the hub waiting since {timestamp_of(found.since)}" in text
    lease = found.parts[LEASE]
    said = f"writes of the lease to the hub waiting since {timestamp_of(lease.since)} (link down: {lease.how})"
    assert said in text
    assert "not yet written there: n1.app" in text


def test_the_record_is_read_once_at_its_first_use_then_kept_and_written_through(tmp_path: Path) -> None:
    WaitingWrites(tmp_path, "n1").failed(LEASE, "the lease renewal was answered NoResponders")
    kept = WaitingWrites(tmp_path, "n1")
    first = kept.current()
    assert first is not None and set(first.parts) == {LEASE}
    (tmp_path / own.WAITING_RECORD).unlink()  # not read again: what it holds is kept here
    assert kept.current() == first
    kept.failed(APPLIED, "answered NoResponders", keys=["n1.app"])
    found = own.read_waiting(tmp_path, "n1")  # written through, the lease's part with it
    assert found is not None and set(found.parts) == {LEASE, APPLIED}


async def test_a_reconcile_reads_the_record_at_most_once_and_keeps_what_the_lease_noted(
    domains: StandIns, bus: Bus, plan: ClientPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    read = own.read_waiting

    def counted(folder: Path, node: str) -> own.Waiting | None:
        reads.append(folder)
        return read(folder, node)

    monkeypatch.setattr(own, "read_waiting", counted)
    assert (await reconcile(bus, plan)).ok
    assert len(reads) == 1  # its own record, read once
    shared = WaitingWrites(plan.materialize, plan.node)  # as watch mode's lease renewals hold it
    shared.failed(LEASE, "the lease renewal was answered NoResponders")
    reads.clear()
    assert (await reconcile(bus, plan, waits=shared)).ok
    assert reads == []
    found = own.read_waiting(plan.materialize, plan.node)
    assert found is not None and set(found.parts) == {LEASE}
