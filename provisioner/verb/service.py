"""The verb as a NATS service (`nats.micro`): concurrency, the error contract, and shutdown.

nats-py calls a micro handler one request at a time, so the handler answers what memory holds at
once and hands each request that reads a bucket to a task of our own task group; at most
`max_concurrent` are read at once and `max_waiting` more wait for a slot, beyond which a request is
answered 503 at once.

Turns are fair between parties (`PartyTurns`): a party (a node, an operator, a provider: another
account) has at most `concurrent_per_party` requests read at once and `waiting_per_party` more
waiting; its next is answered 503, and the seat's other slots stay free for everyone else. And a
party is sent at most its rate of answers' bytes (`provisioner.verb.budgets`): an answer that
overdraws it waits, outside the seat-wide slots, holding the party's turn. Requests from inside the
data account (the seat's own tools, a single-account development bus) share the seat-wide bounds only.

Errors: a `RequestError` is answered with its code (400, 403, 410, 503) in the `Nats-Service-Error-Code`
header, its reason in `Nats-Service-Error` and `{"error": reason}` as the body. Anything else is
logged with its traceback and answered 500 "internal error", never with its text.

Logs join: every line said while a request is answered carries `request=<id>` (one per request:
the asker's, when it passes one in the `Mesh-Request-Id` header, else the seat's own; every answer
carries it back in that header), and once its party is known `party=<label>` and `what=`
(`registry.runtime.log_context`).

Shutdown, in this order: stop taking requests (the endpoint's subscription is drained, so a
request already received is still handed over), wait for the requests in flight up to
`shutdown_timeout`, then cancel the rest, each answered 503 "server stopping".
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from importlib import metadata

import anyio
from anyio.abc import TaskGroup

from provisioner.errors import RequestError
from provisioner.verb.answering import AtOnce, Reading
from provisioner.verb.budgets import AnswerBudgets, AnswerRates
from provisioner.verb.handler import Verb, asker_of
from provisioner.verb.stats import UNREAD, RequestStats
from registry.access import Party
from registry.contract import REQUEST_ID, REQUEST_ID_HEADER, buckets
from registry.runtime import log_context, new_log_id
from registry.serving import EndpointFigures, EndpointSpec, RunningService, ServiceRequest, capped, serve
from registry.wire import Bus

log = logging.getLogger(__name__)

ENDPOINT = "provisioning"
INTERNAL_ERROR = "internal error"
STOPPING = "server stopping; retry"
# Draining the endpoint hands over requests already received; it gets this long even with no deadline.
STOP_TAKING_AT_LEAST = 2.0
REFUSALS_EVERY = timedelta(seconds=60)  # a party's refusals of one code are logged once per this
REFUSALS_KEPT = 10_000  # (party, code) pairs remembered; past it, those said long enough ago are forgotten
DESCRIPTION = "the mesh-provisioner registry and its read-only provisioning verb"


def version() -> str:
    try:
        return metadata.version("mesh-provisioner")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0"


class InFlight:
    """Counts requests handed to tasks (`count`) and those being answered at once (`answering`,
    with its high-water mark `peak`); `idle()` waits until none is left."""

    def __init__(self) -> None:
        self.count = 0
        self.answering = 0
        self.peak = 0
        self._idle = anyio.Event()
        self._idle.set()

    @contextmanager
    def answering_one(self) -> Iterator[None]:
        self.answering += 1
        self.peak = max(self.peak, self.answering)
        try:
            yield
        finally:
            self.answering -= 1

    def enter(self) -> None:
        if self.count == 0:
            self._idle = anyio.Event()
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()


class PartyTurns:
    """Each party's requests in flight, and the limiter that lets `concurrent` of them be read at once."""

    def __init__(self, *, concurrent: int, waiting: int) -> None:
        self._concurrent = concurrent
        self._most = concurrent + waiting
        self._held: dict[Party, int] = {}
        self._limiters: dict[Party, anyio.CapacityLimiter] = {}

    def enter(self, party: Party | None) -> bool:
        """Counts a request of `party` in; False when it already has as many in flight as it may."""
        if party is None:
            return True
        held = self._held.get(party, 0)
        if held >= self._most:
            return False
        self._held[party] = held + 1
        if held == 0:
            self._limiters[party] = anyio.CapacityLimiter(self._concurrent)
        return True

    def turn(self, party: Party | None) -> AbstractAsyncContextManager[object]:
        """Held while one of the party's requests is read."""
        return nullcontext() if party is None else self._limiters[party]

    def leave(self, party: Party | None) -> None:
        if party is None:
            return
        held = self._held.pop(party) - 1
        if held:
            self._held[party] = held
        else:
            del self._limiters[party]


