"""The one engine that reads a bucket: a named push consumer over a subject filter, checked.

Listings (`registry.wire.kv.snapshot`) and watches (`registry.wire.watch`) both read through a `Feed`. It
creates an ephemeral consumer whose filter is in the create subject
(`$JS.API.CONSUMER.CREATE.KV_<b>.<name>.$KV.<b>.<filter>`), so a node can be granted its own keys
only. It answers flow control (without those replies a large read stalls for good), and it is
checked: a gap in consumer sequences, or a heartbeat naming a later sequence than seen, marks the
feed `broken` with the reason instead of delivering a partial read.

A feed is opened only while the connection is up (`Bus.until_connected`): a create sent while
nats-py reconnects would go out on reconnect after its caller gave up, and its consumer would push
to a subscription nobody has. A consumer expires on the server `inactive_threshold` after nobody
listens. A long-lived one is given a name per party and purpose, and a party granted
`$JS.API.CONSUMER.DELETE` on the stream (the seat) deletes it by name before opening it again
(`replace`); a node cannot be granted that for its own consumers only, so its consumers expire.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from registry.contract import Bucket
from registry.errors import NotFound
from registry.wire.bus import Bus, Subscription
from registry.wire.nats_internals import HEADER_LINE_SIZE, STATUS_AT, header_lines, status_line

log = logging.getLogger(__name__)

_OPERATION, _OPERATION_BYTES = "KV-Operation", b"KV-Operation"
_REMOVED = ("DEL", "PURGE")
_SIZE = "Nats-Msg-Size"  # a headers-only consumer's stand-in for the value
# What a file store's `bytes` counts for a message beside its subject, headers and value: a record
# header of 22 bytes and a hash of 8, and 4 more when it has headers (a memory store counts less).
STORE_FRAMING, HEADERS_FRAMING = 30, 4


@dataclass(frozen=True, slots=True)
class KvItem:
    """A key's entry as it stands at `revision` (its stream sequence); `deleted` for a delete marker.
    `stored_at`: when the server stored it (its clock), where the read tells it."""

    key: str
    value: bytes
    revision: int
    deleted: bool = False
    stored_at: datetime | None = field(default=None, compare=False)
    size: int = field(default=-1, compare=False)  # of the value, as stored: read headers only, `value` is empty
    stored: int = field(default=-1, compare=False)  # what the stream counts for it (`stored_size`), where read


@dataclass(frozen=True)
class FeedStart:
    """Where a feed begins: the latest entry per key, or every entry after a stream sequence."""

    after_sequence: int = 0

    def policy(self) -> dict[str, object]:
        if self.after_sequence <= 0:
            return {"deliver_policy": "last_per_subject"}
        return {"deliver_policy": "by_start_sequence", "opt_start_seq": self.after_sequence + 1}


OnItem = Callable[[KvItem, int], None]  # the item and how many are pending after it


class Feed:
    """One consumer's messages, turned into `KvItem`s for `on_item` until closed or broken."""

    def __init__(
        self,
        bus: Bus,
        bucket: Bucket,
        filters: Sequence[str],
        on_item: OnItem,
        *,
        start: FeedStart = FeedStart(),
        heartbeat: float,
        inactive_threshold: float,
        name: str | None = None,
        headers_only: bool = False,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        """`on_idle`: told of each idle heartbeat that finds every message the consumer sent read.
        nats-server sends one only when it found nothing more to deliver, so a read that counted
        more when it began knows the rest were removed meanwhile (a purge), not that they are late."""
        self.bus = bus
        self.bucket = bucket
        self.filters = tuple(filters)
        self.name = name or uuid.uuid4().hex
        self.broken: str | None = None
        self.heard_at = self.progressed_at = time.monotonic()
        self.stream_sequence = start.after_sequence
        self._on_item = on_item
        self._on_idle = on_idle
        self._start = start
        self._heartbeat = heartbeat
        self._inactive = inactive_threshold
        self._consumer_sequence = 0
        self._sub: Subscription | None = None
        self._headers_only = headers_only

    @property
    def operation(self) -> str:
        return f"read {self.bucket.name} {' '.join(self.filters)}"

    async def open(self, *, replace: bool = False) -> bool:
        """Creates the consumer once the connection is up (within the bus's timeout), deleting one
        of the same name first when `replace`; whether it had nothing at all to deliver."""
        await self.bus.until_connected(self.bus.options.request_timeout, operation=self.operation)
        if replace:
            await self.delete()
        inbox = self.bus.new_inbox()
        self._sub = await self.bus.subscribe_raw(inbox, self._on_message)
        sole = self.filters[0] if len(self.filters) == 1 and self.filters[0] != ">" else None
        info = await self.bus.jetstream(
            self.bucket.consumer_create_api(self.name, sole), self._request(inbox), operation=self.operation
        )
        delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
        return int(info.get("num_pending", 0)) == 0 and delivered == 0

    async def delete(self) -> None:
        """Deletes this feed's consumer on the server, if it is there."""
        try:
            api = self.bucket.consumer_delete_api(self.name)
            await self.bus.jetstream(api, operation=f"delete the consumer of {self.operation}")
        except NotFound:
            pass

    async def close(self) -> None:
        """Stops listening; the consumer expires on the server (see the module's docstring)."""
        sub, self._sub = self._sub, None
        self.broken = self.broken or "closed"
        if sub is not None:
            await sub.unsubscribe()

    def _request(self, inbox: str) -> dict[str, object]:
        return self.bucket.consumer_request(
            self.filters,
            {
                "name": self.name,
                "deliver_subject": inbox,
                "ack_policy": "none",
                "flow_control": True,
                "idle_heartbeat": _nanoseconds(self._heartbeat),
                "inactive_threshold": _nanoseconds(self._inactive),
                "mem_storage": True,
                "num_replicas": 1,
                **({"headers_only": True} if self._headers_only else {}),
                **self._start.policy(),
            },
        )

    async def _on_message(self, subject: bytes, reply: bytes, data: bytes, block: bytes | None) -> None:
        """A message as nats-py's parser reads it (`Bus.subscribe_raw`): a listing or a watch's
        first read is a message per key, and nats-py's own path per message was half its cost."""
        if self.broken is not None:
            return
        self.heard_at = time.monotonic()
        if block is not None and block[STATUS_AT : STATUS_AT + 1] == b" ":
            await self._on_status(reply.decode(), block)
            return
        self.progressed_at = self.heard_at
        ack = reply.decode()
        stream_seq, consumer_seq, pending = ack_metadata(ack)
        if consumer_seq != self._consumer_sequence + 1:
            self.broken = f"messages were lost (consumer sequence {self._consumer_sequence} then {consumer_seq})"
            return
        self._consumer_sequence, self.stream_sequence = consumer_seq, stream_seq
        deleted = block is not None and is_delete_marker(block)
        size, sent = _headers_only_sizes(block) if self._headers_only else (len(data), len(block or b""))
        key = self.bucket.key_of(subject.decode("utf-8", "replace"))
        stored = _stored(len(subject), sent, size)
        self._on_item(KvItem(key, data, stream_seq, deleted, ack_time(ack), size, stored), pending)

    async def _on_status(self, reply: str, block: bytes) -> None:
        """Flow-control requests want an empty reply; a heartbeat may name a stalled flow control
        or a later consumer sequence than seen (messages lost). Any other status ends the feed."""
        status, description = status_line(block)
        if status != "100":
            self.broken = f"status {status} {description}".strip()
            return
        headers = header_lines(block.partition(b"\r\n")[2])
        target = reply or headers.get("Nats-Consumer-Stalled")
        if target:
            await self.bus.publish(target)
        last = headers.get("Nats-Last-Consumer")
        if reply or last is None:
            return
        if int(last) > self._consumer_sequence:
            self.broken = f"heartbeat names consumer sequence {last}, last seen {self._consumer_sequence}"
        elif self._on_idle is not None and not headers.get("Nats-Consumer-Stalled"):
            self._on_idle()


def stored_size(subject: bytes, block: bytes | None, value_size: int) -> int:
    """What a file store counts against its stream's `max_bytes` for one message: its subject, its
    header block as it was sent, its value and the store's framing (checked against the stream's
    `bytes` in tests/limits/test_quotas.py)."""
    return _stored(len(subject), len(block or b""), value_size)


def _stored(subject: int, headers: int, value: int) -> int:
    return STORE_FRAMING + subject + (headers + HEADERS_FRAMING if headers else 0) + value


_SIZE_LINE = f"{_SIZE}: ".encode()
_SIZE_LINE_TAIL = len(_SIZE_LINE) + 20 + 4  # the line nats-server appends, its digits and the block's end


def _headers_only_sizes(block: bytes | None) -> tuple[int, int]:
    """The value's size a headers-only consumer states in place of the value, and the length of
    the header block its writer sent, for `stored_size`. The server appends its `Nats-Msg-Size`
    line last, so it is looked for in the block's tail alone: a block is the writer's to fill (up
    to the bucket's largest value), and parsing each one whole was half of what reading a node's
    keys cost when each carried 60 KB of headers. A message sent without headers is given a block
    of its own, taken as an empty one sent (16 bytes high, never low)."""
    if block is None:
        return 0, 0
    at = block.rfind(_SIZE_LINE, max(len(block) - _SIZE_LINE_TAIL, 0))
    end = block.find(b"\r\n", at) if at >= 0 else -1
    if end < 0:
        return 0, len(block)
    digits = block[at + len(_SIZE_LINE) : end]
    return int(digits) if digits.isdigit() else 0, len(block) - (end + 2 - at)


def is_delete_marker(headers: Mapping[str, str] | bytes) -> bool:
    """Whether a KV message is a delete marker (`KV-Operation` `DEL` or `PURGE`), from its headers
    parsed or from its raw header block (`NATS/1.0` line first, as the parser or a stream message
    get hands it), read as nats-py would read it."""
    if isinstance(headers, bytes):
        return _block_is_marker(headers)
    return headers.get(_OPERATION) in _REMOVED


_MARKER_LINE = re.compile(rb"\r\nKV-Operation: (?:DEL|PURGE)\r\n")


def _block_is_marker(block: bytes) -> bool:
    """A walk meets a raw block per message: one that never names the header, or names it once on
    the line nats-server writes, is answered without parsing it (a parse costs four to six times
    as much)."""
    named = block.count(_OPERATION_BYTES)
    if named == 0:
        return False
    if named == 1 and _MARKER_LINE.search(block, HEADER_LINE_SIZE - 2) is not None:
        return True
    return header_lines(block[HEADER_LINE_SIZE:]).get(_OPERATION) in _REMOVED


def ack_metadata(reply: str) -> tuple[int, int, int]:
    """Stream sequence, consumer sequence and pending count from a JetStream ack subject."""
    tokens = reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[6]), int(tokens[8])
    # $JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>.<token>
    return int(tokens[7]), int(tokens[8]), int(tokens[10])


def ack_time(reply: str) -> datetime:
    """When the server stored the message, from a JetStream ack subject (nanoseconds since the epoch)."""
    tokens = reply.split(".")
    nanoseconds = int(tokens[7] if len(tokens) == 9 else tokens[9])
    return datetime.fromtimestamp(nanoseconds / 1e9, UTC)


def _nanoseconds(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
