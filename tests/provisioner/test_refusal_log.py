"""A party's refusals are logged once a minute per code, with how many were left unsaid: a node
sending bad requests as fast as it can wrote a log line each, flooding the log an operator reads.
Against a real seat on the generated grants (both account modes), and the clock injected."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from provisioner.errors import CursorGone, RequestError
from provisioner.verb.service import RefusalLog
from registry.access import Kind
from registry.contract import buckets
from registry.wire import nats_client
from tests.isolation import Mesh, party

SERVICE_LOG = "provisioner.verb.service"


def refused_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "request refused" in record.getMessage()]


async def test_a_node_flooding_bad_requests_is_said_once_and_another_node_still_is(
    mesh: Mesh, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SERVICE_LOG)
    async with mesh.connect(party(Kind.NODE, "n1")) as n1, mesh.connect(party(Kind.NODE, "n2")) as n2:
        for _ in range(50):
            reply = await nats_client(n1).request(buckets.VERB_SUBJECT, b'{"what":"everything"}', timeout=5)
            assert reply.headers is not None and reply.headers["Nats-Service-Error-Code"] == "400"
        await nats_client(n2).request(buckets.VERB_SUBJECT, b'{"what":"everything"}', timeout=5)
        await nats_client(n1).request(buckets.VERB_SUBJECT, b'{"what":"needs","node":"n2"}', timeout=5)
        for _ in range(3):
            await nats_client(n1).request(buckets.VERB_SUBJECT, b'{"what":"needs","cursor":"guessed"}', timeout=5)
    lines = refused_lines(caplog)
    assert len([line for line in lines if "(400) from node-n1" in line]) == 1, lines
    assert len([line for line in lines if "(400) from node-n2" in line]) == 1, lines
    assert len([line for line in lines if "(403) from node-n1" in line]) == 1, lines
    assert len([line for line in lines if "(410) from node-n1" in line]) == 1, lines


def test_a_refusal_after_the_interval_says_how_many_were_left_unsaid(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=SERVICE_LOG)
    now = [0.0]
    refusals = RefusalLog(every=timedelta(seconds=60), clock=lambda: now[0])

    def refuse(err: RequestError) -> None:
        err.asker = "node-n1"
        refusals.refused(err)

    for second in range(0, 60, 10):
        now[0] = float(second)
        refuse(RequestError("bad"))
        refuse(CursorGone())
    now[0] = 60.0
    refuse(RequestError("bad"))
    assert refused_lines(caplog) == [
        "request refused (400) from node-n1: bad",
        "request refused (410) from node-n1: cursor unknown or expired; restart the listing without 'cursor'",
        "request refused (400) from node-n1 (5 more from it since, unsaid): bad",
    ]
