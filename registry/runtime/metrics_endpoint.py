"""An HTTP endpoint answering `GET /metrics` with what `render` makes, as a task of a program's group
(the seat's, a node client's).

A few lines of HTTP/1.0 over an anyio listener rather than prometheus-client's server, which runs in
a thread of its own and would read the program's state from outside its event loop. Each connection
is one request: its head is read within `READ_TIMEOUT` and at most `MAX_HEAD` bytes, then answered
and closed; `MAX_SCRAPES` are answered at once, the others wait. At most `MAX_CONNECTIONS` are
held at once, and `MAX_PER_PEER` from one address: idle connections would otherwise each hold one
of the program's file descriptors, and a local user opening a thousand of them ran the seat out of
descriptors (the failed accept ended the seat's task group). Past either bound, the oldest
connection still waiting for its head is closed to make room; a connection arriving when every
one held is being answered is closed unread. So 64 idle sockets, which once held every place for
the whole deadline (1 to 3 scrapes of 20 answered), cannot keep a scraper out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus
from pydantic import AfterValidator

from registry.errors import SettingsError

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
PATH = "/metrics"
READ_TIMEOUT = 2.0  # a scraper sends its request head at once
MAX_HEAD = 8192
MAX_SCRAPES = 4
MAX_CONNECTIONS = 64
MAX_PER_PEER = 16

Render = Callable[[], Awaitable[bytes]]


# `PORT` or `HOST:PORT` (`[::1]:PORT` for IPv6).
LISTEN_PATTERN = re.compile(r"(\[[0-9A-Fa-f:.]+\]:|[^\s:\[\]]+:)?[0-9]{1,5}")
MAX_PORT = 65535


def listen_address(listen: str) -> tuple[str, int]:
    """`HOST:PORT` or `PORT` (on 127.0.0.1) as a host and a port; `[::1]:9464` for IPv6."""
    host, _, port = listen.rpartition(":")
    return (host.strip("[]") or DEFAULT_HOST), int(port)


def checked_listen(listen: str) -> str:
    """`listen` when it is an address `serve_metrics` can listen on; `ValueError` saying why not."""
    if not LISTEN_PATTERN.fullmatch(listen):
        raise ValueError(f"{listen!r} is not PORT, HOST:PORT nor [IPv6]:PORT")
    if listen_address(listen)[1] > MAX_PORT:
        raise ValueError(f"{listen!r}: the port must be 0 to {MAX_PORT}")
    return listen


# A setting's type: where a program serves its /metrics, checked as the settings are read.
MetricsListen = Annotated[str, AfterValidator(checked_listen)]


async def serve_metrics(
    listen: str,
    render: Render,
    *,
    max_connections: int = MAX_CONNECTIONS,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serves `render`'s text at `PATH` until cancelled; reports started with the port bound."""
    host, port = listen_address(listen)
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as err:
        raise SettingsError("metrics_listen", f"cannot listen on {listen}: {err.strerror or err}") from None
    async with listener:
        bound = listener.extra(SocketAttribute.local_port)  # noqa: S610 -- anyio's typed attribute, no Django
        log.info("metrics served at http://%s:%d%s", host, bound, PATH)
        task_status.started(bound)
        connections = _Connections(max_connections, MAX_PER_PEER)
        await listener.serve(partial(_answer_within, connections, render, anyio.CapacityLimiter(MAX_SCRAPES)))


@dataclass(eq=False)
class _Connection:
    peer: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    reading: bool = True  # its request head not read yet: an idle one, closed first to make room


class _Connections:
    """The connections held, oldest first, at most `most` and `per_peer` from one address."""

    def __init__(self, most: int, per_peer: int) -> None:
        self._most, self._per_peer = most, per_peer
        self._held: list[_Connection] = []

    def admit(self, peer: str) -> _Connection | None:
        """A place for a connection from `peer`, made by closing the oldest one still waiting for
        its head where a bound is reached; `None` when none is waiting (every place answering)."""
        if sum(held.peer == peer for held in self._held) >= self._per_peer and not self._evict(peer):
            return None
        if len(self._held) >= self._most and not self._evict(None):
            return None
        connection = _Connection(peer)
        self._held.append(connection)
        return connection

    def release(self, connection: _Connection) -> None:
        if connection in self._held:
            self._held.remove(connection)

    def _evict(self, peer: str | None) -> bool:
        idle = (held for held in self._held if held.reading and peer in (None, held.peer))
        oldest = next(idle, None)
        if oldest is None:
            return False
        oldest.scope.cancel()
        self._held.remove(oldest)
        return True


async def _answer_within(
    connections: _Connections, render: Render, scrapes: anyio.CapacityLimiter, stream: SocketStream
) -> None:
    connection = connections.admit(_peer_of(stream))
    if connection is None:
        await stream.aclose()  # every place is answering: closed unread, its descriptor back at once
        return
    try:
        with connection.scope:
            await _answer(connection, render, scrapes, stream)
    finally:
        connections.release(connection)


def _peer_of(stream: SocketStream) -> str:
    try:
        address = stream.extra(SocketAttribute.remote_address)  # noqa: S610 -- anyio's typed attribute
    except anyio.TypedAttributeLookupError:
        return ""
    return str(address[0]) if isinstance(address, tuple) else str(address)


async def _answer(
    connection: _Connection, render: Render, scrapes: anyio.CapacityLimiter, stream: SocketStream
) -> None:
    async with stream:
        try:
            with anyio.fail_after(READ_TIMEOUT):
                request_line = await _request_line(stream)
            connection.reading = False
            status, body = await _response(request_line, render, scrapes)
            await stream.send(_http(status, body))
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError, ValueError):
            return  # a scraper that went away or never asked: nothing to say to it


async def _request_line(stream: SocketStream) -> str:
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        head += await stream.receive(MAX_HEAD)
        if len(head) > MAX_HEAD:
            raise ValueError("request head too long")
    return head.split(b"\n", 1)[0].decode("latin-1").strip()


async def _response(request_line: str, render: Render, scrapes: anyio.CapacityLimiter) -> tuple[str, bytes]:
    method, _, rest = request_line.partition(" ")
    target = rest.partition(" ")[0].partition("?")[0]
    if target != PATH:
        return "404 Not Found", f"not found: the metrics are at {PATH}\n".encode()
    if method != "GET":
        return "405 Method Not Allowed", b"only GET\n"
    async with scrapes:
        return "200 OK", await render()


def _http(status: str, body: bytes) -> bytes:
    from prometheus_client import CONTENT_TYPE_LATEST  # noqa: PLC0415 (a scrape's, never a command's start)

    content_type = CONTENT_TYPE_LATEST if status.startswith("200") else "text/plain; charset=utf-8"
    head = (
        f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
