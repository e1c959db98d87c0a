"""Why nobody answers a request, told by nats-server's trace of it.

nats-server answers "no responders" (status 503) at once in two cases that look the same to the
requester, headers and timing alike (checked on 2.15.1): the requester's account has no import of
the subject and nothing in it subscribes (a node asking under a name its key does not cover, or
grants issued but not loaded), or it does import the subject but nobody serves it in the
exporting account (the seat or a vault not running, a bucket missing or without a leader).

Since 2.11 a message can be traced (`Nats-Trace-Dest`) without being delivered
(`Nats-Trace-Only: true`: no subscriber gets it, no stream stores it): the server sends the trace
of its path to a subject of ours. Its events show the difference: a service import crossed is a
`si` event naming the exporting account, while a subject that stays in the requester's account
and reaches nothing shows none. After a "no responders", `nobody_answers` traces the same subject
once and builds the `NoResponders` that says which case it is and how that was found; on an
older server, or without a trace in time, it says both cases and that the server could not tell.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from registry.contract import buckets
from registry.errors import BusError, NobodyBehindImport, NoResponders, NoRoute

log = logging.getLogger(__name__)

TRACE_DEST = "Nats-Trace-Dest"
TRACE_ONLY = "Nats-Trace-Only"
TRACING_SINCE = (2, 11)  # the first nats-server version that traces messages
TRACE_WAIT = 1.0  # seconds: the server that took the message sends its trace at once
USER_INFO = "$SYS.REQ.USER.INFO"  # every account imports it from the system account
_CLIENT = 0  # an ingress event's kind when the message came from a client connection


class _Received(Protocol):
    data: bytes


class _Subscribed(Protocol):
    async def unsubscribe(self) -> None: ...


class Bus(Protocol):
    """What of `registry.wire.bus.Bus` a trace needs (that module calls this one: no import back)."""

    @property
    def server_version(self) -> tuple[int, int]: ...

    @property
    def traces_refused(self) -> bool: ...

    def new_inbox(self) -> str: ...

    async def publish(
        self, subject: str, data: bytes = b"", *, reply: str = "", headers: Mapping[str, str] | None = None
    ) -> None: ...

    async def subscribe(self, subject: str, handler: Callable[[_Received], Awaitable[None]]) -> _Subscribed: ...


@dataclass(frozen=True)
class Route:
    """Where nats-server took a message published by this connection."""

    account: str  # the publisher's account, as the server names it (a JWT account: its public key)
    imported_from: str | None  # the account a service import took it to, if one did
    delivered: bool  # a subscriber or a stream of the publisher's own account was reached


async def nobody_answers(bus: Bus, operation: str, subject: str) -> NoResponders:
    """The `NoResponders` for a request to `subject` nobody answered, saying why as the trace shows."""
    try:
        route = await trace_route(bus, subject)
    except BusError as err:  # the connection went meanwhile, say: the answer stays "nobody answers"
        log.debug("no trace of %s: %s", subject, err)
        route = None
    if route is None:
        return NoResponders(operation, _cannot_tell(subject, bus.server_version, refused=bus.traces_refused))
    account = await _named(bus, route.account)
    if route.imported_from is not None:
        return NobodyBehindImport(
            operation,
            subject,
            account,
            route.imported_from,
            serves=who_serves(subject, "there"),
        )
    if route.delivered:  # something subscribed between the answer and the trace
        return NoResponders(operation, f"nobody answered {subject}, though something serves it now (retry)")
    return NoRoute(operation, subject, account, serves=who_serves(subject, "here"))


async def trace_route(bus: Bus, subject: str, *, within: float = TRACE_WAIT) -> Route | None:
    """nats-server's trace of a message to `subject`, which it delivers to nobody; `None` when the
    server cannot trace (before 2.11), refused one already (this connection may not publish to
    its own inbox) or sent no trace within `within` seconds."""
    if bus.server_version < TRACING_SINCE or bus.traces_refused:
        return None

    async def send(inbox: str) -> None:
        await bus.publish(subject, b"", reply=bus.new_inbox(), headers={TRACE_DEST: inbox, TRACE_ONLY: "true"})

    trace = await _first(bus, send, _ingress_trace, within)
    return _route_of(trace) if trace is not None else None


T = TypeVar("T")


async def _first(
    bus: Bus, send: Callable[[str], Awaitable[None]], read: Callable[[bytes], T | None], within: float
) -> T | None:
    """The first message to a new inbox that `read` can read, once `send(inbox)` has sent what
    answers there; `None` after `within` seconds. Not `Bus.request`: nobody answering that must
    not be explained in turn."""
    found: list[T] = []
    arrived = anyio.Event()

    async def on_message(msg: _Received) -> None:
        value = read(msg.data)
        if value is not None and not arrived.is_set():
            found.append(value)
            arrived.set()

    inbox = bus.new_inbox()
    sub = await bus.subscribe(inbox, on_message)
    try:
        await send(inbox)
        with anyio.move_on_after(within):
            await arrived.wait()
    finally:
        await sub.unsubscribe()
    return found[0] if found else None


_ACCOUNT_KEY = re.compile(r"A[A-Z2-7]{55}")  # a JWT account's public key


async def _named(bus: Bus, account: str) -> str:
    """`account` with its name when it is a JWT account's key: the server tells a user its own
    account's name (`$SYS.REQ.USER.INFO`)."""
    if not _ACCOUNT_KEY.fullmatch(account):
        return account

    async def send(inbox: str) -> None:
        await bus.publish(USER_INFO, b"", reply=inbox)

    def read(data: bytes) -> str | None:
        try:
            info = json.loads(data)["data"]
            return str(info["account_name"]) if info["account"] == account else None
        except (ValueError, LookupError, TypeError):
            return None

    try:
        name = await _first(bus, send, read, TRACE_WAIT)
    except BusError:
        name = None
    return f"{name} ({account})" if name and name != account else account


