"""`log_context`: fields said once around a piece of work land on every line logged inside it,
and inside the tasks it starts, never outside."""

from __future__ import annotations

import io
import json
import logging
import re

import anyio
import anyio.lowlevel
import pytest

from registry.runtime import LogFormat, configure_logging, event, log_context, new_log_id
from registry.runtime.logs import event_fields

log = logging.getLogger("registry.test_log_context")


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=log.name)
    return caplog


def fields_by_message(records: pytest.LogCaptureFixture) -> dict[str, dict[str, object]]:
    return {record.getMessage(): event_fields(record) for record in records.records}


def test_every_line_inside_carries_the_fields_and_none_outside(records: pytest.LogCaptureFixture) -> None:
    log.info("before")
    with log_context(request="r1", party="node-1"):
        log.info("first")
        log.info("second", extra=event(module="web"))
    log.info("after")
    assert fields_by_message(records) == {
        "before": {},
        "first": {"request": "r1", "party": "node-1"},
        "second": {"module": "web", "request": "r1", "party": "node-1"},
        "after": {},
    }


def test_a_nested_context_adds_to_the_outer_one_and_gives_it_back(records: pytest.LogCaptureFixture) -> None:
    with log_context(node="n1", request="outer"):
        with log_context(reconcile="c1", request="inner"):
            log.info("nested")
        log.info("outer again")
    assert fields_by_message(records) == {
        "nested": {"node": "n1", "request": "inner", "reconcile": "c1"},
        "outer again": {"node": "n1", "request": "outer"},
    }


def test_the_fields_are_gone_after_an_exception_left_the_context(records: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RuntimeError), log_context(request="failing"):
        raise RuntimeError
    log.info("after the failure")
    assert fields_by_message(records) == {"after the failure": {}}


def test_requests_handled_one_after_another_in_one_task_keep_their_own_ids(records: pytest.LogCaptureFixture) -> None:
    for number in range(3):
        with log_context(request=f"r{number}", party=f"p{number}"):
            log.info("request %d", number)
    assert [event_fields(record) for record in records.records] == [
        {"request": "r0", "party": "p0"},
        {"request": "r1", "party": "p1"},
        {"request": "r2", "party": "p2"},
    ]


def test_the_records_own_fields_win_over_the_contexts(records: pytest.LogCaptureFixture) -> None:
    with log_context(node="from-context", key="from-context", request="r1"):
        log.info("event", extra=event(node="explicit"))
        log.info("straight", extra={"key": "explicit"})
    assert fields_by_message(records) == {
        "event": {"node": "explicit", "key": "from-context", "request": "r1"},
        "straight": {"node": "from-context", "key": "explicit", "request": "r1"},
    }


async def test_tasks_started_inside_carry_the_fields_and_tasks_started_before_do_not(
    records: pytest.LogCaptureFixture,
) -> None:
    entered = anyio.Event()

    async def started_before() -> None:
        await entered.wait()
        log.info("task started before")

    async def started_inside() -> None:
        await anyio.lowlevel.checkpoint()
        log.info("task started inside")

    async with anyio.create_task_group() as outside:
        outside.start_soon(started_before)
        with log_context(reconcile="c1"):
            entered.set()
            async with anyio.create_task_group() as inside:
                inside.start_soon(started_inside)
    assert fields_by_message(records) == {
        "task started inside": {"reconcile": "c1"},
        "task started before": {},
    }


def logged(log_format: LogFormat) -> str:
    stream = io.StringIO()
    configure_logging(log_format=log_format, level="INFO", stream=stream)
    with log_context(request="ab12cd34", party="node-1"), log_context(reconcile="0f0f0f0f"):
        log.info("asked", extra=event(what="needs"))
    return stream.getvalue().strip()


def test_text_shows_the_contexts_fields_as_key_value_pairs() -> None:
    assert logged("text").endswith("asked request=ab12cd34 party=node-1 reconcile=0f0f0f0f what=needs")


def test_json_carries_the_contexts_fields() -> None:
    entry = json.loads(logged("json"))
    assert {k: entry[k] for k in ("message", "request", "party", "reconcile", "what")} == {
        "message": "asked",
        "request": "ab12cd34",
        "party": "node-1",
        "reconcile": "0f0f0f0f",
        "what": "needs",
    }


def test_a_log_id_is_eight_lowercase_hex_digits_and_new_each_time() -> None:
    ids = {new_log_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"[0-9a-f]{8}", log_id) for log_id in ids)
