"""The verb as a NATS service: concurrency, the service API's control subjects, shutdown order."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from nats.aio.client import Client

from mesh_dev.local_nats import LocalNats
from provisioner.seat.buckets import ensure_buckets
from provisioner.verb.cursors import Continuation
from provisioner.verb.handler import Verb
from provisioner.verb.paging import PageCache
from provisioner.verb.service import verb_service
from registry.access import Party
from registry.contract import buckets
from registry.errors import NoResponders
from registry.wire import ERROR_CODE_HEADER, ERROR_HEADER, BucketConfig, Bus
from tests.helpers import fire, put_many

NEEDS_REQUEST = b'{"what":"needs"}'
KEYS = 1000


@pytest.fixture
async def many_needs(bus: Bus) -> Bus:
    await ensure_buckets(bus, BucketConfig())
    await put_many(bus, buckets.NEEDS, {f"n{i % 7}.m{i:05d}.config.x": b'{"placeholder":"x"}' for i in range(KEYS)})
    return bus


def total_of(reply: bytes) -> int:
    answer = json.loads(reply)
    count: int = answer["total"]["entries"]
    return count


async def test_concurrent_requests_are_answered_concurrently(many_needs: Bus) -> None:
    async with verb_service(many_needs, verb=Verb(many_needs, PageCache()), max_concurrent=8) as running:
        fired = await fire(many_needs, [NEEDS_REQUEST] * 8)
        replies = await fired.replies()
        assert [total_of(r.data) for r in replies] == [KEYS] * 8
        assert running.in_flight.peak > 1


async def test_concurrency_is_bounded(many_needs: Bus) -> None:
    async with verb_service(many_needs, verb=Verb(many_needs, PageCache()), max_concurrent=1) as running:
        fired = await fire(many_needs, [NEEDS_REQUEST] * 4)
        assert [total_of(r.data) for r in await fired.replies()] == [KEYS] * 4
        assert running.in_flight.peak == 1


async def test_requests_beyond_the_waiting_room_are_answered_busy(many_needs: Bus) -> None:
    async with verb_service(many_needs, verb=Verb(many_needs, PageCache()), max_concurrent=1, max_waiting=0):
        fired = await fire(many_needs, [NEEDS_REQUEST] * 6)
        replies = await fired.replies()
    codes = [r.headers.get(ERROR_CODE_HEADER) for r in replies]
    assert codes[0] is None
    assert "503" in codes
    assert set(codes) <= {None, "503"}


async def test_stopping_answers_every_request_already_received(many_needs: Bus) -> None:
    async with verb_service(many_needs, verb=Verb(many_needs, PageCache()), max_concurrent=2):
        fired = await fire(many_needs, [NEEDS_REQUEST] * 6)
    replies = await fired.replies()
    assert [total_of(r.data) for r in replies] == [KEYS] * 6
    with pytest.raises(NoResponders):
        await many_needs.request(buckets.VERB_SUBJECT, b"{}", reply_wait=timedelta(seconds=1))


async def test_requests_still_in_flight_at_the_deadline_are_answered_stopping(many_needs: Bus) -> None:
    async with verb_service(
        many_needs, verb=Verb(many_needs, PageCache()), max_concurrent=1, shutdown_timeout=timedelta(0)
    ):
        fired = await fire(many_needs, [NEEDS_REQUEST] * 20)
    replies = await fired.replies()
    stopped = [r for r in replies if r.headers.get(ERROR_CODE_HEADER) == "503"]
    assert stopped
    assert {r.headers[ERROR_HEADER] for r in stopped} == {"server stopping; retry"}


@pytest.mark.parametrize(
    "subject",
    ["$SRV.PING", "$SRV.PING.mesh-provisioner", "$SRV.INFO.mesh-provisioner", "$SRV.STATS.mesh-provisioner"],
)
async def test_the_service_api_answers(server: LocalNats, nc: Client, subject: str) -> None:
    await nc.request(buckets.VERB_SUBJECT, b"{}", timeout=10)
    reply = json.loads((await nc.request(subject, b"", timeout=10)).data)
    assert reply["name"] == "mesh-provisioner"
    assert reply["version"]
    if "INFO" in subject:
        assert [e["subject"] for e in reply["endpoints"]] == [buckets.VERB_SUBJECT]
    if "STATS" in subject:
        assert reply["endpoints"][0]["num_requests"] >= 1


class BrokenCache(PageCache):
    """A page cache that fails unexpectedly: the seam through which a bug reaches a handler."""

    def page(self, listing_id: str, number: int, asker: Party | None = None) -> bytes:
        raise RuntimeError("password=hunter2 leaked in a repr")


async def test_an_unexpected_error_is_answered_500_without_its_text(
    many_needs: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    cache = BrokenCache()
    cursor = cache.seal.seal(Continuation("x", 2, {"what": "nodes"}, ""))
    async with verb_service(many_needs, verb=Verb(many_needs, cache)):
        body = json.dumps({"cursor": cursor}).encode()
        broken = await many_needs.request(buckets.VERB_SUBJECT, body, reply_wait=timedelta(seconds=2))
        after = await many_needs.request(buckets.VERB_SUBJECT, b"{}", reply_wait=timedelta(seconds=2))
    assert (broken.headers[ERROR_CODE_HEADER], broken.headers[ERROR_HEADER]) == ("500", "internal error")
    assert json.loads(broken.data) == {"error": "internal error"}
    assert b"hunter2" not in broken.data
    assert ERROR_CODE_HEADER not in after.headers
    assert any(record.exc_info for record in caplog.records)
