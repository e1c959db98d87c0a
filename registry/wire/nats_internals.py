"""Every use of nats-py's private API, each behind a named function, and the check of them at start.

nats-py has no public call for six things the bus and the service do:

- hand a message straight from its parser to a handler (`Bus.subscribe_raw`, how a streamed
  listing reads hundreds of thousands of keys): `Client._process_msg`, which the parser looks up
  on the client at every message, is replaced by `route_raw_messages`, keyed by `Subscription._id`;
- parse header lines faster: `Client._parse_header_lines`, looked up by `Client._process_headers`,
  is replaced by `header_lines` (the same result; tests/registry/wire/test_headers.py);
- close the socket of a connect given up part-way (`Client._transport`): `close_socket`;
- survive a flush given up on: `Client._process_pong` sets the result of the oldest PING's future
  (`Client._pongs`) even when its flush was cancelled, and the `InvalidStateError` stops nats-py's
  read loop for good; `tolerate_cancelled_flushes` passes over a future already done;
- flush what was sent before: `Client._send_ping` writes its PING straight to the socket, ahead of
  the commands still waiting for nats-py's flusher task, so `flush()` could return before the
  server had seen a SUB sent just before it (a seat "ready" whose first request was answered "no
  responders", 1 run in 6 of a test alone); `ping_after_pending` queues the PING behind them;
- drain a service's endpoints, so that a stop answers the requests already received
  (`Service._endpoints`, `Endpoint._subscription`): `drain_endpoints`, for `registry.serving`.

`check_nats_internals` verifies that each of these names still exists with the shape used here,
once per process, when a bus connects and when a service starts, and refuses a nats-py that has
changed them with a `BusError` naming what is missing and which feature of ours it breaks, rather
than losing messages or requests later. nats-py is pinned below its next minor version in
pyproject.toml; a newer one is admitted once this check and tests/registry/wire pass on it.

The service's internals are those of `nats.micro`, imported here only when a service starts: the
node client, which serves nothing, never loads it.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from typing import TYPE_CHECKING

from nats.aio.client import PING_PROTO, Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import Parser

from registry.errors import BusError

if TYPE_CHECKING:
    from nats.micro.service import Service

PIN = ">=2.16,<2.17"  # as pyproject.toml's dependencies say

RawHandler = Callable[[bytes, bytes, bytes, bytes | None], Awaitable[None]]
"""A message as nats-py's parser reads it: subject, reply subject, body, header block (None when
there is none, the `NATS/1.0` line included when there is one)."""


@dataclass(frozen=True)
class Internal:
    """One private name of nats-py relied on: what it is, which feature of ours needs it, and
    whether the installed nats-py still has it with the shape used here."""

    name: str
    feature: str
    holds: Callable[[], bool]

    def __str__(self) -> str:
        return f"{self.name} (needed by {self.feature})"


_RAW = "Bus.subscribe_raw: a streamed listing (registry.wire.walk) would receive no message"
_HEADERS = "the bus's faster header parser: direct gets and listings would parse headers at nats-py's speed"
_SOCKET = "closing a connect given up part-way: its socket would stay open"
_DRAIN = "the service's ordered stop: requests already received would be dropped, not answered"
_PONG = "a flush given up on: its late PONG would stop the connection reading, for good"
_PING = "a flush: it could return before the server saw a subscription made just before it"


_PROCESS_MSG = ("self", "sid", "subject", "reply", "data", "headers")


def _client_internals() -> list[Internal]:
    return [
        Internal(
            "Client._process_msg(sid, subject, reply, data, headers)",
            _RAW,
            partial(_takes, Client, "_process_msg", _PROCESS_MSG),
        ),
        Internal(
            "Parser.parse calling the client's _process_msg", _RAW, partial(_calls, Parser, "parse", "_process_msg")
        ),
        Internal("Subscription._id", _RAW, partial(_sets, Subscription, "_id")),
        Internal(
            "Client._parse_header_lines(raw), a static method",
            _HEADERS,
            partial(_static, Client, "_parse_header_lines", ("raw",)),
        ),
        Internal(
            "Client._process_headers calling _parse_header_lines",
            _HEADERS,
            partial(_calls, Client, "_process_headers", "_parse_header_lines"),
        ),
        Internal("Client._transport", _SOCKET, partial(_sets, Client, "_transport")),
        Internal("Client._pongs", _PONG, partial(_sets, Client, "_pongs")),
        Internal(
            "Parser.parse calling the client's _process_pong", _PONG, partial(_calls, Parser, "parse", "_process_pong")
        ),
        Internal(
            "Client._process_pong(), setting the result of a future of _pongs",
            _PONG,
            partial(_takes_and_names, Client, "_process_pong", ("self",), "_pongs"),
        ),
        Internal(
            "Client._send_ping(future), appending to _pongs",
            _PING,
            partial(_takes_and_names, Client, "_send_ping", ("self", "future"), "_pongs"),
        ),
        Internal("Client.flush calling _send_ping", _PING, partial(_calls, Client, "flush", "_send_ping")),
        Internal(
            "Client._send_command(cmd, priority) and _flush_pending(force_flush)",
            _PING,
            lambda: (
                _takes(Client, "_send_command", ("self", "cmd", "priority"))
                and _takes(Client, "_flush_pending", ("self", "force_flush"))
            ),
        ),
    ]


def _service_internals() -> list[Internal]:
    from nats.micro.service import Endpoint, Service  # only where a service starts (docstring)  # noqa: PLC0415

    return [
        Internal("Service._endpoints", _DRAIN, partial(_sets, Service, "_endpoints")),
        Internal("Endpoint._subscription", _DRAIN, partial(_sets, Endpoint, "_subscription")),
    ]


_passed: set[bool] = set()  # the sides (client, serving) already checked in this process


def check_nats_internals(*, serving: bool = False) -> None:
    """Refuses a nats-py whose internals used here have changed: a `BusError` naming each one
    missing and the feature it breaks. With `serving`, the service's internals too. Checked once
    per process for each side; a nats-py cannot change under a running process."""
    if serving in _passed:
        return
    internals = _client_internals() + (_service_internals() if serving else [])
    missing = [internal for internal in internals if not internal.holds()]
    if missing:
        raise BusError("check nats-py", _refusal(missing))
    _passed.add(serving)


def _refusal(missing: Sequence[Internal]) -> str:
    return (
        f"nats-py {version('nats-py')} has changed internals mesh-provisioner relies on: no "
        f"{'; no '.join(map(str, missing))}. Install nats-py{PIN}, as pyproject.toml pins it, "
        "or adapt registry/wire/nats_internals.py to the new version"
    )


def _takes(owner: type, name: str, parameters: tuple[str, ...]) -> bool:
    """Whether `owner.name` is a function of exactly these parameters."""
    found = getattr(owner, name, None)
    return callable(found) and tuple(inspect.signature(found).parameters) == parameters


def _static(owner: type, name: str, parameters: tuple[str, ...]) -> bool:
    return isinstance(inspect.getattr_static(owner, name, None), staticmethod) and _takes(owner, name, parameters)


def _calls(owner: type, name: str, called: str) -> bool:
    """Whether the code of `owner.name` looks `called` up: that it still calls what we replace."""
    return _names(getattr(owner, name, None), called)


def _takes_and_names(owner: type, name: str, parameters: tuple[str, ...], named: str) -> bool:
    return _takes(owner, name, parameters) and _names(getattr(owner, name, None), named)


def _sets(owner: type, name: str) -> bool:
    """Whether instances of `owner` have attribute `name`: a class attribute, or one its `__init__` sets."""
    return name in vars(owner) or _names(getattr(owner, "__init__", None), name)


def _names(function: object, name: str) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and name in code.co_names


def route_raw_messages(nc: Client) -> dict[int, RawHandler]:
    """Hooks the parser's `Client._process_msg` (looked up on the client at every message): a
    message for a subscription whose id is in the returned dict goes to its handler instead,
    straight from the parser; any other goes where nats-py sends it."""
    handlers: dict[int, RawHandler] = {}
    process = nc._process_msg

    def routed(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> Awaitable[None]:
        # Not a coroutine itself: the parser awaits what it returns, one frame fewer a message.
        handler = handlers.get(sid)
        if handler is None:
            return process(sid, subject, reply, data, headers)  # type: ignore[arg-type]  # its parser passes None
        return handler(subject, reply, data, headers)

    nc._process_msg = routed  # type: ignore[method-assign,assignment]  # returns its awaitable
    return handlers


def subscription_id(sub: Subscription) -> int:
    """The id the parser routes a subscription's messages by (the key of `route_raw_messages`)."""
    return sub._id


