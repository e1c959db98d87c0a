"""Serving a NATS micro service (`$SRV.PING`, `$SRV.INFO`, `$SRV.STATS` answer): the verb, the vault.

The only module besides `registry.wire.bus` that touches nats-py. A handler gets a `ServiceRequest`
(body, headers, `respond`, `respond_error`); answering never raises: a request whose requester
is gone, or a closed connection, is logged and dropped.

Every answer is measured against the connection's `max_payload` (body and headers together, as
nats-server counts them) before it is sent: nats-server closes a connection that publishes more,
and nats-py then never reconnects. An answer too large is replaced by a 500 service error saying
so; an error's reason is capped (it may quote what the requester sent).

An endpoint may count its answers itself (`EndpointSpec.figures`): its `$SRV.STATS` entry then
carries those counts (errors, processing time) and their details in `data`, so that
`nats micro stats` says what the handler answered rather than how often it raised.

Stopping in order needs one thing nats-py has no public call for: draining an endpoint's
subscription, so that requests already received are handed to the handler rather than dropped
(`Service.stop()` unsubscribes). That reaches nats-py's internals, in
`registry.wire.nats_internals` (`drain_endpoints`), whose check runs when a service starts and
refuses a nats-py without them, rather than lose requests silently on a later stop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from nats import micro
from nats.micro.request import Request
from nats.micro.service import EndpointStats, Service

from registry.wire import Bus, check_nats_internals, drain_endpoints, nats_client

log = logging.getLogger(__name__)

STOP_AT_MOST = 5.0  # seconds an unordered stop (an error, a cancellation) may take


class ServiceRequest:
    """One request to an endpoint, as our code sees it."""

    __slots__ = ("_bus", "_request", "reply_headers")

    def __init__(self, request: Request, bus: Bus) -> None:
        self._request = request
        self._bus = bus
        self.reply_headers: dict[str, str] | None = None  # headers every answer to it carries

    @property
    def data(self) -> bytes:
        return self._request.data

    @property
    def headers(self) -> Mapping[str, str]:
        return self._request.headers or {}

    async def respond(self, data: bytes) -> str:
        """`data` as the answer; a 500 service error instead when it is over `max_payload`. Returns
        the code answered: "200", or "500"."""
        limit = self._bus.max_payload
        if len(data) + _header_bytes(self.reply_headers or {}) > limit:
            log.error(
                "an answer of %d bytes is over the connection's max_payload (%d); answered 500 instead",
                len(data),
                limit,
            )
            await self.respond_error("500", f"the answer is {len(data)} bytes, over max_payload ({limit}): not sent")
            return "500"
        try:
            await self._request.respond(data, headers=self.reply_headers)
        except Exception as err:  # a closed connection or a request without a reply subject
            log.warning("could not answer a request: %s", err)
        return "200"

    async def respond_error(self, code: str, reason: str) -> None:
        """The service error headers (code, reason on one line) and `{"error": reason}` as the body.

        The reason is capped, then cut further if the error would still be over `max_payload`."""
        limit = self._bus.max_payload
        for cap in (MAX_REASON_CHARS, 64, 0):
            description, body = _error_message(code, reason, cap)
            if len(body) + _header_bytes(_error_headers(code, description, self.reply_headers)) <= limit:
                break
        else:
            log.error("even a bare error %s is over max_payload (%d): the request is left unanswered", code, limit)
            return
        try:
            await self._request.respond_error(code, description, data=body, headers=self.reply_headers)
        except Exception as err:  # a closed connection or a request without a reply subject
            log.warning("could not answer a request with error %s: %s", code, err, extra={"code": code})


def _error_message(code: str, reason: str, cap: int) -> tuple[str, bytes]:
    """The header's description (one line) and the JSON body of an error whose reason is capped."""
    reason = capped(reason, cap) if cap else f"error {code}"
    return " ".join(reason.split()), json.dumps({"error": reason}).encode()


def _error_headers(code: str, description: str, given: Mapping[str, str] | None) -> dict[str, str]:
    return {**(given or {}), "Nats-Service-Error": description, "Nats-Service-Error-Code": code}


