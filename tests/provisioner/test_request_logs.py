"""Every line the seat logs while it answers a request carries that request's id (one per
request) and, once known, who asked and what: an operator greps one id to see a request whole."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from provisioner.seat.buckets import ensure_buckets
from provisioner.verb.handler import Verb
from provisioner.verb.paging import PageCache
from provisioner.verb.service import verb_service
from registry.access import Kind, Party, PartyMap
from registry.contract import REQUEST_ID_HEADER, buckets
from registry.runtime.logs import event_fields
from registry.wire import BucketConfig, Bus
from tests.helpers import put_many

NODE = Party(kind=Kind.NODE, name="n1")


class EveryoneIsNodeOne(PartyMap):
    """Says every request came from node n1: the party's label in the logs is what is tested here;
    who asks is the bus's to say (tests/isolation/test_isolation.py)."""

    def __init__(self) -> None:
        super().__init__({})

    def who_asks(self, headers: Mapping[str, str]) -> Party:
        return NODE


async def test_a_requests_lines_carry_its_id_party_and_what(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    await ensure_buckets(bus, BucketConfig())
    await put_many(bus, buckets.NEEDS, {f"n1.m{i}.config.x": b'{"placeholder":"x"}' for i in range(3)})
    caplog.set_level(logging.DEBUG, logger="provisioner")
    async with verb_service(bus, verb=Verb(bus, PageCache(), parties=EveryoneIsNodeOne())):
        await bus.request(buckets.VERB_SUBJECT, b'{"what": "needs"}')
        await bus.request(buckets.VERB_SUBJECT, b'{"what": "needs"}', headers={REQUEST_ID_HEADER: "asked-by-me"})
        await bus.request(buckets.VERB_SUBJECT, b'{"what": "nope"}')
    answered = [event_fields(r) for r in caplog.records if r.getMessage().startswith("answered ")]
    assert len(answered) == 2
    assert all(fields.keys() >= {"request", "party", "what"} for fields in answered)
    assert {(fields["party"], fields["what"]) for fields in answered} == {("node-n1", "needs")}
    assert answered[0]["request"] != answered[1]["request"]
    refused = [event_fields(r) for r in caplog.records if r.getMessage().startswith("request refused")]
    assert len(refused) == 1
    assert refused[0]["party"] == "node-n1"
    assert refused[0]["code"] == "400"
    assert refused[0]["request"] not in {fields["request"] for fields in answered}
    assert answered[1]["request"] == "asked-by-me"  # the asker's own id
    assert all(len(str(fields["request"])) == 8 for fields in [answered[0], *refused])
    outside = [r for r in caplog.records if r.getMessage().startswith("serving ")]
    assert outside
    assert "request" not in event_fields(outside[0])
