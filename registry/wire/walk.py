"""A bucket's stream read in stream order, a pull at a time: a listing as large as the bucket,
held a few pages at a time.

With history 1 a KV stream holds each key's latest message (or its delete marker) and nothing
else, so walking it by sequence from the start meets every key's current entry once. A key
written during the walk moves to a later sequence: met before it moved, it is met again there
with its new value; met after, only at its new place. The walk reads through a pull consumer of
its own (`deliver_policy` all; no acknowledgements; in memory), each pull asking for at most
`pull_bytes` with `no_wait`, so that it ends as soon as the server has sent what it has. Each
message is handed to a sink as it arrives; while the sink wants more (`wanted`), the next pull
is sent the moment one ends, so reading never waits for whoever takes the pages. The consumer
expires on the server `idle` after the last pull, and is deleted when the walk closes.

Why a consumer and not batch direct gets (`next_by_subj`, no server state): measured over
200,000 keys (2 cores, shared), nats-py read pulls of about 1 MB at 62,000 to 74,000 keys/s and
direct-get batches of the same size at about 52,000: every direct-get answer carries six headers
that nats-py parses in Python, a consumer's messages none (their sequences are in the reply subject).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence

import anyio

from registry.contract import Bucket
from registry.errors import BusError, BusTimeout, NotFound
from registry.wire.bus import Bus, Subscription
from registry.wire.feed import ack_metadata, is_delete_marker
from registry.wire.nats_internals import STATUS_AT, status_line

log = logging.getLogger(__name__)

_NOTHING_MORE = ("404", "408")
BEHIND_PAUSE = 0.05  # seconds between pulls of a replica behind its leader
LARGEST_PULL = 1_000_000  # messages a pull may ask for: its bytes, not its count, end it

Sink = Callable[[str, bytes, int, bool], None]
"""Takes each message's key, value, stream sequence and whether it is a delete marker (no
`KvItem` made per message: a listing's walk meets each key of the bucket)."""


