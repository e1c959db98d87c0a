"""Idle sockets cannot keep a scraper out of the metrics endpoint: the oldest connection still
waiting for its request head is closed to make room, and one peer holds at most `MAX_PER_PEER`."""

from __future__ import annotations

import socket
from contextlib import ExitStack

import anyio

from registry.runtime import serve_metrics
from registry.runtime.metrics_endpoint import MAX_CONNECTIONS

IDLE = 64
SCRAPES = 20


async def render() -> bytes:
    return b"mesh_up 1\n"


async def scraped(port: int) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as scrape:
        await scrape.send(b"GET /metrics HTTP/1.0\r\n\r\n")
        answer = b""
        try:
            while True:
                answer += await scrape.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
            return answer


async def test_sixty_four_idle_sockets_leave_every_one_of_twenty_scrapes_answered() -> None:
    assert IDLE >= MAX_CONNECTIONS  # every place the endpoint has, taken by an idle socket
    async with anyio.create_task_group() as tasks:
        port = await tasks.start(lambda task_status: serve_metrics("0", render, task_status=task_status))
        with ExitStack() as stack:
            for _ in range(IDLE):
                stack.enter_context(socket.create_connection(("127.0.0.1", port)))
            with anyio.fail_after(30):
                answers = [await scraped(port) for _ in range(SCRAPES)]
        answered = [
            answer for answer in answers if answer.startswith(b"HTTP/1.0 200 OK") and answer.endswith(b"mesh_up 1\n")
        ]
        assert len(answered) == SCRAPES, f"{len(answered)} of {SCRAPES} scrapes answered"
        tasks.cancel_scope.cancel()
