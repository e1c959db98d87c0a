"""A KV watch that can be permission-scoped and that survives its consumer being lost.

nats-py's `kv.watch` creates its consumer without a filter in the create subject, so it cannot
be granted for `<node>.>` only, and its ordered consumer, reset under the same name, silently
stops when the old one still exists. `scoped_watch` instead uses, like `registry.kv.snapshot`,
a named ephemeral push consumer with a single filter subject, so its create subject is
`$JS.API.CONSUMER.CREATE.KV_<b>.<name>.$KV.<b>.<filter>`.

It yields the latest entry of every matching key first (deletions included), then every change.
The consumer is flow-controlled with an idle heartbeat; a gap in consumer sequences, a heartbeat
naming a later sequence than seen, or heartbeats missing for three intervals (the bus away, the
consumer deleted) make it re-create the consumer under a new name from the stream sequence after
the last one seen, retrying with backoff while that fails. Nothing is lost or delivered twice.

A consumer left behind (on stop or reset) expires on the server once nobody listens on its
deliver subject for `inactive_threshold` (three heartbeats, at least 5 s). It is never deleted
by the watcher: that would need a grant of `$JS.API.CONSUMER.DELETE.KV_<b>.*`, which cannot be
narrowed to one's own consumers and would let a node delete the watches of others.

    async with scoped_watch(bus, "mesh-config_values", "db-url") as watch:
        async for event in watch:
            ...

The watch belongs to a task group of its own, opened and cancelled with the `async with`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api
from nats.nuid import NUID

from registry.bus import Bus, BusError
from registry.kv import KvItem, ack_metadata

log = logging.getLogger(__name__)

_REMOVED = ("DEL", "PURGE")
_nuid = NUID()


WatchEvent = KvItem  # an event is the entry as it now stands, a deletion included


class ScopedWatch:
    """The events of one watch, as an async iterator; see `scoped_watch`."""

    def __init__(
        self, bus: Bus, bucket: str, subject_filter: str, send: MemoryObjectSendStream[WatchEvent],
        receive: MemoryObjectReceiveStream[WatchEvent], *, heartbeat: timedelta, retry_max: timedelta,
    ) -> None:  # fmt: skip
        self.bus = bus
        self.bucket = bucket
        self.subject_filter = subject_filter
        self.consumer_name: str | None = None
        self.resets = 0
        self._send = send
        self._receive = receive
        self._heartbeat = heartbeat.total_seconds()
        self._retry_max = retry_max.total_seconds()
        self._prefix = f"$KV.{bucket}."
        self._sub: Subscription | None = None
        self._consumer_seq = 0
        self._stream_seq = 0
        self._heard_at = time.monotonic()
        self._broken: str | None = None
        self._generation = 0

    def __aiter__(self) -> ScopedWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keeps a consumer alive until cancelled; ready after the first attempt."""
        delay = min(1.0, self._retry_max)
        started = False
        try:
            while True:
                try:
                    await self._start_consumer()
                    delay = min(1.0, self._retry_max)
                except BusError as err:
                    log.warning("watch %s %s: %s; retrying in %.1f s", self.bucket, self.subject_filter, err, delay)
                    await self._stop_consumer()
                    if not started:
                        task_status.started()
                        started = True
                    await anyio.sleep(delay)
                    delay = min(delay * 2, self._retry_max)
                    continue
                if not started:
                    task_status.started()
                    started = True
                reason = await self._until_broken()
                self.resets += 1
                log.info("watch %s %s: %s; re-creating from stream sequence %d",
                         self.bucket, self.subject_filter, reason, self._stream_seq + 1)  # fmt: skip
                await self._stop_consumer()
        finally:
            with anyio.move_on_after(2, shield=True):
                await self._stop_consumer()

    async def _start_consumer(self) -> None:
        self._consumer_seq = 0
        self._broken = None
        self._heard_at = time.monotonic()
        inbox = self.bus.nc.new_inbox()
        name = _nuid.next().decode()
        self._generation += 1
        generation = self._generation

        async def on_message(msg: Msg) -> None:
            if generation == self._generation:  # a message of a consumer already replaced is dropped
                await self._on_message(msg)

        with self.bus.translate_errors(f"watch {self.bucket} {self.subject_filter}"):
            self._sub = await self.bus.nc.subscribe(inbox, cb=on_message)
            self.consumer_name = name
            await self.bus.js.add_consumer(f"KV_{self.bucket}", config=self._config(name, inbox))

    def _config(self, name: str, inbox: str) -> api.ConsumerConfig:
        resume = self._stream_seq > 0
        return api.ConsumerConfig(
            name=name,
            deliver_subject=inbox,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE if resume else api.DeliverPolicy.LAST_PER_SUBJECT,
            opt_start_seq=self._stream_seq + 1 if resume else None,
            ack_policy=api.AckPolicy.NONE,
            filter_subject=f"{self._prefix}{self.subject_filter}",
            flow_control=True,
            idle_heartbeat=self._heartbeat,
            inactive_threshold=max(5.0, 3 * self._heartbeat),
            mem_storage=True,
            num_replicas=1,
        )

    async def _stop_consumer(self) -> None:
        """Stops listening; the consumer expires on the server (see the module's docstring)."""
        sub = self._sub
        self._sub = self.consumer_name = None
        self._generation += 1
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:  # a closed connection has no subscription left to end
                log.debug("unsubscribe failed", exc_info=True)

    async def _until_broken(self) -> str:
        while self._broken is None:
            await anyio.sleep(self._heartbeat / 2)
            silent = time.monotonic() - self._heard_at
            if silent > 3 * self._heartbeat:
                return f"no heartbeat for {silent:.1f} s"
        return self._broken

    async def _on_message(self, msg: Msg) -> None:
        if self._broken is not None:
            return
        self._heard_at = time.monotonic()
        headers = msg.headers or {}
        if headers.get("Status") == "100":
            await self._answer_control(msg, headers)
            return
        stream_seq, consumer_seq, _ = ack_metadata(msg.reply)
        if consumer_seq != self._consumer_seq + 1:
            self._broken = f"consumer sequence {self._consumer_seq} then {consumer_seq}"
            return
        self._consumer_seq, self._stream_seq = consumer_seq, stream_seq
        deleted = headers.get("KV-Operation") in _REMOVED
        event = WatchEvent(msg.subject[len(self._prefix) :], msg.data, stream_seq, deleted)
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._send.send(event)

    async def _answer_control(self, msg: Msg, headers: dict[str, str]) -> None:
        reply = msg.reply or headers.get("Nats-Consumer-Stalled")
        if reply:
            await self.bus.nc.publish(reply)
        last = headers.get("Nats-Last-Consumer")
        if not msg.reply and last is not None and int(last) > self._consumer_seq:
            self._broken = f"heartbeat names consumer sequence {last}, last seen {self._consumer_seq}"


@asynccontextmanager
async def scoped_watch(
    bus: Bus, bucket: str, subject_filter: str, *, heartbeat: timedelta = timedelta(seconds=2),
    retry_max: timedelta = timedelta(seconds=30), buffer: int = 256,
) -> AsyncIterator[ScopedWatch]:  # fmt: skip
    """Watches the keys of `bucket` matching `subject_filter` (relative to the bucket)."""
    send, receive = anyio.create_memory_object_stream[WatchEvent](max_buffer_size=buffer)
    watch = ScopedWatch(bus, bucket, subject_filter, send, receive, heartbeat=heartbeat, retry_max=retry_max)
    async with send, receive, anyio.create_task_group() as tg:
        await tg.start(watch.run)
        try:
            yield watch
        finally:
            tg.cancel_scope.cancel()
