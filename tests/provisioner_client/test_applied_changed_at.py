"""`changed_at` in applied records, on a real nats-server: stamped when a record's content changes,
kept when it does not (so an unchanged reconcile writes nothing), absent from older records."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.contract import AppliedValue, buckets
from registry.wire import Bus, put, snapshot

LONG_AGO = "2000-01-01T00:00:00+00:00"


async def applied_records(bus: Bus) -> dict[str, dict[str, object]]:
    return {item.key: json.loads(item.value) for item in await snapshot(bus, buckets.APPLIED)}


async def rewrite(bus: Bus, records: dict[str, dict[str, object]]) -> None:
    for key, record in records.items():
        await put(bus, buckets.APPLIED, key, json.dumps(record, sort_keys=True, separators=(",", ":")).encode())


async def test_the_first_reconcile_stamps_each_record_with_the_time_it_was_written(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    report = await reconcile(bus, plan)
    after = datetime.now(UTC)
    records = await applied_records(bus)
    assert set(records) == {"node-1.app", "node-1.postgres", "node-1.tools"}
    for key, record in records.items():
        stamp = datetime.fromisoformat(str(record["changed_at"]))
        assert stamp.utcoffset() == timedelta(0), key
        assert before <= stamp <= after, key
    assert {m: r.applied.changed_at for m, r in report.modules.items()} == {
        key.split(".", 1)[1]: record["changed_at"] for key, record in records.items()
    }


async def test_a_record_whose_content_is_the_same_keeps_its_stamp_and_is_not_written(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    records = await applied_records(bus)
    await rewrite(bus, {key: {**record, "changed_at": LONG_AGO} for key, record in records.items()})
    revisions = {item.key: item.revision for item in await snapshot(bus, buckets.APPLIED)}
    again = await reconcile(bus, plan)
    assert not again.writes[buckets.APPLIED.name]
    assert {item.key: item.revision for item in await snapshot(bus, buckets.APPLIED)} == revisions
    assert {r["changed_at"] for r in (await applied_records(bus)).values()} == {LONG_AGO}


async def test_a_record_whose_content_changes_gets_a_new_stamp_and_the_others_keep_theirs(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    records = await applied_records(bus)
    await rewrite(bus, {key: {**record, "changed_at": LONG_AGO} for key, record in records.items()})
    domains.vault.rotate("db-password", "rotated-password")
    before = datetime.now(UTC).replace(microsecond=0)
    report = await reconcile(bus, plan)
    assert report.modules["app"].written
    after = await applied_records(bus)
    assert before <= datetime.fromisoformat(str(after["node-1.app"]["changed_at"])) <= datetime.now(UTC)
    assert after["node-1.app"]["digest"] != records["node-1.app"]["digest"]
    assert after["node-1.tools"]["changed_at"] == LONG_AGO
    assert after["node-1.tools"] == {**records["node-1.tools"], "changed_at": LONG_AGO}


async def test_a_record_written_before_changed_at_existed_still_reads_and_is_left_as_it_is(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    old = {k: {f: v for f, v in r.items() if f != "changed_at"} for k, r in (await applied_records(bus)).items()}
    await rewrite(bus, old)
    assert AppliedValue.model_validate(old["node-1.app"]).changed_at is None
    again = await reconcile(bus, plan)
    assert again.ok
    assert not again.writes[buckets.APPLIED.name]
    assert await applied_records(bus) == old
    assert again.modules["app"].applied.changed_at is None
