"""The quota guard's arithmetic, without a bus: when a node is counted, and how long it is shown
over quota (the guard on a real server: tests/limits/test_quotas.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from provisioner.seat.quotas import CutBack, Footprint, Quota, QuotaGuard, nodes_share
from provisioner.seat.settings import ServerSettings
from registry.contract import Bucket, buckets
from registry.errors import SettingsError
from registry.wire import KvItem

QUOTA = Quota(keys=3, bytes=100)
Queued = tuple[Bucket, str]


def written(key: str, size: int, *, deleted: bool = False) -> KvItem:
    return KvItem(key, b"", 1, deleted, size=size, stored=size)


async def test_a_node_is_counted_once_its_writes_pass_its_quota_and_not_twice_while_counted() -> None:
    guard = QuotaGuard(QUOTA)
    send, receive = anyio.create_memory_object_stream[tuple[Bucket, str]](8)
    async with send, receive:
        guard._to_count = send  # what `guard` sets while it runs
        for index in range(2):
            guard.note(buckets.NEEDS, written(f"n1.m.config.v{index}", 10))
        guard.note(buckets.NEEDS, written("n1.m.config.gone", 0, deleted=True))  # a marker the bucket keeps
        assert receive.statistics().current_buffer_used == 0
        guard.note(buckets.NEEDS, written("n1.m.config.v3", 10))  # a fourth key: over 3 keys
        guard.note(buckets.NEEDS, written("n1.m.config.v4", 10))
        guard.note(buckets.APPLIED, written("n1.m", 101))  # over 100 bytes in another bucket
        guard.note(buckets.NEEDS, written("n2.m.config.v0", 10))
        queued = [receive.receive_nowait() for _ in range(receive.statistics().current_buffer_used)]
    assert [(bucket.name, token) for bucket, token in queued] == [
        (buckets.NEEDS.name, "n1"),
        (buckets.APPLIED.name, "n1"),
    ]


def test_a_node_cut_back_is_shown_over_quota_for_a_while_saying_what_it_held() -> None:
    now = [1_000_000.0]
    guard = QuotaGuard(QUOTA, shown_for=timedelta(minutes=10), clock=lambda: now[0])
    guard._remember("caf\u00e9", buckets.NEEDS, Footprint(keys=20_512, bytes=3 << 30), purged=20_512)
    reason = guard.over_quota("caf\u00e9")
    assert reason is not None
    assert "held 20,512 keys, 3.0 GiB in mesh-provisioner_needs" in reason
    assert "more than its 3 keys, 100 bytes; the seat removed them" in reason
    guard._remember("caf\u00e9", buckets.NEEDS, Footprint(keys=4, bytes=10), purged=4)
    assert "(2 times)" in (guard.over_quota("caf\u00e9") or "")
    now[0] += 601
    assert guard.over_quota("caf\u00e9") is None
    assert guard.cut_back() == {}


def test_footprints_are_over_by_keys_or_by_bytes() -> None:
    assert not Footprint(3, 100).over(QUOTA)
    assert Footprint(4, 0).over(QUOTA)
    assert Footprint(0, 101).over(QUOTA)
    cut = CutBack("b", Footprint(4, 1500), QUOTA, datetime(2026, 12, 1, 18, 0, tzinfo=UTC))
    assert cut.reason().startswith("over quota: held 4 keys, 1.5 KiB in b at 2026-12-01T18:00:00Z")


def at(key: str, revision: int, size: int = 10) -> KvItem:
    return KvItem(key, b"", revision, False, size=size, stored=size)


def counting_n1() -> tuple[QuotaGuard, MemoryObjectSendStream[Queued], MemoryObjectReceiveStream[Queued]]:
    """A guard whose queue is `send`, once node n1's 4 writes (revisions 1 to 4) queued its count."""
    guard = QuotaGuard(QUOTA)
    send, receive = anyio.create_memory_object_stream[Queued](8)
    guard._to_count = send
    for revision in range(1, 5):
        guard.note(buckets.NEEDS, at(f"n1.m.config.v{revision}", revision))
    return guard, send, receive


async def test_writes_seen_while_a_node_is_counted_stay_in_its_bound_when_they_outlive_the_purge() -> None:
    # A count purges up to the revision it read; what the node wrote after that is still in the
    # bucket. Forgetting it let a node fill the bucket once it was full: no write passed the bound.
    guard, send, receive = counting_n1()
    async with send, receive:
        assert receive.receive_nowait()[1] == "n1"
        guard.note(buckets.NEEDS, at("n1.m.config.v5", 5))  # while counted: read by the count
        guard.note(buckets.NEEDS, at("n1.m.config.v6", 6))  # after the count's read: not purged
        guard.note(buckets.NEEDS, at("n1.m.config.v7", 7))
        bound = guard._load(buckets.NEEDS).bound("n1")
        bound.counted(5, Footprint(0, 0))  # purged up to revision 5
        assert bound.footprint() == Footprint(2, 20)
        guard.note(buckets.NEEDS, at("n1.m.config.v3", 3))  # a lagging watch's write, counted already
        assert bound.footprint() == Footprint(2, 20)
        guard.note(buckets.NEEDS, at("n1.m.config.v8", 8))
        guard.note(buckets.NEEDS, at("n1.m.config.v9", 9))  # 4 keys since the purge: over 3
        assert receive.receive_nowait()[1] == "n1"


async def test_a_failed_count_keeps_every_write_it_saw_in_the_bound() -> None:
    guard, send, receive = counting_n1()
    async with send, receive:
        guard.note(buckets.NEEDS, at("n1.m.config.v5", 5))
        bound = guard._load(buckets.NEEDS).bound("n1")
        bound.give_up()
        assert bound.footprint() == Footprint(5, 50)
        assert not bound.counting


def test_a_node_quota_past_the_nodes_share_of_a_bucket_is_refused_at_start() -> None:
    """One node allowed more than the nodes may hold together would leave the seat no reserve."""
    assert nodes_share(1024 * 1024) == 768 * 1024
    ServerSettings(bucket_max_bytes=1024 * 1024, node_quota_bytes=768 * 1024)
    with pytest.raises(SettingsError, match="more than the nodes' share of a bucket"):
        ServerSettings(bucket_max_bytes=1024 * 1024, node_quota_bytes=768 * 1024 + 1)