def _header_bytes(headers: Mapping[str, str]) -> int:
    """The bytes of a header block: `NATS/1.0`, one `name: value` line each, a blank line (none
    without headers)."""
    if not headers:
        return 0
    if len(headers) == 1:  # an answer's request id: counted without a generator (once per answer)
        ((name, value),) = headers.items()
        return _HEADER_FRAME + _utf8_len(name) + _utf8_len(value) + 4
    return _HEADER_FRAME + sum(_utf8_len(name) + _utf8_len(value) + 4 for name, value in headers.items())


_HEADER_FRAME = len(b"NATS/1.0\r\n\r\n")


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


MAX_REASON_CHARS = 1024


def capped(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters left out)"


RequestHandler = Callable[[ServiceRequest], Awaitable[None]]


@dataclass(frozen=True)
class EndpointFigures:
    """What an endpoint's handler counted itself, for `$SRV.STATS`: nats-py counts a handler's
    errors only when it raises, and its time only until it returns, while a handler may answer
    errors and hand requests to tasks. `data` goes in the endpoint's `data` field as it is."""

    errors: int
    last_error: str
    processing_seconds: float
    answered: int
    data: Mapping[str, Any]


@dataclass(frozen=True)
class EndpointSpec:
    name: str
    subject: str
    handler: RequestHandler
    figures: Callable[[], EndpointFigures] | None = None  # None: nats-py's own counts


class RunningService:
    """A started service: its id, and the ordered stop."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._stopped = False

    @property
    def id(self) -> str:
        return self._service.id

    async def stop_taking_requests(self) -> None:
        """Drains each endpoint (requests received are still handed over), then stops the rest."""
        if self._stopped:
            return
        self._stopped = True
        try:
            await drain_endpoints(self._service)
            await self._service.stop()
        except Exception as err:  # a closed connection takes no requests anyway
            log.warning("could not stop the service's subscriptions cleanly: %s", err)


@asynccontextmanager
async def serve(
    bus: Bus, *, name: str, version: str, description: str, endpoints: Sequence[EndpointSpec]
) -> AsyncIterator[RunningService]:
    """The service answering on its endpoints until the block exits; the caller stops it in order
    with `stop_taking_requests()` (a second stop on exit is harmless)."""
    check_nats_internals(serving=True)
    with bus.translated(f"start service {name}"):
        service = await micro.add_service(
            nats_client(bus),
            name=name,
            version=version,
            description=description,
            stats_handler=_stats_of({spec.name: spec.figures for spec in endpoints if spec.figures is not None}),
        )
    running = RunningService(service)
    try:
        for spec in endpoints:
            with bus.translated(f"add endpoint {spec.subject}"):
                handler = _adapted(spec.handler, bus)
                await service.add_endpoint(name=spec.name, subject=spec.subject, handler=handler)
        await bus.flush()  # ready means the nats-server knows the subscriptions
        yield running
    finally:
        with anyio.move_on_after(STOP_AT_MOST, shield=True):
            await running.stop_taking_requests()


def _stats_of(figures: Mapping[str, Callable[[], EndpointFigures]]) -> Callable[[EndpointStats], object]:
    """The service's stats handler: an endpoint's own figures replace nats-py's counts in its
    `$SRV.STATS` entry (nats-py calls it with the entry before encoding it), and fill its `data`."""

    def endpoint_stats(stats: EndpointStats) -> object:
        counted = figures.get(stats.name)
        if counted is None:
            return None
        told = counted()
        stats.num_errors = told.errors
        stats.last_error = told.last_error
        stats.processing_time = int(told.processing_seconds * 1e9)
        stats.average_processing_time = int(stats.processing_time / told.answered) if told.answered else 0
        return dict(told.data)

    return endpoint_stats


def _adapted(handler: RequestHandler, bus: Bus) -> Callable[[Request], Awaitable[None]]:
    def on_request(request: Request) -> Awaitable[None]:  # hands over the handler's coroutine: no frame of its own
        return handler(ServiceRequest(request, bus))

    return on_request
