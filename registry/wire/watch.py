"""A KV watch that can be granted per node and that survives its consumer being lost.

nats-py's `kv.watch` creates its consumer without a filter in the create subject, so it cannot
be granted for `<node>.>` only, and its ordered consumer, reset under the same name, silently
stops when the old one still exists. `scoped_watch` reads through a `registry.wire.feed.Feed` instead.

It yields the latest entry of every matching key first (deletions included), then every change.
A broken feed (a gap, a heartbeat naming a later sequence), a reconnect of the bus, or heartbeats
missing for three intervals while connected (the consumer deleted) make it open a new feed from
the stream sequence after the last one seen, retrying with backoff while that fails. Nothing is
lost or delivered twice. Nothing is created while the bus is away: a create sent then would go out
on reconnect after the watch gave up on it, and leave a consumer behind for good (see
`registry.wire.bus`); the watch waits for the connection and resumes on the reconnect.

A stream can go back: JetStream acknowledges a write before it reaches the disk, and a server
restarted after a power failure holds an earlier prefix of its stream. Resuming after the last
sequence seen would then wait past the stream's end, blind to every write until the stream grows
back there. So before each re-opening, and every `check` while open, the stream's last sequence is
asked (its info, one request); found below the last one seen, the watch starts again from what the
stream holds now (the latest entry of every key) and tells `on_reset` first, so that whoever keeps
what it delivered drops it: some of it the stream no longer holds.

    async with scoped_watch(bus, Bucket("mesh-config_values", shape), "db-url") as watch:
        async for event in watch:
            ...

The watch belongs to a task group of its own, opened and cancelled with the `async with`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from registry.contract import Bucket
from registry.errors import BusError, ConnectionClosed
from registry.wire.bus import Bus
from registry.wire.feed import Feed, FeedStart, KvItem
from registry.wire.kv import stream_last_sequence

log = logging.getLogger(__name__)


class ScopedWatch:
    """The events of one watch, as an async iterator; see `scoped_watch`."""

    def __init__(
        self,
        bus: Bus,
        bucket: Bucket,
        subject_filter: str,
        send: MemoryObjectSendStream[KvItem],
        receive: MemoryObjectReceiveStream[KvItem],
        *,
        heartbeat: timedelta,
        retry_max: timedelta,
        name: str | None = None,
        headers_only: bool = False,
        on_item: Callable[[KvItem], None] | None = None,
        on_reset: Callable[[int], None] | None = None,
        check: timedelta = timedelta(seconds=30),
    ) -> None:
        self.bus = bus
        self.bucket = bucket
        self.subject_filter = subject_filter
        self.feed: Feed | None = None
        self.resets = 0
        self._send = send
        self._receive = receive
        self._heartbeat = heartbeat.total_seconds()
        self._retry_max = retry_max.total_seconds()
        self._last_sequence = 0
        self._started = False  # reported to whoever started it
        self._name = name
        self._headers_only = headers_only
        self._on_item = on_item
        self._on_reset = on_reset
        self._check = check.total_seconds()
        self.went_back = 0  # times the stream was found shorter than seen
        self._opened_on: int | None = None  # the bus's reconnect count its feed was last opened on

    @property
    def consumer_name(self) -> str | None:
        return self.feed.name if self.feed is not None else self._name

    @property
    def current(self) -> bool:
        """Whether what the watch delivered is known to stand: its feed was opened on the connection
        as it is now (after the stream was checked for going back), and that connection is up.
        Between a reconnect and the feed's re-opening, a stream that went back meanwhile is not yet
        known to have: whoever answers from what the watch delivered answers otherwise until then."""
        return self.bus.connected and self._opened_on == self.bus.reconnects

    def __aiter__(self) -> ScopedWatch:
        return self

    async def __anext__(self) -> KvItem:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keeps a feed open until cancelled or the connection is closed for good; ready after the
        first attempt (one the closed connection ended too: whoever started it then goes on to
        find the connection closed, rather than failing on a watch that never said it started)."""
        try:
            await self._keep_open(task_status)
        except ConnectionClosed:
            log.info("watch %s %s: the connection is closed; the watch ends", self.bucket.name, self.subject_filter)
            self._send.close()
            self._ready(task_status)
        finally:
            with anyio.move_on_after(2, shield=True):
                await self._close_feed(delete=True)

    def _ready(self, task_status: TaskStatus[None]) -> None:
        if not self._started:
            self._started = True
            task_status.started()

    async def _keep_open(self, task_status: TaskStatus[None]) -> None:
        delay = min(1.0, self._retry_max)
        while True:
            await self.bus.until_connected(operation=f"watch {self.bucket.name} {self.subject_filter}")
            seen = self.bus.reconnects
            try:
                await self._open_feed()
                self._opened_on = seen
                delay = min(1.0, self._retry_max)
            except ConnectionClosed:
                raise
            except BusError as err:
                log.warning(
                    "watch %s %s: %s; retrying in %.1f s",
                    self.bucket.name,
                    self.subject_filter,
                    err.reason,
                    delay,
                    extra={"bucket": self.bucket.name},
                )
                await self._close_feed()
                self._ready(task_status)
                with anyio.move_on_after(delay):  # a reconnect in the meantime is a reason to try at once
                    await self.bus.reconnected(seen)
                delay = min(delay * 2, self._retry_max)
                continue
            self._ready(task_status)
            reason = await self._until_broken(seen)
            self.resets += 1
            log.info(
                "watch %s %s: %s; re-reading from stream sequence %d",
                self.bucket.name,
                self.subject_filter,
                reason,
                self._last_sequence + 1,
            )
            await self._close_feed()

    async def _open_feed(self) -> None:
        if self._last_sequence > 0:
            last = await self._stream_last()
            if last < self._last_sequence:
                self._restart_from_scratch(last)
        self.feed = Feed(
            self.bus,
            self.bucket,
            [self.subject_filter],
            self._deliver,
            start=FeedStart(self._last_sequence),
            heartbeat=self._heartbeat,
            inactive_threshold=max(5.0, 3 * self._heartbeat),
            name=self._name,
            headers_only=self._headers_only,
        )
        await self.feed.open(replace=self._name is not None)

    async def _stream_last(self) -> int:
        return await stream_last_sequence(self.bus, self.bucket)

    def _restart_from_scratch(self, last: int) -> None:
        """The stream went back below what this watch saw: read again from what it holds now."""
        log.warning(
            "watch %s %s: the stream went back to sequence %d, below the %d this watch had seen (a server "
            "restarted from a store behind the writes it had acknowledged); re-reading what it holds now",
            self.bucket.name,
            self.subject_filter,
            last,
            self._last_sequence,
            extra={"bucket": self.bucket.name},
        )
        self.went_back += 1
        self._last_sequence = 0
        if self._on_reset is not None:
            self._on_reset(last)

    def _deliver(self, item: KvItem, pending: int) -> None:
        if self._on_item is not None:
            self._on_item(item)
            self._last_sequence = item.revision
            return
        try:
            self._send.send_nowait(item)
            self._last_sequence = item.revision
        except anyio.WouldBlock:  # re-read from the last item delivered rather than block the connection
            assert self.feed is not None
            self.feed.broken = "the reader fell behind"
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async def _close_feed(self, *, delete: bool = False) -> None:
        """Stops listening; with `delete`, a named consumer is deleted too while the connection is up
        (a stopped watch leaves nothing behind, and nothing is sent into the reconnect buffer)."""
        feed, self.feed = self.feed, None
        if feed is None:
            return
        await feed.close()
        if delete and self._name is not None and self.bus.connected:
            try:
                await feed.delete()
            except BusError as err:
                log.info(
                    "watch %s %s: its consumer %s was not deleted (%s); it expires",
                    self.bucket.name,
                    self.subject_filter,
                    feed.name,
                    err.reason,
                )

    async def _until_broken(self, seen: int) -> str:
        """Why the feed must be opened again: broken, the connection recovered (what was published
        meanwhile never came), or heartbeats missing while connected (the consumer is gone). While the
        connection is away, nothing is tried: the reconnect resumes the watch."""
        feed = self.feed
        assert feed is not None
        checked = time.monotonic()
        while feed.broken is None:
            with anyio.move_on_after(self._heartbeat / 2):
                await self.bus.reconnected(seen)
                return "the connection was recovered"
            if self.bus.closed.is_set():
                raise ConnectionClosed(feed.operation, "the connection is closed")
            silent = time.monotonic() - feed.heard_at
            if self.bus.connected and silent > 3 * self._heartbeat:
                return f"no heartbeat for {silent:.1f} s"
            if self.bus.connected and time.monotonic() - checked > self._check:
                checked = time.monotonic()
                if await self._went_back():
                    return "the stream went back"
        return feed.broken

    async def _went_back(self) -> bool:
        """Whether the stream now ends below the last sequence seen; a bus error is no answer."""
        try:
            return await self._stream_last() < self._last_sequence
        except BusError:
            return False


