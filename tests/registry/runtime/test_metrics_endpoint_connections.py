"""The seat's metrics endpoint holds a bounded number of connections: past it, the oldest idle
ones are closed, so idle connections cannot take the seat's file descriptors."""

from __future__ import annotations

import socket
from contextlib import ExitStack

import anyio

from registry.runtime import serve_metrics

HELD = 3


async def render() -> bytes:
    return b"mesh_up 1\n"


def idle_connection(stack: ExitStack, port: int) -> socket.socket:
    connection = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
    connection.settimeout(0)
    return connection


def closed_by_the_server(connection: socket.socket) -> bool:
    try:
        return connection.recv(1) == b""
    except BlockingIOError:
        return False


async def test_connections_past_the_bound_are_closed_unread_and_a_scrape_still_answers() -> None:
    async with anyio.create_task_group() as tasks:
        port = await tasks.start(
            lambda task_status: serve_metrics("0", render, max_connections=HELD, task_status=task_status)
        )
        with ExitStack() as stack:
            idle = [idle_connection(stack, port) for _ in range(HELD + 2)]
            with anyio.fail_after(1.5):  # below the endpoint's 2 s to read a request
                while (closed := [closed_by_the_server(connection) for connection in idle]).count(True) < 2:
                    await anyio.sleep(0.05)
            assert closed.count(True) == 2, closed  # the ones past the bound, whichever they are
        with anyio.fail_after(10):  # the idle ones gone, their places are free again
            async with await anyio.connect_tcp("127.0.0.1", port) as scrape:
                await scrape.send(b"GET /metrics HTTP/1.0\r\n\r\n")
                answer = b""
                while not answer.endswith(b"mesh_up 1\n"):
                    answer += await scrape.receive()
        assert answer.startswith(b"HTTP/1.0 200 OK")
        tasks.cancel_scope.cancel()