class Counted:
    """A request as the verb answers it: its answer counted in `stats` under what was asked (once
    known: `what`) and the code sent, with the time from its arrival."""

    __slots__ = ("request", "started", "stats", "what")

    def __init__(self, request: ServiceRequest, stats: RequestStats) -> None:
        self.request = request
        self.stats = stats
        self.started = time.perf_counter()
        self.what = UNREAD
        stats.received += 1

    async def respond(self, page: bytes) -> None:
        code = await self.request.respond(page)
        self.stats.answered(self.what, code, time.perf_counter() - self.started, "answer over max_payload")

    async def respond_error(self, code: str, reason: str) -> None:
        await self.request.respond_error(code, reason)
        self.stats.answered(self.what, code, time.perf_counter() - self.started, reason)


@dataclass(frozen=True)
class RunningVerb:
    service: RunningService
    in_flight: InFlight


@asynccontextmanager
async def verb_service(
    bus: Bus,
    *,
    verb: Verb,
    max_concurrent: int = 32,
    max_waiting: int = 1000,
    concurrent_per_party: int = 4,
    waiting_per_party: int = 64,
    answer_rates: AnswerRates | None = None,
    shutdown_timeout: timedelta = timedelta(seconds=10),
    stats: RequestStats | None = None,
) -> AsyncIterator[RunningVerb]:
    """The service `mesh-provisioner` answering the verb until the block exits, then shut down in order.

    On a normal exit the requests in flight are answered first (up to `shutdown_timeout`); when the
    block is left by an exception or a cancellation they are cancelled at once. Each answer is
    counted in `stats` (`provisioner.verb.stats`), which `$SRV.STATS` carries."""
    stats = stats if stats is not None else RequestStats()
    limiter = anyio.CapacityLimiter(max_concurrent)
    refusals = RefusalLog()
    budgets = AnswerBudgets(answer_rates or AnswerRates())
    turns = PartyTurns(concurrent=min(concurrent_per_party, max_concurrent), waiting=waiting_per_party)
    in_flight = InFlight()
    async with anyio.create_task_group() as handlers:

        async def on_request(served: ServiceRequest) -> None:
            request = Counted(served, stats)
            request_id = request_id_of(served.headers)
            served.reply_headers = {REQUEST_ID_HEADER: request_id}
            with log_context(request=request_id):  # its task, started inside, carries it too
                reading = await _answer_at_once(verb, request, refusals, budgets)
                if reading is None:
                    return
                if in_flight.count >= max_concurrent + max_waiting:
                    await request.respond_error("503", "too many requests waiting; retry shortly")
                    return
                if not turns.enter(reading.party):
                    await request.respond_error("503", "too many of your requests waiting; retry shortly")
                    return
                in_flight.enter()
                handlers.start_soon(_handle, reading, Slots(limiter, turns, in_flight, refusals, budgets), request)

        endpoint = EndpointSpec(ENDPOINT, buckets.VERB_SUBJECT, on_request, partial(_figures, stats))
        async with serve(
            bus, name=buckets.SEAT, version=version(), description=DESCRIPTION, endpoints=[endpoint]
        ) as service:
            log.info("serving %s as service %s %s", buckets.VERB_SUBJECT, buckets.SEAT, service.id)
            try:
                yield RunningVerb(service, in_flight)
            except BaseException:
                handlers.cancel_scope.cancel()
                raise
            await _shut_down(service, handlers, in_flight, shutdown_timeout)


async def _shut_down(service: RunningService, handlers: TaskGroup, in_flight: InFlight, deadline: timedelta) -> None:
    started = time.monotonic()
    with anyio.move_on_after(max(deadline.total_seconds(), STOP_TAKING_AT_LEAST), shield=True):
        await service.stop_taking_requests()
    log.info("stopped taking requests; waiting for %d in flight", in_flight.count)
    with anyio.move_on_after(deadline.total_seconds() - (time.monotonic() - started), shield=True):
        await in_flight.idle()
    if in_flight.count:
        log.warning(
            "shutdown: %d requests still in flight after %.1f s; cancelling them (answered 503)",
            in_flight.count,
            time.monotonic() - started,
        )
    handlers.cancel_scope.cancel()