def use_faster_header_parser(nc: Client) -> None:
    """Has `nc` parse header lines with `header_lines`, which reads them as nats-py does, faster."""
    nc._parse_header_lines = header_lines  # type: ignore[method-assign]


def tolerate_cancelled_flushes(nc: Client) -> None:
    """Has `nc` take each PONG for the oldest PING as nats-py does, passing over a PING whose
    flush was given up on (its future cancelled) instead of failing its read loop."""

    async def process_pong() -> None:
        if nc._pongs:
            future = nc._pongs.pop(0)
            if not future.done():
                future.set_result(True)
            nc._pongs_received += 1
            nc._pings_outstanding = 0

    nc._process_pong = process_pong  # type: ignore[method-assign]


def ping_after_pending(nc: Client) -> None:
    """Has `nc` queue each PING behind the commands waiting for its flusher, so that the PONG a
    flush waits for answers everything sent before it (nats-py writes the PING ahead of them)."""
    nc._send_ping = partial(send_ping_after_pending, nc)  # type: ignore[method-assign]


async def send_ping_after_pending(self: Client, future: asyncio.Future[bool] | None = None) -> None:
    """`Client._send_ping` with the PING queued behind what is pending (`ping_after_pending`); a
    method's shape, so that it can stand for nats-py's on the class itself."""
    self._pongs.append(future if future is not None else asyncio.get_running_loop().create_future())
    await self._send_command(PING_PROTO)
    await self._flush_pending()


