"""A party's live updates as a test reads them: a write, then the update it brings on a raw
nats-py subscription of the party (its stream import of where the bucket republishes its writes)."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass

from nats.aio.subscription import Subscription

# A node's watch re-reads everything every 5 minutes; a live update comes at once, or it is missing.
# The bound only tells missing from late on a loaded machine (how fast it comes is bench's to say).
LIVE_WITHIN = 5.0


@dataclass(frozen=True)
class LiveUpdate:
    """One update as the party received it: on which subject, the value, the operation
    (`KV-Operation`: None for a put), the revision the write was stored at (`Nats-Sequence`,
    checked against the write's own answer) and how long after the write began it came."""

    subject: str
    value: bytes
    operation: str | None
    revision: int
    seconds: float


async def live_update(updates: Subscription, write: Awaitable[int]) -> LiveUpdate:
    """Runs `write` (a put or delete, answering its revision) and reads its update from
    `updates`, which must come within `LIVE_WITHIN` seconds and carry the stream's headers."""
    started = time.monotonic()
    revision = await write
    message = await updates.next_msg(timeout=LIVE_WITHIN)
    seconds = time.monotonic() - started
    headers = message.headers or {}
    assert headers.get("Nats-Sequence") == str(revision), headers
    assert headers.get("Nats-Subject") == message.subject, headers
    assert seconds < LIVE_WITHIN, f"the update came {seconds:.3f} s after the write"
    return LiveUpdate(message.subject, message.data, headers.get("KV-Operation"), revision, seconds)
