"""A site's copies' consumer resets lost in a cut, sent again by the site's seat.

A copy at the site (`provisioner.seat.site_copies`) resumes by resetting the hub's durable consumer
it takes (`CONSUMER.RESET.<stream>.<name>` through `$JS.<hub>.API`). nats-server sends that reset
itself, when the copy stalls (no heartbeat for 10 s) and then on a backoff of 10 s more each
failure, and waits 5 s for its answer before it tries again. A reset sent while the link is cut is
lost, and when the link comes back during those 5 s the copy waits them out: measured, a copy
current again 5.6 s after a 60 s cut where it otherwise is in 0.5 s (about two cuts in five fall
there). Nothing outside nats-server can cut that wait short but an answer to the reset's reply
subject.

So the seat at the site listens to its copies' resets (`$JS.<hub>.API.CONSUMER.RESET.>`, in the
site's own data account) and to their answers (`$JSC.R.>`), and sends again, with the same reply
subject, each reset not answered after `RESEND_AFTER`, every `RESEND_AFTER`, until nats-server
stops waiting for it (`SERVER_WAITS`): while the link is down that goes nowhere, once it is back
the hub answers the copy within a round trip of the link. A reset moves only the site's own
consumer back to what its copy acknowledged, so one more than needed costs a redelivery, never a
value (a copy seeing its consumer's sequence jump resets it once more).

A copy made anew (the first time, or after an operator deleted it) would start where its consumer
was acknowledged last, not at the hub's first message (a mirror skips to its consumer's position):
before making one, the seat rewinds the consumer to the stream's start (`rewind`: a reset to
sequence 1, answered on a `$JSC.R.` subject, the only answers the link carries to the seat).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from registry.access import CopyConsumer
from registry.errors import BusError
from registry.wire import Bus, Message

log = logging.getLogger(__name__)

RESEND_AFTER = 0.5  # seconds without an answer: the link's round trip is far shorter
SERVER_WAITS = 5.0  # how long nats-server waits for the answer of a durable copy's reset
ANSWERS = "$JSC.R.>"  # the reply subjects of nats-server's consumer requests
REWIND_WAIT = 3.0  # seconds for the hub's answer to a rewind
MAX_ANSWER = 64 * 1024  # bytes of an answer read: the hub's to a reset is a few hundred
MOST_WAITING = 10_000  # resets remembered at once: a site has one per copy; more is someone else's flood


@dataclass
class _Reset:
    subject: str
    since: float
    resent: int = 0


class LostResets:
    """The copies' resets waiting for an answer, by reply subject."""

    def __init__(self) -> None:
        self.waiting: dict[str, _Reset] = {}

    def asked(self, msg: Message, now: float) -> None:
        if msg.reply and msg.reply not in self.waiting and len(self.waiting) < MOST_WAITING:
            self.waiting[msg.reply] = _Reset(msg.subject, now)  # (heard again: our own resend)

    def answered(self, msg: Message) -> None:
        reset = self.waiting.pop(msg.subject, None)
        if reset is not None and reset.resent:
            log.info("the reset of the hub's consumer %s answered, sent again %d times", _name(reset), reset.resent)

    def due(self, now: float) -> list[tuple[str, _Reset]]:
        """The resets to send again now; those nats-server no longer waits for are forgotten."""
        for reply in [r for r, reset in self.waiting.items() if now - reset.since > SERVER_WAITS]:
            del self.waiting[reply]
        return [(reply, reset) for reply, reset in self.waiting.items() if now - reset.since >= RESEND_AFTER]


async def resend_lost_resets(
    bus: Bus, hub_domain: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Until cancelled: sends again each of the site's copies' resets not answered (`LostResets`)."""
    resets = LostResets()

    async def asked(msg: Message) -> None:
        resets.asked(msg, time.monotonic())

    async def answered(msg: Message) -> None:
        resets.answered(msg)

    heard = [
        await bus.subscribe(f"$JS.{hub_domain}.API.CONSUMER.RESET.>", asked),
        await bus.subscribe(ANSWERS, answered),
    ]
    task_status.started()
    try:
        while True:
            await anyio.sleep(RESEND_AFTER / 2)
            for reply, reset in resets.due(time.monotonic()):
                await _resend(bus, reply, reset)
    finally:
        with anyio.CancelScope(shield=True):
            for subscription in heard:
                await subscription.unsubscribe()


async def _resend(bus: Bus, reply: str, reset: _Reset) -> None:
    try:
        await bus.publish(reset.subject, b"", reply=reply)
    except BusError as err:  # the site's server away: the copies wait with it
        log.debug("reset of %s not sent again: %s", _name(reset), err)
        return
    reset.resent += 1


def _name(reset: _Reset) -> str:
    return reset.subject.rsplit(".", 2)[-1]


async def rewind(bus: Bus, consumer: CopyConsumer, hub_domain: str) -> str | None:
    """Resets the hub's `consumer` to the stream's first message, so that a copy made now takes it
    all; None once the hub says so, else why not (the link down, the consumer not made yet)."""
    reply = f"{ANSWERS.removesuffix('>')}{secrets.token_hex(8)}"
    answers: list[Message] = []
    answered = anyio.Event()

    async def answer(msg: Message) -> None:
        answers.append(msg)
        answered.set()

    subscription = await bus.subscribe(reply, answer)
    try:
        await bus.publish(consumer.reset(hub_domain), json.dumps({"seq": 1}).encode(), reply=reply)
        with anyio.move_on_after(REWIND_WAIT):
            await answered.wait()
    except BusError as err:
        return str(err)
    finally:
        await subscription.unsubscribe()
    if not answers:
        return f"no answer from the hub in {REWIND_WAIT:.0f} s (the link down?)"
    try:
        said = json.loads(answers[0].data[:MAX_ANSWER] or b"{}")
    except ValueError:
        return "the answer to the rewind is not JSON"
    error = said.get("error") if isinstance(said, dict) else "the answer to the rewind is not a JSON object"
    return None if error is None else str(error.get("description", error) if isinstance(error, dict) else error)
