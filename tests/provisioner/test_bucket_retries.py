"""Which failures of a bucket's create the seat tries again (`until_enough_peers`), pure logic: a
cluster short of peers or nats-server short of its store is waited for; a refusal is raised."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest

from provisioner.seat import buckets as seat_buckets
from registry.contract import buckets
from registry.errors import JetStreamError


def failing(*codes: int) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    """An attempt answered each of `codes` in turn, then "made"; the attempts made."""
    made: list[int] = []

    async def attempt() -> str:
        made.append(len(made))
        if len(made) <= len(codes):
            code = codes[len(made) - 1]
            raise JetStreamError("create bucket x", 500, code, "error creating store for stream")
        return "made"

    return made, attempt


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seat_buckets, "BACKOFF_FIRST", 0.0)


async def test_a_store_nats_server_could_not_make_is_tried_again_and_said(caplog: pytest.LogCaptureFixture) -> None:
    made, attempt = failing(10049, 10049)
    assert await seat_buckets.until_enough_peers(buckets.REGISTRY, attempt) == "made"
    assert len(made) == 3
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said and "could not make the stream's store" in said[0]


async def test_a_refusal_is_raised_at_once() -> None:
    made, attempt = failing(10058)  # stream name already in use with a different configuration
    with pytest.raises(JetStreamError):
        await seat_buckets.until_enough_peers(buckets.REGISTRY, attempt)
    assert len(made) == 1
