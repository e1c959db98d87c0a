"""The verb's request figures, counted once (provisioner.verb.stats) and read in two places: the
seat's /metrics, and the service's own `$SRV.STATS` answer; with the listings kept and the compiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.seat.registry_sync import CompileCounts, Compiler
from provisioner.verb.paging import PageCache
from provisioner.verb.request import LISTABLE
from provisioner.verb.stats import LATENCY_BUCKETS, UNREAD, WHATS, Latency, RequestStats
from registry.contract import REQUEST_ID_HEADER, buckets
from registry.errors import BusError
from registry.wire import Bus, put
from tests.helpers import put_many, serving
from tests.prometheus import Figures, free_port
from tests.provisioner.scrape import scrape, scrape_until

ERROR_CODE = "Nats-Service-Error-Code"


async def ask(bus: Bus, body: bytes) -> tuple[str, bytes]:
    reply = await bus.request(buckets.VERB_SUBJECT, body)
    return reply.headers.get(ERROR_CODE, "200"), reply.data


def value(found: Figures, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_answers_are_counted_by_what_and_code_in_metrics_and_in_srv_stats(
    nats_server: LocalNats, bus: Bus
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    async with serving(nats_server.url, metrics_listen=str(port)):
        asked = [
            (b'{"what": "registry"}', "200"),
            (b'{"what": "registry"}', "200"),
            (b'{"what": "needs", "node": "n1"}', "200"),
            (b'{"what": "needs", "collection": "c"}', "400"),  # read as needs, then refused
            (b"[1, 2]", "400"),  # never read that far: unread
            (b'{"what": "needs", "cursor": "nope.2"}', "410"),
        ]
        for body, code in asked:
            assert (await ask(bus, body))[0] == code

        found, _ = await scrape_until(
            url, lambda found: value(found, "mesh_seat_requests_total", what="needs", code="410") == 1, "6 counted"
        )
        answers = {
            (dict(labels)["what"], dict(labels)["code"]): count
            for (name, labels), count in found.items()
            if name == "mesh_seat_requests_total"
        }
        assert answers == {
            ("registry", "200"): 2,
            ("needs", "200"): 1,
            ("needs", "400"): 1,
            (UNREAD, "400"): 1,
            ("needs", "410"): 1,
        }
        assert value(found, "mesh_seat_request_duration_seconds_count", what="needs") == 3
        assert value(found, "mesh_seat_request_duration_seconds_bucket", what="registry", le="+Inf") == 2
        assert 0 < value(found, "mesh_seat_request_duration_seconds_sum", what="registry") < 2
        for what in WHATS:  # every what has its histogram from the start, at 0 until asked
            assert ("mesh_seat_request_duration_seconds_count", frozenset({("what", what)})) in found
        assert value(found, "mesh_seat_requests_in_flight") == 0
        assert value(found, "mesh_seat_compile_runs_total", outcome="changed") == 1  # the start's compile
        assert value(found, "mesh_seat_compile_kinds_total", change="written") > 0
        assert value(found, "mesh_seat_compile_runs_total", outcome="failed") == 0

        stats = json.loads((await bus.request(f"$SRV.STATS.{buckets.SEAT}", b"")).data)
        endpoint = stats["endpoints"][0]
        assert endpoint["data"]["answers"] == {
            "needs": {"200": 1, "400": 1, "410": 1},
            "registry": {"200": 2},
            UNREAD: {"400": 1},
        }
        assert endpoint["num_requests"] == 6
        assert endpoint["num_errors"] == 3  # nats-py alone would say 0: the handler never raises
        assert endpoint["last_error"].startswith("410 cursor unknown or expired")
        assert endpoint["processing_time"] > 0
        assert endpoint["average_processing_time"] == endpoint["processing_time"] // 6
        assert set(endpoint["data"]["latency"]) == {"needs", "registry", UNREAD}
        assert endpoint["data"]["latency"]["registry"]["answers"] == 2


async def test_a_streamed_listing_kept_behind_its_cursor_is_seen_then_gone(
    nats_server: LocalNats, bus: Bus, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    async with serving(nats_server.url, metrics_listen=str(port), bucket_max_value_size=60_000):
        value_of_a_page = b'"' + b"x" * 50_000 + b'"'
        await put_many(bus, buckets.NEEDS, {f"n{i}.app.dir.k{i}": value_of_a_page for i in range(40)})
        code, first = await ask(bus, b'{"what": "needs"}')
        assert code == "200"
        cursor = json.loads(first)["next"]
        assert cursor is not None
        found, _ = await scrape(url)
        kept = {way: value(found, "mesh_seat_listings_kept", way=way) for way in ("pages", "streamed")}
        assert kept == {"pages": 0, "streamed": 1}
        assert value(found, "mesh_seat_cursor_cache_bytes") > 0
        while cursor is not None:  # read to its end: the listing is forgotten
            code, page = await ask(bus, json.dumps({"what": "needs", "cursor": cursor}).encode())
            assert code == "200"
            cursor = json.loads(page)["next"]
        found, _ = await scrape(url)
        assert value(found, "mesh_seat_listings_kept", way="streamed") == 0
        assert value(found, "mesh_seat_cursor_cache_bytes") == 0


async def test_compiles_are_counted_by_outcome_with_the_kinds_they_changed(nats_server: LocalNats, bus: Bus) -> None:
    async with serving(nats_server.url):
        pass  # the seat made the buckets and compiled the registry
    counts = CompileCounts()
    compiler = Compiler(bus, None, counts)
    await compiler.compile()
    kind = sorted(compiler.desired())[0]
    await put(bus, buckets.REGISTRY, kind, b"{}")
    await put(bus, buckets.REGISTRY, "zz-unknown", b"{}")
    await compiler.compile()  # writes the kind back, deletes the one no domain answers
    await bus.jetstream(f"STREAM.DELETE.KV_{buckets.REGISTRY.name}", operation="delete the registry")
    with pytest.raises(BusError):
        await compiler.compile()
    assert counts.runs == {"changed": 1, "unchanged": 1, "failed": 1}
    assert (counts.written, counts.deleted) == (1, 1)


def test_latency_buckets_are_cumulative_and_end_at_infinity() -> None:
    latency = Latency()
    for seconds in (0.0001, 0.0005, 0.003, 0.003, 99.0):
        latency.add(seconds)
    cumulative = dict(latency.cumulative())
    assert cumulative[0.0005] == 2  # at or under the bound
    assert cumulative[0.005] == 4
    assert cumulative[LATENCY_BUCKETS[-1]] == 4
    assert cumulative[float("inf")] == latency.total == 5
    assert latency.seconds == pytest.approx(99.0066)


def test_an_unknown_what_is_counted_as_unread_and_the_labels_stay_bounded() -> None:
    stats = RequestStats()
    for what in ("registry", "x" * 1000, "nodes", "'; drop"):
        stats.received += 1
        stats.answered(what, "200", 0.001)
    assert {what for what, _ in stats.answers} == {"registry", "nodes", UNREAD}
    assert set(WHATS) == {*LISTABLE, UNREAD}
    assert stats.in_flight == 0


def test_the_last_error_is_capped() -> None:
    stats = RequestStats()
    stats.answered("needs", "400", 0.001, "y" * 10_000)
    assert len(stats.last_error) <= 256
    assert stats.errors == 1


def test_the_page_cache_says_what_it_holds() -> None:
    now = [0.0]
    cache = PageCache(clock=lambda: now[0])
    cache.keep("a", [b"12345", b"678"])
    cache.keep("b", [b"9"])
    assert cache.held() == (2, 0, 9)
    now[0] = 10_000.0  # expired: no longer held, though not dropped yet
    assert cache.held() == (0, 0, 0)


async def test_the_latency_histogram_by_what_is_read_from_srv_stats_and_from_metrics(
    nats_server: LocalNats, bus: Bus
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    async with serving(nats_server.url, metrics_listen=str(port)):
        for body in (b'{"what": "registry"}', b'{"what": "needs", "node": "n1"}', b'{"what": "needs", "node": "n2"}'):
            assert (await ask(bus, body))[0] == "200"
        found, _ = await scrape_until(
            url, lambda found: value(found, "mesh_seat_request_duration_seconds_count", what="needs") == 2, "3 counted"
        )
        stats = json.loads((await bus.request(f"$SRV.STATS.{buckets.SEAT}", b"")).data)
    latency = stats["endpoints"][0]["data"]["latency"]
    for what, count in (("registry", 1), ("needs", 2)):
        histogram = latency[what]["buckets"]
        assert list(histogram) == [repr(float(bound)) for bound in LATENCY_BUCKETS] + ["+Inf"]
        assert histogram["+Inf"] == latency[what]["answers"] == count
        assert list(histogram.values()) == sorted(histogram.values())  # cumulative
        assert value(found, "mesh_seat_requests_total", what=what, code="200") == count
        for le, below in histogram.items():
            assert value(found, "mesh_seat_request_duration_seconds_bucket", what=what, le=le) == below


async def test_a_request_id_the_asker_passes_is_answered_back_and_a_bad_one_replaced(
    nats_server: LocalNats, bus: Bus
) -> None:
    async with serving(nats_server.url):
        given = await bus.request(buckets.VERB_SUBJECT, b"{}", headers={REQUEST_ID_HEADER: "ask-42"})
        refused = await bus.request(buckets.VERB_SUBJECT, b"[]", headers={REQUEST_ID_HEADER: "ask-43"})
        hostile = await bus.request(buckets.VERB_SUBJECT, b"{}", headers={REQUEST_ID_HEADER: "x" * 33})
        none = await bus.request(buckets.VERB_SUBJECT, b"{}")
    assert given.headers[REQUEST_ID_HEADER] == "ask-42"
    assert (refused.headers[REQUEST_ID_HEADER], refused.headers[ERROR_CODE]) == ("ask-43", "400")
    assert len(hostile.headers[REQUEST_ID_HEADER]) == len(none.headers[REQUEST_ID_HEADER]) == 8