@asynccontextmanager
async def scoped_watch(
    bus: Bus,
    bucket: Bucket,
    subject_filter: str,
    *,
    heartbeat: timedelta = timedelta(seconds=2),
    retry_max: timedelta = timedelta(seconds=30),
    buffer: int = 4096,
    name: str | None = None,
    headers_only: bool = False,
    on_item: Callable[[KvItem], None] | None = None,
    on_reset: Callable[[int], None] | None = None,
    check: timedelta = timedelta(seconds=30),
) -> AsyncIterator[ScopedWatch]:
    """Watches the keys of `bucket` matching `subject_filter` (relative to the bucket).

    With a `name` (one per party and purpose; the caller must be granted `CONSUMER.DELETE` on the
    stream), the consumer is deleted by that name before each re-creation and when the watch stops;
    without, each feed gets a new name and its consumer expires after nobody listens. With
    `headers_only` the values are not read, only their sizes (`KvItem.size`). With `on_item`, each
    event is handed to it as it is read, in the connection's reading task (it must not block),
    instead of being held for the iterator: nothing is buffered, and the watch never falls behind.
    `on_reset` is told, with the stream's last sequence, when the stream went back and the watch
    starts again from what it holds (see the module's docstring; checked every `check`): entries
    delivered before may be gone. It is called in the watch's task, between two deliveries."""
    send, receive = anyio.create_memory_object_stream[KvItem](max_buffer_size=buffer)
    watch = ScopedWatch(
        bus,
        bucket,
        subject_filter,
        send,
        receive,
        heartbeat=heartbeat,
        retry_max=retry_max,
        name=name,
        headers_only=headers_only,
        on_item=on_item,
        on_reset=on_reset,
        check=check,
    )
    async with send, receive, anyio.create_task_group() as tg:
        await tg.start(watch.run)
        try:
            yield watch
        finally:
            tg.cancel_scope.cancel()