def close_socket(nc: Client) -> None:
    """Closes the socket of `nc`'s last connect attempt, if it left one: a connect cancelled inside
    nats-py's own close of a failed attempt (which marks the client closed first) leaves it open,
    and `close()` then returns at once."""
    if nc._transport is not None:
        nc._transport.close()  # type: ignore[no-untyped-call]  # nats-py's Transport is untyped


async def drain_endpoints(service: Service) -> None:
    """Drains each endpoint's subscription (requests received are still handed to the handler),
    then forgets the endpoints: `Service.stop()` would unsubscribe them again, and fail."""
    for endpoint in service._endpoints:
        subscription = endpoint._subscription
        if subscription is not None:
            await subscription.drain()
    service._endpoints = []


_WHITESPACE = re.compile(r"\s")
_BYTES_WHITESPACE = " \t\n\r\x0b\x0c"  # what `bytes.strip()` strips
HEADER_LINE_SIZE = len(b"NATS/1.0\r\n")  # what nats-py cuts off a header block before parsing its lines
STATUS_AT = len(b"NATS/1.0")  # a space here: the block is a status (`NATS/1.0 404 No Messages`)


def status_line(block: bytes) -> tuple[str, str]:
    """The status and its description of a raw status block (`NATS/1.0 404 No Messages`)."""
    status, _, description = block[STATUS_AT + 1 :].split(b"\r\n", 1)[0].decode("utf-8", "replace").partition(" ")
    return status, description


def header_lines(raw: bytes) -> dict[str, str]:
    """nats-py's `Client._parse_header_lines`, the same result, faster: an ASCII block (every
    block JetStream sends) is decoded once, not twice a line, and a name is checked for
    whitespace by a regular expression instead of a generator over its characters. A batch direct
    get answers seven header lines a message: parsing them was a quarter of reading one node's 100
    keys (1.9 ms raw, 1.4 ms with this)."""
    if raw.isascii():
        return _ascii_header_lines(raw.decode("ascii"))
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if _WHITESPACE.search(key) is None:
            out[key] = value.strip().decode("utf-8", "replace")
    return out


def _ascii_header_lines(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            key = name.strip(_BYTES_WHITESPACE)
            if _WHITESPACE.search(key) is None:
                out[key] = value.strip(_BYTES_WHITESPACE)
    return out
