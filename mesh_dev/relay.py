"""A TCP relay on loopback that plays a WAN link: it adds a delay each way, and can be cut,
stalled and restored.

Each chunk read on one side is forwarded `delay` seconds later, in order, without delaying the
next read, so the link keeps its bandwidth and only gains latency. `cut()` closes every
connection and refuses new ones (the far side sees the link go at once, as after a router
reboot); `stall()` holds every byte without closing anything (a link that stops carrying
packets: nobody is told); `restore()` ends either. `carried` counts the bytes forwarded both
ways, so a measurement can say what crossed the link while it ran.

Used by the tests of sites and by the benchmark across sites (`bench.sites`).
"""

from __future__ import annotations

import math
import socket
import time

import anyio
from anyio.abc import SocketStream, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream


def unused_port() -> int:
    """A loopback port nobody listens on now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Relay:
    """A TCP relay to `target` (a loopback port) with `delay` seconds added each way, listening
    on `port` (a free one when not given)."""

    def __init__(self, target: int, delay: float, port: int | None = None) -> None:
        self.target = target
        self.delay = delay
        self.port = port if port is not None else unused_port()
        self.carried = 0
        self._flowing = anyio.Event()
        self._flowing.set()
        self._open = True
        self._links: set[anyio.CancelScope] = set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        async with listener:
            task_status.started()
            await listener.serve(self._link)

    def cut(self) -> None:
        """Closes every connection through the relay and refuses new ones until `restore()`."""
        self._open = False
        for scope in list(self._links):
            scope.cancel()

    def stall(self) -> None:
        """Holds every byte, both ways, until `restore()`; no connection is closed."""
        self._flowing = anyio.Event()

    def restore(self) -> None:
        self._open = True
        self._flowing.set()

    async def _link(self, client: SocketStream) -> None:
        async with client:
            if not self._open:
                return
            try:
                upstream = await anyio.connect_tcp("127.0.0.1", self.target)
            except OSError:
                return
            link = anyio.CancelScope()
            self._links.add(link)
            try:
                with link:
                    async with upstream, anyio.create_task_group() as pumps:
                        pumps.start_soon(self._pump, client, upstream, link)
                        pumps.start_soon(self._pump, upstream, client, link)
            finally:
                self._links.discard(link)

    async def _pump(self, source: SocketStream, sink: SocketStream, link: anyio.CancelScope) -> None:
        """Forwards each chunk `delay` after it was read, in order, without delaying the next read;
        once one side closes, the whole link goes, as a TCP connection's would."""
        send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](math.inf)
        async with send, receive, anyio.create_task_group() as tasks:
            tasks.start_soon(self._deliver, receive, sink)
            await self._read(source, send)
            tasks.cancel_scope.cancel()
        link.cancel()

    async def _read(self, source: SocketStream, send: MemoryObjectSendStream[tuple[float, bytes]]) -> None:
        try:
            async for chunk in source:
                await send.send((time.monotonic() + self.delay, chunk))
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass

    async def _deliver(self, receive: MemoryObjectReceiveStream[tuple[float, bytes]], sink: SocketStream) -> None:
        async for due, chunk in receive:
            await anyio.sleep(max(0.0, due - time.monotonic()))
            await self._flowing.wait()
            await sink.send(chunk)
            self.carried += len(chunk)