def _figures(stats: RequestStats) -> EndpointFigures:
    return EndpointFigures(
        errors=stats.errors,
        last_error=stats.last_error,
        processing_seconds=stats.seconds,
        answered=stats.total,
        data=stats.as_data(),
    )


async def _answer_at_once(verb: Verb, request: Counted, refusals: RefusalLog, budgets: AnswerBudgets) -> Reading | None:
    """Answers what memory holds in the handler itself; returns the reading the rest needs
    (`provisioner.verb.answering` decides which is which). An answer held that would overdraw its
    party's budget goes the readers' way, to wait for it outside the handler."""
    try:
        answer = verb.answer(request.request.data, request.request.headers)
    except RequestError as err:
        await _refuse(request, err, refusals)
    except Exception:
        log.exception("request failed unexpectedly; answered 500")
        await request.respond_error("500", INTERNAL_ERROR)
    else:
        request.what = answer.what
        if not isinstance(answer, AtOnce):
            return answer
        if budgets.wait_for(answer.party, len(answer.page)) > 0:
            return Reading(answer.way, answer.what, partial(_held, answer.page), answer.party, charged=True)
        await request.respond(answer.page)
    return None


async def _held(page: bytes) -> bytes:
    return page


@dataclass(frozen=True)
class Slots:
    """What a request read by a task of its own takes its turn from, and where it is counted."""

    limiter: anyio.CapacityLimiter
    turns: PartyTurns
    in_flight: InFlight
    refusals: RefusalLog
    budgets: AnswerBudgets


async def _handle(reading: Reading, slots: Slots, request: Counted) -> None:
    with log_context(party=asker_of(reading.party), what=reading.what):
        await _read_and_answer(reading, slots, request)


async def _read_and_answer(reading: Reading, slots: Slots, request: Counted) -> None:
    started = time.perf_counter()
    turns, in_flight = slots.turns, slots.in_flight
    try:
        async with turns.turn(reading.party):
            async with slots.limiter:
                with in_flight.answering_one():
                    page = await reading.read()
            if not reading.charged:
                await anyio.sleep(slots.budgets.wait_for(reading.party, len(page)))
            else:  # charged when it was answered at once: its debt is paid back from now
                await anyio.sleep(slots.budgets.wait_for(reading.party, 0))
        await request.respond(page)
        log.debug("answered %d bytes in %.1f ms", len(page), (time.perf_counter() - started) * 1000)
    except RequestError as err:
        err.asker = err.asker or asker_of(reading.party)
        await _refuse(request, err, slots.refusals)
    except anyio.get_cancelled_exc_class():
        with anyio.move_on_after(1, shield=True):
            await request.respond_error("503", STOPPING)
        raise
    except Exception:
        log.exception("request failed unexpectedly; answered 500")
        await request.respond_error("500", INTERNAL_ERROR)
    finally:
        turns.leave(reading.party)
        in_flight.leave()


def request_id_of(headers: Mapping[str, str]) -> str:
    """The id the asker gave its request (`REQUEST_ID_HEADER`), when it is one; else a new one."""
    given = headers.get(REQUEST_ID_HEADER)
    return given if given is not None and REQUEST_ID.fullmatch(given) else new_log_id()


class RefusalLog:
    """Says a refusal once per `every` for each party and code, with how many it left unsaid
    since: a party sending bad requests as fast as it can wrote a line each (17% of the seat's
    time in its handler), and would flood the log an operator reads."""

    def __init__(self, every: timedelta = REFUSALS_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every.total_seconds()
        self._clock = clock
        self._said: dict[tuple[str, str], list[float]] = {}  # (asker, code): [when said, unsaid since]

    def refused(self, err: RequestError) -> None:
        now, key = self._clock(), (err.asker, err.code)
        said = self._said.get(key)
        if said is not None and now - said[0] < self.every:
            said[1] += 1
            return
        if len(self._said) >= REFUSALS_KEPT:
            self._said = {at: was for at, was in self._said.items() if now - was[0] < self.every}
        unsaid = f" ({int(said[1])} more from it since, unsaid)" if said is not None and said[1] else ""
        who = f" from {err.asker}" if err.asker else ""
        fields = {"code": err.code, "party": err.asker} if err.asker else {"code": err.code}
        log.info("request refused (%s)%s%s: %s", err.code, who, unsaid, capped(err.reason), extra=fields)
        self._said[key] = [now, 0]


async def _refuse(request: Counted, err: RequestError, refusals: RefusalLog) -> None:
    request.what = err.what or request.what
    refusals.refused(err)
    await request.respond_error(err.code, err.reason)
