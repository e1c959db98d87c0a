"""The seat's metrics endpoint read over HTTP, once or until what the test waits for holds."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

import anyio
import anyio.to_thread
import pytest

from tests.prometheus import Figures, samples

BOUND = 10.0


def fetch(url: str, method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(url, method=method)  # noqa: S310 -- a loopback URL the test made
    try:
        with urllib.request.urlopen(request, timeout=BOUND) as answer:  # noqa: S310
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


async def scrape(url: str) -> tuple[Figures, str]:
    status, content_type, text = await anyio.to_thread.run_sync(fetch, url)
    assert (status, content_type.split(";")[0]) == (200, "text/plain")
    return samples(text), text


async def scrape_until(url: str, check: Callable[[Figures], bool], what: str) -> tuple[Figures, str]:
    """A scrape once `check` holds: the seat's fleet view follows its buckets as they are written."""
    try:
        with anyio.fail_after(BOUND):
            while True:
                found, text = await scrape(url)
                if check(found):
                    return found, text
                await anyio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"not within {BOUND} s: {what}; last scraped:\n{text}")
