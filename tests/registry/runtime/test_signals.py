"""The first SIGTERM asks (sets `stop`), a second forces (cancels), in this very process."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import anyio
import pytest

from registry.runtime import until_signalled


async def test_the_first_signal_sets_stop_and_the_body_finishes() -> None:
    async def body(stop: anyio.Event) -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        await stop.wait()
        await anyio.sleep(0.05)  # work that finishes after the ask
        return "finished"

    with anyio.fail_after(10):
        assert await until_signalled(body) == "finished"


async def test_a_second_signal_cancels_the_body_at_once() -> None:
    cancelled = anyio.Event()

    async def body(stop: anyio.Event) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        await stop.wait()
        os.kill(os.getpid(), signal.SIGINT)
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    with anyio.fail_after(10):
        assert await until_signalled(body) is None
    assert cancelled.is_set()


async def test_the_grace_after_the_first_signal_bounds_the_body() -> None:
    async def body(stop: anyio.Event) -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep_forever()
        return "never"

    with anyio.fail_after(10):
        assert await until_signalled(body, grace=timedelta(milliseconds=50)) is None


async def test_an_error_of_the_body_is_raised_as_itself() -> None:
    async def body(stop: anyio.Event) -> str:
        raise LookupError("what the body raised")

    with pytest.raises(LookupError, match="what the body raised"):
        await until_signalled(body)