def _ingress_trace(data: bytes) -> dict[str, Any] | None:
    """The trace sent by the server the message entered from our connection (a cluster's other
    servers send theirs too), or None."""
    try:
        trace = json.loads(data)
        first = trace["events"][0]
        is_ours = first["type"] == "in" and first.get("kind") == _CLIENT
    except (ValueError, LookupError, TypeError, AttributeError):
        log.debug("a trace that cannot be read: %r", data[:200])
        return None
    return trace if is_ours else None


def _route_of(trace: dict[str, Any]) -> Route:
    events: list[dict[str, Any]] = [e for e in trace["events"] if isinstance(e, dict)]
    imported = next((str(e.get("acc", "?")) for e in events if e.get("type") == "si"), None)
    delivered = any(e.get("type") in ("eg", "js") for e in events)
    return Route(account=str(events[0].get("acc", "?")), imported_from=imported, delivered=delivered)


def who_serves(subject: str, where: str) -> str:
    """What should answer `subject` `where` ("here", "there"), as an error says it."""
    if subject == buckets.VERB_SUBJECT:
        return "the seat (mesh-provisioner serve) is not running"
    named = buckets.bucket_named_by(subject)
    if named is None:
        return f"what serves it {where} is not running"
    bucket, direct_get = named
    if direct_get:
        return f"bucket {bucket} does not exist {where}, has no direct get, or its stream has no leader yet"
    return f"bucket {bucket} does not exist {where}, or its stream has no leader yet (retry)"


def _cannot_tell(subject: str, version: tuple[int, int], *, refused: bool) -> str:
    since = ".".join(map(str, TRACING_SINCE))
    server = f"nats-server {'.'.join(map(str, version))}" if version > (0, 0) else "the server"
    why = "sent no trace of it" if version >= TRACING_SINCE else f"cannot trace a request (it can since {since})"
    if refused and version >= TRACING_SINCE:
        why = "traces nothing to this connection (it may not publish to its own inbox)"
    return (
        f"nobody answers {subject}: either this account has no import of it (the grants do not give it to this "
        f"party), or whatever serves it is not running; {server} {why} to tell which"
    )
