"""The isolation suite's judges: what an attack may leave behind, and what may come back to it.

An attack runs with only the bus's own errors suppressed (what a refused, timed-out or unanswered
request raises: nats-py's and `registry.errors.BusError`), so an attack's own assert fails the
test. A request attack is judged by every message that comes back to the attacker's inbox: only
a refusal may (no responders, or a JetStream error of the attacker's own account), and it names
no key, carries no value and counts nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from registry.contract import Bucket, KeyShape, buckets
from registry.errors import BusError
from registry.wire import Bus, put, snapshot
from tests.helpers import NEVER, stream_barrier

Attack = Callable[[], Awaitable[None]]
Everything = dict[str, list[tuple[str, bytes, int, bool]]]

# nats.js.errors.* and nats.errors.TimeoutError derive from nats.errors.Error.
BUS_ERRORS = (nats.errors.Error, BusError)
# A no-responders status echoes the subject asked; nothing else may come with it.
NO_RESPONDERS_HEADERS = {"Status", "Description", "Nats-Subject"}
EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"


# The seat renews its own lease when it likes: of the leases, the nodes' are what an attack could touch.
JUDGED = {buckets.LEASES.name: ("node.>",)}
ANY_KEY = KeyShape("<key>")


async def everything(seat: Bus, among: Iterable[Bucket] = buckets.OWN) -> Everything:
    """Every key of `among` (the four buckets unless told) as the seat sees them: key, value,
    revision, deleted."""
    found = {}
    for bucket in among:
        items = await snapshot(seat, bucket, JUDGED.get(bucket.name, (">",)), include_deleted=True)
        found[bucket.name] = sorted((i.key, i.value, i.revision, i.deleted) for i in items)
    return found


def outside_own_keys(found: Everything, node: str) -> Everything:
    """`found` without `node`'s own keys (`<node>.…` in a node-keyed bucket, its lease `node.<node>`):
    what an attack by `node` must leave as it was."""
    own = (f"{node}.", f"node.{node}")
    return {
        bucket: [item for item in items if not (item[0].startswith(own[0]) or item[0] == own[1])]
        for bucket, items in found.items()
    }


async def data_buckets(seat: Bus) -> list[Bucket]:
    """Every bucket of the data account (each KV stream the seat finds there)."""
    streams = (await seat.jetstream("STREAM.NAMES", {}, operation="stream names"))["streams"] or []
    return [Bucket(name.removeprefix("KV_"), ANY_KEY) for name in sorted(streams) if name.startswith("KV_")]


async def unchanged_after(seat: Bus, attack: Attack, among: Sequence[Bucket] = buckets.OWN) -> None:
    """Runs `attack` (a refusal by the bus is its expected end) and asserts that no key of `among`
    (the four buckets unless told) changed, judged after a barrier: the attack must have flushed
    its connection or been answered."""
    before = await everything(seat, among)
    with contextlib.suppress(*BUS_ERRORS):
        await attack()
    await stream_barrier(seat, among)  # what the attack sent is stored or refused by now
    assert await everything(seat, among) == before


async def barrier_through(client: Client, subject: str) -> None:
    """Returns once everything `client` sent before has reached the stream storing `subject` (its
    own key, where its grants let it write), and been stored or refused there: a write expecting a
    revision never reached, sent on the same connection and path (a site's leaf link keeps its
    order), which the stream refuses after what came before it. Nothing is stored."""
    reply = await client.request(subject, b"", headers={EXPECTED_LAST: str(NEVER)}, timeout=10)
    assert b"10071" in reply.data, f"a barrier to {subject} was answered {reply.data!r}"


@dataclass(frozen=True)
class RequestAttack:
    """One request a party sends on its own: a subject, a body and headers it chose."""

    name: str
    subject: str
    body: dict[str, Any] | None = None
    headers: dict[str, str] | None = None

    @property
    def data(self) -> bytes:
        return json.dumps(self.body).encode() if self.body is not None else b""

    async def answers(self, client: Client, *, first_within: float = 1.0, quiet_for: float = 0.2) -> list[Msg]:
        """Every message that comes back to a fresh inbox: none if nothing came within
        `first_within`, else until none more came for `quiet_for` (a batch answers many)."""
        inbox = client.new_inbox()
        subscription = await client.subscribe(inbox)
        try:
            await client.publish(self.subject, self.data, reply=inbox, headers=self.headers)
            found: list[Msg] = []
            with contextlib.suppress(nats.errors.TimeoutError):
                while True:
                    found.append(await subscription.next_msg(timeout=quiet_for if found else first_within))
            return found
        finally:
            await subscription.unsubscribe()


async def nothing_comes_back(
    seat: Bus, attacker: Client, attack: RequestAttack, among: Sequence[Bucket] = buckets.OWN
) -> None:
    """Asserts that `attack`, sent by `attacker`, is answered by refusals only, none of which holds
    a key name or a value of `among` (the four buckets unless told)."""
    secrets = _secrets_of(await everything(seat, among))
    answers = await attack.answers(attacker)
    leaks = [a for a in answers if not _refusal(a, attack.subject) or any(s in a.data for s in secrets)]
    assert not leaks, f"{attack.name}: something came back: {[_describe(a) for a in leaks]}"


def _secrets_of(found: Everything) -> set[bytes]:
    return {secret for items in found.values() for key, value, *_ in items for secret in (key.encode(), value)} - {b""}


def _refusal(answer: Msg, asked: str) -> bool:
    headers = {getattr(name, "value", name): value for name, value in (answer.headers or {}).items()}
    if headers.get("Status") == "503" and not answer.data:
        return set(headers) <= NO_RESPONDERS_HEADERS and headers.get("Nats-Subject", asked) == asked
    return not headers and _empty_error_document(answer.data)


def _empty_error_document(data: bytes) -> bool:
    """A JetStream error with nothing else: its other fields (its answer's, `total`, `purged`, ...)
    empty or 0, no number in its description."""
    try:
        document = json.loads(data)
    except ValueError:
        return False
    if not isinstance(document, dict) or not isinstance(error := document.get("error"), dict):
        return False
    besides = [value for field, value in document.items() if field not in ("type", "error")]
    return not any(besides) and not _has_digit(error.get("description"))


def _has_digit(text: object) -> bool:
    return any(character.isdigit() for character in str(text))


def _describe(answer: Msg) -> str:
    return f"headers {answer.headers}, body {answer.data[:2000]!r}"


def named(attacks: Iterable[RequestAttack]) -> list[str]:
    """Test ids: each attack's name."""
    return [attack.name for attack in attacks]


NEEDS = buckets.NEEDS
EVIL_CONSUMER = {
    "stream_name": NEEDS.stream,
    "config": {
        "name": "evil",
        "deliver_subject": buckets.REGISTRY.subject("secret"),
        "filter_subject": NEEDS.subject("n1.>"),
        "ack_policy": "none",
        "deliver_policy": "last_per_subject",
    },
}
# What a node would read of another node's keys, or of the whole bucket, if its grants let it.
READ_ATTACKS = [
    RequestAttack("stream info listing key names", f"$JS.API.STREAM.INFO.{NEEDS.stream}", {"subjects_filter": ">"}),
    RequestAttack("a get of another node's key", NEEDS.direct_get_subject("n2.web.config.x")),
    RequestAttack(
        "a batch get of the whole needs bucket", NEEDS.batch_get_subject, {"multi_last": [NEEDS.subject(">")]}
    ),
]
# What a node would change with JetStream's API in the data account, if it held any of it.
API_ATTACKS = [
    RequestAttack(
        "a consumer delivering into the registry",
        f"$JS.API.CONSUMER.CREATE.{NEEDS.stream}.evil.{NEEDS.subject('n1.>')}",
        EVIL_CONSUMER,
    ),
    RequestAttack("a durable consumer", f"$JS.API.CONSUMER.DURABLE.CREATE.{NEEDS.stream}.evil", EVIL_CONSUMER),
    RequestAttack("a purge", f"$JS.API.STREAM.PURGE.{buckets.APPLIED.stream}", {}),
    RequestAttack("a stream delete", f"$JS.API.STREAM.DELETE.{buckets.COLLECT.stream}", {}),
]


async def fill_own_keys(
    bus: Bus, bucket: Bucket, key_of: Callable[[int, int], str], value: bytes, seconds: float
) -> int:
    """A hostile party writing keys `key_of(writer, index)` of `bucket` for `seconds`, four writers
    at once, each halving its values when refused so that the bucket's last bytes are taken too;
    how many puts were stored."""
    stored = 0

    async def writer(number: int) -> None:
        nonlocal stored
        index, size = 0, len(value)
        while True:
            index += 1
            try:
                await put(bus, bucket, key_of(number, index), value[:size])
                stored += 1
            except BusError:
                size = max(size // 2, 64)
                await anyio.lowlevel.checkpoint()

    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as writers:
            for number in range(4):
                writers.start_soon(writer, number)
    return stored
