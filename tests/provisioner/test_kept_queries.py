"""The queries the verb keeps by body: a kept one is the query its body asks, a refused body is
refused every time, and a long body (a cursor's) is read anew each time."""

from __future__ import annotations

import json

import pytest

from provisioner.errors import RequestError
from provisioner.verb.request import KEPT_BODY_BYTES, Query, parse_request


def test_a_body_asked_again_is_answered_the_query_it_asks() -> None:
    body = json.dumps({"what": "needs", "node": "n1"}).encode()
    first, again = parse_request(body), parse_request(body)
    assert first == again == Query(what="needs", node="n1")
    assert again.given() == {"what": "needs", "node": "n1"}


@pytest.mark.parametrize(
    "body",
    [b'{"what":"registry","node":"n1"}', b'{"what":"nodes","bogus":1}', b"[1]"],
    ids=["a filter that does not apply", "an unknown field", "not an object"],
)
def test_a_refused_body_is_refused_each_time_it_is_sent(body: bytes) -> None:
    for _ in range(2):
        with pytest.raises(RequestError):
            parse_request(body)


def test_a_body_past_the_kept_size_is_read_and_answered_alike() -> None:
    cursor = "c" * KEPT_BODY_BYTES
    body = json.dumps({"what": "needs", "cursor": cursor}).encode()
    assert len(body) > KEPT_BODY_BYTES
    assert parse_request(body) == parse_request(body) == Query(what="needs", cursor=cursor)
