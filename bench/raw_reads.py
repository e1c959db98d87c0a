"""Floors of a whole listing: every key of the needs bucket read by nats-py itself, with no seat.

Each read is written the way nats-py goes fastest for it: a callback subscription (no
`next_msg` per message) and requests of about one `max_payload` each, so a floor is nats-py's
best, not a naive reader's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import anyio
from nats.aio.client import Client
from nats.aio.msg import Msg

from registry.contract import buckets

NEEDS = buckets.NEEDS
LARGEST = 1_000_000  # messages a request may ask for: its bytes end it
PULL_BATCH = 4096  # messages a pull asks for: about one max_payload of small keys


class _Reader:
    """The messages of one request at a time on one inbox, until a status message ends it."""

    def __init__(self, batch: int = 0) -> None:
        self.count = 0
        self.last_seq = 0
        self.pending = -1
        self.ended = anyio.Event()
        self._batch = batch  # a pull's count: nats-server ends a pull it fills with no status
        self._in_request = 0

    async def on_message(self, msg: Msg) -> None:
        headers = msg.headers or {}
        if "Status" in headers:
            self.ended.set()
            return
        self.count += 1
        self._in_request += 1
        if self._in_request == self._batch:
            self.ended.set()
        if msg.reply:  # a consumer's message: its sequences are in the reply subject
            tokens = msg.reply.split(".")
            self.last_seq, self.pending = int(tokens[5]), int(tokens[8])
        else:  # a direct get's: in its headers
            self.last_seq = int(headers["Nats-Sequence"])

    def next_request(self) -> None:
        self.ended = anyio.Event()
        self._in_request = 0


async def _requests(nc: Client, reader: _Reader, request: Callable[[], tuple[str, bytes]]) -> None:
    """`request()`'s subject and body published on one inbox, each read to its end, until a request
    brings nothing or the reader has nothing pending."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=reader.on_message, pending_bytes_limit=1024**3)
    try:
        while reader.pending != 0:
            before = reader.count
            reader.next_request()
            await nc.publish(*request(), reply=inbox)
            with anyio.fail_after(30):
                await reader.ended.wait()
            if reader.count == before:
                break
    finally:
        await sub.unsubscribe()


async def direct_pages(nc: Client, expected: int) -> None:
    """Every key by batch direct gets (`next_by_subj`), each asking for `max_payload` bytes: no consumer."""
    reader = _Reader()

    def request() -> tuple[str, bytes]:
        body = {
            "next_by_subj": NEEDS.subject(">"),
            "seq": reader.last_seq + 1,
            "batch": LARGEST,
            "max_bytes": nc.max_payload,
        }
        return NEEDS.batch_get_subject, json.dumps(body).encode()

    await _requests(nc, reader, request)
    assert reader.count == expected, f"the paged direct read found {reader.count} of {expected} keys"


async def pulled(nc: Client, expected: int) -> None:
    """Every key by a pull consumer of its own, pulls of `PULL_BATCH` messages one after another
    (ended by their count: nats-server ends a pull that its messages fill, by count or exactly by
    max_bytes, without a status, and the count is what a plain nats-py reader can tell)."""
    name = uuid.uuid4().hex
    config: dict[str, Any] = {
        "name": name,
        "ack_policy": "none",
        "deliver_policy": "all",
        "mem_storage": True,
        "inactive_threshold": 30_000_000_000,
    }
    create = f"$JS.API.{NEEDS.consumer_create_api(name, None)}"
    body = NEEDS.consumer_request([], config)  # every key: no filter, its fastest
    await nc.request(create, json.dumps(body).encode(), timeout=10)
    reader = _Reader(PULL_BATCH)
    pull = (
        NEEDS.consumer_next_subject(name),
        json.dumps({"batch": PULL_BATCH, "no_wait": True}).encode(),
    )
    try:
        await _requests(nc, reader, lambda: pull)
    finally:
        await nc.request(f"$JS.API.{NEEDS.consumer_delete_api(name)}", b"", timeout=10)
    assert reader.count == expected, f"the pulled read found {reader.count} of {expected} keys"