class StreamWalk:
    """One walk of a bucket's stream under some subject filters (relative to the bucket), its
    messages (delete markers included) handed to `sink` in stream order.

    At most one pull is outstanding, and a pull that ends is followed by the next at once while
    `wanted()`. `read(enough)` waits until the sink has enough; `read_ahead()` starts a pull if
    more is wanted. Not thread-safe; one event loop."""

    def __init__(
        self,
        bus: Bus,
        bucket: Bucket,
        filters: Sequence[str],
        *,
        sink: Sink,
        wanted: Callable[[], bool],
        pull_bytes: int,
        idle: float,
    ) -> None:
        self.bus = bus
        self.bucket = bucket
        self.filters = tuple(filters)
        self.name = uuid.uuid4().hex
        self.last_sequence = 0  # the highest stream sequence received
        self.finished = False
        self.floor = 0  # the walk is not finished before this sequence (the leader's last at the start)
        self.start = 1  # the stream sequence it reads from
        self._sink = sink
        self._prefix_length = len(bucket.subject_prefix.encode())
        self._wanted = wanted
        self._pull_bytes = max(pull_bytes, bus.max_payload)  # one message always fits
        self._idle = idle
        self._inbox = ""
        self._sub: Subscription | None = None
        self._consumer_sequence = 0
        self._pulls = 0
        self._outstanding: str | None = None  # the tag of the pull not yet ended
        self._received = 0  # messages of the outstanding pull
        self._received_bytes = 0  # of the outstanding pull, counted as nats-server counts them
        self.silent_ends = 0  # pulls that ended on their max_bytes exactly, with no status
        self._ran_dry = False  # the last pull found nothing more
        self._behind_since: float | None = None
        self._failure: BusError | None = None
        self._progress = anyio.Event()

    @property
    def operation(self) -> str:
        return f"read {self.bucket.name} {' '.join(self.filters)} in stream order"

    async def open(self, *, floor: int = 0, start: int = 1) -> int:
        """Creates the consumer, reading from stream sequence `start` on; how many messages it has
        to deliver now (delete markers included).

        The walk does not finish before it has met stream sequence `floor` (the last the stream's
        leader held when the listing began): a replica that has just rejoined a cluster ends its
        stream earlier until it has caught up; past the bus's timeout, `BusError` (retry)."""
        self.floor = floor
        self.start = start
        self.last_sequence = start - 1  # met before this walk (another walk of the same listing)
        await self.bus.until_connected(self.bus.options.request_timeout, operation=self.operation)
        self._inbox = self.bus.new_inbox()
        self._sub = await self.bus.subscribe_raw(f"{self._inbox}.*", self._on_message)
        sole = self.filters[0] if len(self.filters) == 1 and self.filters[0] != ">" else None
        info = await self.bus.jetstream(
            self.bucket.consumer_create_api(self.name, sole), self._config(), operation=self.operation
        )
        return int(info.get("num_pending", 0))

    def _config(self) -> dict[str, object]:
        every_key = list(self.filters) == [">"]
        return self.bucket.consumer_request(
            () if every_key else self.filters,
            {
                "name": self.name,
                "ack_policy": "none",
                **({"deliver_policy": "all"} if self.start <= 1 else _from(self.start)),
                "inactive_threshold": int(self._idle * 1_000_000_000),
                "mem_storage": True,
                "num_replicas": 1,
            },
        )

    async def read(self, enough: Callable[[], bool]) -> None:
        """Returns once `enough()` or the walk has finished (pulls go on meanwhile while the sink
        wants more); `BusError` when a pull fails or does not end within the bus's timeout."""
        while self._failure is None and not self.finished and not enough():
            if self._outstanding is None:
                if self._behind_since is not None:
                    await anyio.sleep(BEHIND_PAUSE)
                await self._send_pull()
            progress = self._progress
            with anyio.move_on_after(self.bus.timeout):
                await progress.wait()
            if not progress.is_set() and self._failure is None:
                self._failure = BusTimeout(self.operation, f"a pull did not end in time ({self._received} keys read)")
        if self._failure is not None:
            raise self._failure

    async def read_ahead(self) -> None:
        """Sends the next pull now if the sink wants more, so that its messages arrive meanwhile."""
        if self._outstanding is None and self._failure is None and not self.finished and self._wanted():
            await self._send_pull()

    async def close(self) -> None:
        """Stops listening and deletes the consumer (it would expire anyway, `idle` later)."""
        sub, self._sub = self._sub, None
        if sub is None:
            return
        await sub.unsubscribe()
        try:
            api = self.bucket.consumer_delete_api(self.name)
            await self.bus.jetstream(api, operation=f"delete the consumer of {self.operation}")
        except NotFound:
            pass
        except BusError as err:  # it expires on the server anyway
            log.debug("closing %s: %s", self.operation, err.reason)

    async def _send_pull(self) -> None:
        self._pulls += 1
        self._outstanding, self._received, self._received_bytes, self._ran_dry = str(self._pulls), 0, 0, False
        body = {"batch": LARGEST_PULL, "max_bytes": self._pull_bytes, "no_wait": True}
        api = self.bucket.consumer_next_subject(self.name)
        await self.bus.publish(api, json.dumps(body).encode(), reply=f"{self._inbox}.{self._outstanding}")

    async def _on_message(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        if self._outstanding is None or self._failure is not None:
            return  # the tail of a walk that failed
        if headers is not None and headers[STATUS_AT : STATUS_AT + 1] == b" ":  # a pull's status
            if subject.endswith(b".%s" % self._outstanding.encode()):  # sent to the pull's own reply subject
                await self._end(*status_line(headers))
            return
        stream_seq, consumer_seq, pending = ack_metadata(reply.decode())
        if consumer_seq != self._consumer_sequence + 1:
            lost = f"messages were lost (consumer sequence {self._consumer_sequence} then {consumer_seq}); retry"
            self._fail(BusError(self.operation, lost))
            return
        self._consumer_sequence, self.last_sequence = consumer_seq, stream_seq
        self._received += 1
        if pending == 0:
            self._ran_dry = True  # the server follows with a 404
        deleted = headers is not None and is_delete_marker(headers)
        key = subject[self._prefix_length :].decode("utf-8", "replace")  # `$KV.<bucket>.` cut off
        self._sink(key, data, stream_seq, deleted)
        # What nats-server counts against the pull's max_bytes (consumer.go); a pull that its
        # messages fill exactly ends without a status: nothing more will come for it.
        self._received_bytes += len(subject) + len(reply) + len(data) + (len(headers) if headers else 0)
        if self._received_bytes == self._pull_bytes:
            self.silent_ends += 1
            await self._ended()

    async def _end(self, status: str, description: str) -> None:
        """A pull ended: by its bytes (409 "Message Size Exceeds MaxBytes") or because the
        server had nothing more (404, 408); another status fails the walk."""
        if status == "409" and "MaxBytes" in description:
            if self._received == 0:
                self._fail(BusError(self.operation, "a message larger than a pull's max_bytes"))
                return
        elif status in _NOTHING_MORE:
            self._ran_dry = True
        else:
            self._fail(BusError(self.operation, f"status {status} {description}".strip()))
            return
        await self._ended()

    async def _ended(self) -> None:
        """The outstanding pull has ended: the walk is finished if it ran dry at or past its
        floor, else the next pull is sent while more is wanted."""
        self._outstanding = None
        if self._ran_dry:
            try:
                self.finished = self._caught_up()
            except BusError as err:
                self._fail(err)
                return
        self._wake()
        if not self.finished and self._behind_since is None:
            await self.read_ahead()

    def _caught_up(self) -> bool:
        if self.last_sequence >= self.floor:
            self._behind_since = None
            return True
        now = time.monotonic()
        self._behind_since = self._behind_since or now
        if now - self._behind_since > self.bus.timeout:
            raise BusError(self.operation, f"the stream stays behind its leader (at {self.floor}); retry")
        log.debug("%s: the stream ends at %d, behind its leader (%d)", self.operation, self.last_sequence, self.floor)
        return False

    def _fail(self, failure: BusError) -> None:
        self._failure = failure
        self._wake()

    def _wake(self) -> None:
        progress, self._progress = self._progress, anyio.Event()
        progress.set()


def _from(start: int) -> dict[str, object]:
    return {"deliver_policy": "by_start_sequence", "opt_start_seq": start}
