"""The NATS connection, the one place besides `registry.serving.service` that calls nats-py (its
private internals are touched in `registry.wire.nats_internals` alone, checked as a bus connects).

Everything the programs do on the bus goes through `Bus`: publish, request, subscribe, the
JetStream API and KV writes. nats-py's exceptions are translated here into the typed errors of
`registry.errors` (`NotFound`, `NoResponders`, `BusTimeout`, `PermissionDenied`,
`ConnectionClosed`, `JetStreamError`), each raised `from` the nats-py error so the cause stays.

nats-py reports a denied publish only on the connection's error callback, while the call that
made it times out vaguely later; `Bus` remembers recent permission violations so that a failed
call can say "permission denied for <subject>" instead of "timeout".

While nats-py reconnects, whatever is sent waits in its buffer and goes out on reconnect, even
when its caller has given up long before, and `unsubscribe()` sends no UNSUB although a SUB made
meanwhile is replayed: the server keeps that interest, and a consumer pushing to it never expires.
So `Bus` tells whether the connection is up (`connected`, `until_connected`) for whoever must not
create anything while it is away, a write (`store`) is not sent while it is away, and a
subscription ended while away is ended for real once the connection is back. A loss is logged
once, then a count at a slowing interval, then the recovery; a first connection is waited for
the same way, naming the servers and where they came from
(`BusOptions.servers_from`: a flag, a variable, a nats context...). A one-shot command connects
with `connect_within` instead, which fails at once when every server refuses.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from pydantic import BaseModel, ConfigDict, SecretStr

from registry.errors import (
    AuthorizationRefused,
    BusError,
    BusTimeout,
    ConnectionClosed,
    JetStreamError,
    NoResponders,
    NoRoute,
    NotFound,
    PermissionDenied,
    Unreachable,
    WrongLastSequence,
)
from registry.wire import nats_internals
from registry.wire.nats_internals import RawHandler
from registry.wire.no_responders import nobody_answers

log = logging.getLogger(__name__)

# JetStream error codes that mean "there is no such thing".
_NOT_FOUND = {10059, 10014, 10037}  # stream, consumer, message
_DENIED_SUBJECT = re.compile(r'(?:publish|subscription) to "?([^"\s]+)"?', re.IGNORECASE)


class BusOptions(BaseModel):
    """How to reach NATS. The same options serve the server and the node client."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    servers_from: str = "the default"  # where `servers` came from, said in logs and errors
    credentials_from: str = ""  # where the credentials below came from, said when a server refuses them
    credentials_hint: str = ""  # how credentials are given, said when a server refuses them
    name: str = "mesh-provisioner"
    creds: Path | None = None
    nkey_seed: Path | None = None
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    inbox_prefix: str = "_INBOX"
    connect_timeout: timedelta = timedelta(seconds=5)
    reconnect_wait: timedelta = timedelta(seconds=1)
    request_timeout: timedelta = timedelta(seconds=5)
    drain_timeout: timedelta = timedelta(seconds=5)


class Message:
    """A message as received: its subject, body, headers (empty when none) and reply subject.

    A plain class with slots: one is made per message of every listing, so construction is kept cheap."""

    __slots__ = ("data", "headers", "reply", "subject")

    def __init__(self, subject: str, data: bytes, headers: Mapping[str, str], reply: str) -> None:
        self.subject = subject
        self.data = data
        self.headers = headers
        self.reply = reply

    @staticmethod
    def of(msg: Msg) -> Message:
        return Message(msg.subject, msg.data, msg.headers or {}, msg.reply)


Handler = Callable[[Message], Awaitable[None]]


class Subscription:
    """A subscription of ours; ending it twice, on a closed connection, or while away is harmless.

    Ended while the connection is away, it hears nothing more at once, and its UNSUB is sent when
    the connection is back (nats-py would send none, yet replay a SUB queued meanwhile)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._sub: NatsSubscription | None = None
        self._raw: tuple[dict[int, RawHandler], int] | None = None
        self.ended = False

    async def unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        self.ended = True
        if self._raw is not None:
            handlers, sid = self._raw
            handlers.pop(sid, None)
        if sub is None:
            return
        if not self._bus.connected and not self._bus.closed.is_set():
            self._bus._unsubscribe_on_reconnect.append(sub)
            return
        await _unsubscribe(sub)


async def _unsubscribe(sub: NatsSubscription) -> None:
    try:
        await sub.unsubscribe()
    except nats.errors.Error:  # a closed connection has no subscription left to end
        log.debug("unsubscribe on a closed connection", exc_info=True)


class Bus:
    """A live connection: requests, subscriptions, JetStream, and its recent permission denials."""

    def __init__(self, nc: Client, options: BusOptions, raw_handlers: dict[int, RawHandler]) -> None:
        self._nc = nc
        self.options = options
        self.closed = anyio.Event()  # set when the connection is closed for good
        self._denials: deque[tuple[float, str, str]] = deque(maxlen=32)
        self.traces_refused = False  # it may not publish to its own inbox, where a trace is sent
        self._reconnects = 0
        self._reconnected = anyio.Event()  # replaced at each reconnect and at the close, after being set
        self._away = False  # from the loss until the reconnect is noted (nats-py's status changes earlier)
        self._unsubscribe_on_reconnect: list[NatsSubscription] = []
        self._raw = raw_handlers  # by subscription id: the messages `subscribe_raw` takes from the parser

    @property
    def max_payload(self) -> int:
        return self._nc.max_payload

    @property
    def server_version(self) -> tuple[int, int]:
        """The major and minor version of the nats-server connected to; (0, 0) when unknown."""
        version = self._nc.connected_server_version
        try:
            return version.major, version.minor
        except ValueError:  # not semantic versioning
            return 0, 0

    @property
    def timeout(self) -> float:
        return self.options.request_timeout.total_seconds()

    def new_inbox(self) -> str:
        return self._nc.new_inbox()

    @property
    def reconnects(self) -> int:
        """How many times the connection was recovered since it was made."""
        return self._reconnects

    async def reconnected(self, seen: int) -> int:
        """Waits until the connection has been recovered more than `seen` times; the count then.

        Core subscriptions are at-most-once: what was published while the connection was away is
        lost, so whoever follows live messages re-reads once this returns. A counter rather than a
        bare event, so that a reconnect between two waits is not missed."""
        while self._reconnects <= seen:
            await self._reconnected.wait()
        return self._reconnects

    @property
    def connected(self) -> bool:
        """Whether the connection is up: what is sent now goes out now, not at some reconnect."""
        return self._nc.is_connected and not self._away and not self.closed.is_set()

    async def until_connected(self, within: timedelta | None = None, *, operation: str = "wait for nats") -> None:
        """Returns once the connection is up; `BusTimeout` after `within`, `ConnectionClosed` when
        it is closed for good. Whoever creates a consumer or a subscription that must not be
        replayed later waits here instead of firing into the reconnect buffer."""
        try:
            with anyio.fail_after(_seconds(within)):
                while not self.connected:
                    if self.closed.is_set() or self._nc.is_closed:
                        raise ConnectionClosed(operation, "the connection is closed")
                    await self._reconnected.wait()
        except TimeoutError:
            raise BusTimeout(operation, f"not connected to nats within {_seconds(within):.0f} s") from None

    def _note_loss(self) -> None:
        self._away = True

    async def _note_reconnect(self) -> None:
        ending, self._unsubscribe_on_reconnect = self._unsubscribe_on_reconnect, []
        for sub in ending:
            await _unsubscribe(sub)
        self._away = False
        self._reconnects += 1
        self._wake()

    def _note_closed(self) -> None:
        self.closed.set()
        self._unsubscribe_on_reconnect.clear()
        self._wake()

    def _wake(self) -> None:
        event, self._reconnected = self._reconnected, anyio.Event()
        event.set()

    def note_denial(self, text: str) -> None:
        found = _DENIED_SUBJECT.search(text)
        subject = found.group(1) if found else "?"
        if "for publish to" in text.lower() and subject.lower().startswith(f"{self.options.inbox_prefix}.".lower()):
            # Only a trace publishes to its own inbox (`no_responders`), and no call waits on it: a
            # party whose user may publish to its grants alone (the vault) cannot be traced, and a
            # call failing meanwhile must not be said to be denied the trace's inbox.
            self.traces_refused = True
            return
        self._denials.append((time.monotonic(), subject, text))

    def recent_denial(self, since: float) -> tuple[str, str] | None:
        """The subject and text of the last permission violation since `since` (monotonic)."""
        found = [(subject, text) for at, subject, text in self._denials if at >= since]
        return found[-1] if found else None

    @contextmanager
    def translated(self, operation: str) -> Iterator[None]:
        """Maps nats-py's exceptions to ours, naming a permission denial seen during the call."""
        started = time.monotonic()
        try:
            yield
        except (nats.errors.Error, TimeoutError) as err:
            raise self._translate(operation, err, started) from err

    def _translate(self, operation: str, err: BaseException, started: float) -> BusError:
        denial = self.recent_denial(started)
        if denial is not None:
            return PermissionDenied(operation, denial[0], denial[1])
        if isinstance(err, nats.errors.NoRespondersError):
            return NoResponders(operation, "nobody answers")
        if isinstance(err, nats.errors.TimeoutError | TimeoutError):
            return BusTimeout(operation, "no answer in time")
        if isinstance(err, nats.errors.ConnectionClosedError):
            return ConnectionClosed(operation, "the connection is closed")
        return BusError(operation, _describe(err))

    async def publish(
        self, subject: str, data: bytes = b"", *, reply: str = "", headers: Mapping[str, str] | None = None
    ) -> None:
        with self.translated(f"publish {subject}"):
            await self._nc.publish(subject, data, reply=reply, headers=dict(headers) if headers else None)

    async def request(
        self,
        subject: str,
        data: bytes = b"",
        *,
        reply_wait: timedelta | None = None,
        headers: Mapping[str, str] | None = None,
        operation: str | None = None,
    ) -> Message:
        """The reply to `data` on `subject`; `NoResponders` (saying why nobody answers), `BusTimeout`
        or `PermissionDenied` else."""
        operation = operation or f"request {subject}"
        try:
            with self.translated(operation):
                msg = await self._nc.request(
                    subject,
                    data,
                    timeout=_seconds(reply_wait) or self.timeout,
                    headers=dict(headers) if headers else None,
                )
        except NoResponders as err:
            raise await nobody_answers(self, operation, subject) from err.__cause__
        return Message.of(msg)

    async def subscribe(self, subject: str, handler: Handler) -> Subscription:
        ours = Subscription(self)

        async def on_message(msg: Msg) -> None:  # nats-py wants a coroutine function here
            if not ours.ended:
                await handler(Message.of(msg))

        with self.translated(f"subscribe {subject}"):
            ours._sub = await self._nc.subscribe(subject, cb=on_message)
        return ours

    async def subscribe_raw(self, subject: str, handler: RawHandler) -> Subscription:
        """A subscription whose messages go to `handler` straight from nats-py's parser, one at a
        time and in order: no `Msg`, no parsed headers, no queue, no task switch. For a reader of
        hundreds of thousands of messages (a streamed listing): nats-py's own path per message was
        half its cost. `handler` must not block; it runs in the connection's reading task."""
        ours = Subscription(self)

        async def never(msg: Msg) -> None:  # nats-py wants a callback; the parser never reaches it
            return None

        with self.translated(f"subscribe {subject}"):
            sub = await self._nc.subscribe(subject, cb=never)
        sid = nats_internals.subscription_id(sub)
        self._raw[sid] = handler
        ours._sub, ours._raw = sub, (self._raw, sid)
        return ours

    async def flush(self) -> None:
        """Returns once the server has processed everything sent before."""
        with self.translated("flush"):
            await self._nc.flush(timeout=int(self.timeout) or 1)

    async def jetstream(
        self, api: str, body: Mapping[str, Any] | None = None, *, operation: str, change: bool = False
    ) -> dict[str, Any]:
        """The JSON answer of `$JS.API.<api>`; a JetStream error raises `JetStreamError` (or `NotFound`).
        A `change` of what a stream holds (a purge) is not sent while the connection is away, as a
        write is not (`store`)."""
        if change:
            self._refuse_while_away(operation)
        data = json.dumps(body).encode() if body is not None else b""
        reply = await self.request(f"$JS.API.{api}", data, operation=operation)
        answer: dict[str, Any] = json.loads(reply.data)
        raise_for_jetstream_error(operation, answer)
        return answer

    def _refuse_while_away(self, operation: str) -> None:
        if not self.connected:
            raise BusError(operation, "not sent: the connection to nats is away")

    async def store(self, subject: str, data: bytes, *, headers: Mapping[str, str], operation: str) -> int:
        """Publishes into a stream and waits for its acknowledgement; the stored sequence.

        Never sent while the connection is away: nats-py would keep it in its reconnect buffer and
        send it once back, long after this call gave up, and a conditional write would then move
        the revision under its own writer. (A write the server is slow to acknowledge may still
        be stored after its timeout: its writer reads the key again.) Nobody answering is no
        proof that no stream stores the subject: a stream electing a leader answers nobody."""
        self._refuse_while_away(operation)
        try:
            reply = await self.request(subject, data, headers=headers, operation=operation)
        except NoRoute:
            raise
        except NoResponders as err:
            reason = "nobody stored it: no stream stores this subject, or its stream has no leader yet (retry)"
            raise NoResponders(operation, reason) from err
        answer: dict[str, Any] = json.loads(reply.data)
        raise_for_jetstream_error(operation, answer)
        return int(answer["seq"])


def raise_for_jetstream_error(operation: str, answer: Mapping[str, Any]) -> None:
    error = answer.get("error")
    if not isinstance(error, dict):
        return
    code, err_code = int(error.get("code", 0)), int(error.get("err_code", 0))
    description = str(error.get("description", "JetStream error"))
    if err_code in _NOT_FOUND:
        raise NotFound(operation, description)
    if err_code == WrongLastSequence.ERR_CODE:
        raise WrongLastSequence(operation, code, err_code, description)
    raise JetStreamError(operation, code, err_code, description)


def _seconds(duration: timedelta | None) -> float | None:
    return duration.total_seconds() if duration is not None else None


def _describe(err: BaseException) -> str:
    text = str(err).strip()
    name = type(err).__name__
    if text.startswith("nats: "):  # nats-py's own text says enough: "nats: 'Authorization Violation'"
        return text
    return f"{name}: {text}" if text and text != name else name


def tls_context(options: BusOptions) -> ssl.SSLContext | None:
    if options.tls_ca is None and options.tls_cert is None:
        return None
    context = ssl.create_default_context(cafile=str(options.tls_ca) if options.tls_ca else None)
    if options.tls_cert is not None:
        context.load_cert_chain(str(options.tls_cert), str(options.tls_key) if options.tls_key else None)
    return context


class Outage:
    """One loss of the connection: since when, how many reconnect attempts failed, when to tell.

    Told at `first_report` seconds after the loss, then at intervals that double up to
    `longest_silence`: a fleet waiting out a long outage logs a few lines each, not one a second."""

    def __init__(self, now: float, *, first_report: float = 5.0, longest_silence: float = 600.0) -> None:
        self.since = now
        self.attempts = 0
        self._interval = first_report
        self._longest = longest_silence
        self._report_at = now + first_report

    def failed_attempt(self, now: float) -> bool:
        """Counts a failed attempt; whether it is time to say so."""
        self.attempts += 1
        if now < self._report_at:
            return False
        self._interval = min(self._interval * 2, self._longest)
        self._report_at = now + self._interval
        return True


_LOSSES = (nats.errors.UnexpectedEOF, nats.errors.StaleConnectionError)  # told just before a disconnect


class _Callbacks:
    """nats-py's connection callbacks: log a loss once, then a slowing count, then the recovery;
    note denials; tell a close."""

    def __init__(self, options: BusOptions, *, first_report: float) -> None:
        self.options = options
        self.target = _target(options)
        self.bus: Bus | None = None
        self.outage: Outage | None = Outage(time.monotonic(), first_report=first_report)  # until first connected
        self.last_failure = ""
        self.refusal_ends_it = False  # a one-shot command's connect: every server refusing is an answer
        self._refusals = 0
        self._servers = len(options.servers)
        self._loss_reason: str | None = None

    async def on_error(self, err: Exception) -> None:
        text = str(err) or type(err).__name__
        if "permissions violation" in text.lower() and self.bus is not None:
            self.bus.note_denial(text)
        if self.outage is not None:
            self.last_failure = _describe(err)
            self._failed_attempt(self.last_failure)
            self._count_refusal(err)
        elif isinstance(err, _LOSSES):
            self._loss_reason = text  # told with the loss, by on_disconnected
            log.debug("nats connection error: %s", text)
        else:
            log.warning("nats error: %s", text)

    async def on_disconnected(self) -> None:
        if self._closing:
            return  # nats-py calls this on a close we asked for too: that is no loss
        if self.outage is None:
            self._lose(self._loss_reason or "disconnected")
        self._loss_reason = None
        if self.bus is not None:
            self.bus._note_loss()

    async def on_reconnected(self) -> None:
        outage, self.outage = self.outage, None
        took, attempts = (time.monotonic() - outage.since, outage.attempts) if outage else (0.0, 0)
        log.info(
            "nats connection recovered to %s after %.1f s (%d failed attempts)",
            _server_of(self.bus._nc) if self.bus else "?",
            took,
            attempts,
        )
        if self.bus is not None:
            await self.bus._note_reconnect()

    async def on_closed(self) -> None:
        self.outage = None
        if self.bus is not None:
            self.bus._note_closed()

    @property
    def _closing(self) -> bool:
        return self.bus is not None and self.bus.closed.is_set()

    def _lose(self, reason: str) -> None:
        self.outage = Outage(time.monotonic())
        log.warning("nats connection lost (%s); reconnecting", reason)

    def _count_refusal(self, err: Exception) -> None:
        """Before the first connection: a refusal by every server in turn is an answer, not an outage.

        Raised from the callback, so that nats-py's connect stops at once with its socket still
        there to close (a cancellation could land in its own half-done close, leaving the socket open)."""
        refused = isinstance(err, ConnectionRefusedError) or _is_unauthorized(self.last_failure)
        self._refusals = self._refusals + 1 if refused and self.bus is None else 0
        if self._refusals >= self._servers and self.refusal_ends_it:
            if _is_unauthorized(self.last_failure):
                raise self.unauthorized()
            accepted = f"no NATS server at {self.target} accepted the connection"
            raise Unreachable("connect", f"{accepted}: {self.last_failure}")

    def unauthorized(self) -> AuthorizationRefused:
        return AuthorizationRefused(
            "connect",
            self.target,
            self.last_failure,
            credentials=_credentials(self.options),
            hint=self.options.credentials_hint,
        )

    def _failed_attempt(self, reason: str) -> None:
        assert self.outage is not None
        doing = "reconnecting to nats" if self.bus is not None else f"connecting to nats at {self.target}"
        log.debug("nats %s attempt failed: %s", "reconnect" if self.bus is not None else "connect", reason)
        if self.outage.failed_attempt(time.monotonic()):
            log.warning(
                "still %s: %d attempts in %.0f s (last: %s)%s",
                doing,
                self.outage.attempts,
                time.monotonic() - self.outage.since,
                reason,
                f"; it refused {_credentials(self.options)}; {self.options.credentials_hint}"
                if _is_unauthorized(reason)
                else "",
            )


@asynccontextmanager
async def connect(options: BusOptions) -> AsyncIterator[Bus]:
    """A connection that reconnects forever and logs each loss and recovery; drained on exit.

    Until a server first answers it keeps trying too, saying so at a slowing interval."""
    async with _connected(options, _Callbacks(options, first_report=5.0)) as bus:
        yield bus


@asynccontextmanager
async def connect_within(options: BusOptions, within: timedelta) -> AsyncIterator[Bus]:
    """`connect` for a one-shot command: it gives up with one `BusError` naming the servers, where
    they came from and the last failure once every server has refused it (no listener, or an
    authorization violation), or once `within` or the options' `connect_timeout` (the shorter)
    has passed without a server answering. Nothing is logged meanwhile."""
    deadline = min(within, options.connect_timeout).total_seconds()
    callbacks = _Callbacks(options, first_report=float("inf"))
    callbacks.refusal_ends_it = True
    async with AsyncExitStack() as stack:
        try:
            with anyio.fail_after(deadline):
                bus = await stack.enter_async_context(_connected(options, callbacks))
        except TimeoutError:
            if _is_unauthorized(callbacks.last_failure):  # refused by one, the others silent
                raise callbacks.unauthorized() from None
            raise Unreachable(
                "connect", f"{_no_server(options)} answered within {deadline:g} s{_last(callbacks)}"
            ) from None
        callbacks.refusal_ends_it = False
        yield bus


def _is_unauthorized(failure: str) -> bool:
    return "authorization violation" in failure.lower()


def _credentials(options: BusOptions) -> str:
    """The credentials `options` connect with, as an error names them: never a secret."""
    used = []
    if options.creds is not None:
        used.append(f"the credentials file {options.creds}")
    if options.nkey_seed is not None:
        used.append(f"the nkey seed {options.nkey_seed}")
    if options.user is not None:
        used.append(f"user {options.user!r}" + (" with a password" if options.password is not None else ""))
    if options.token is not None:
        used.append("a token")
    if not used:
        return "a connection without credentials"
    said = " and ".join(used)
    return f"{said} (from {options.credentials_from})" if options.credentials_from else said


def _last(callbacks: _Callbacks) -> str:
    return f" (last: {callbacks.last_failure})" if callbacks.last_failure else ""


def _no_server(options: BusOptions) -> str:
    return f"no NATS server at {_target(options)}"


def _target(options: BusOptions) -> str:
    return f"{', '.join(options.servers)} (from {options.servers_from})"


@asynccontextmanager
async def _connected(options: BusOptions, callbacks: _Callbacks) -> AsyncIterator[Bus]:
    log.debug("connecting to nats at %s (from %s)", ", ".join(options.servers), options.servers_from)
    nats_internals.check_nats_internals()
    nc = Client()
    nats_internals.use_faster_header_parser(nc)
    nats_internals.tolerate_cancelled_flushes(nc)
    nats_internals.ping_after_pending(nc)
    raw_handlers = nats_internals.route_raw_messages(nc)
    try:
        await nc.connect(**_connect_options(options, callbacks))
    except BaseException as err:
        with anyio.move_on_after(5, shield=True):  # given up (a deadline, a refusal) or failed: no socket left open
            await _abandon(nc)
        if isinstance(err, Exception) and not isinstance(err, BusError):
            raise BusError(f"connect to {_target(options)}", _describe(err)) from err
        raise
    callbacks.outage = None
    bus = Bus(nc, options, raw_handlers)
    callbacks.bus = bus
    log.info("connected to nats at %s as %s", _server_of(nc), options.name)
    try:
        yield bus
    finally:
        # nats-py closes the connection itself once its drain times out: leave it time to.
        with anyio.move_on_after(options.drain_timeout.total_seconds() + 2, shield=True):
            await _close(bus, nc)


def nats_client(bus: Bus) -> Client:
    """The nats-py client under `bus`, for `registry.serving.service` alone (the micro service API)."""
    return bus._nc


def _server_of(nc: Client) -> str:
    url = nc.connected_url
    return url.netloc if url is not None else "?"


def _connect_options(options: BusOptions, callbacks: _Callbacks) -> dict[str, Any]:
    """nats-py's `connect` arguments: reconnecting for ever, its callbacks ours."""
    return dict(
        servers=list(options.servers),
        name=options.name,
        error_cb=callbacks.on_error,
        disconnected_cb=callbacks.on_disconnected,
        reconnected_cb=callbacks.on_reconnected,
        closed_cb=callbacks.on_closed,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=options.reconnect_wait.total_seconds(),
        connect_timeout=options.connect_timeout.total_seconds(),
        user_credentials=str(options.creds) if options.creds else None,
        nkeys_seed=str(options.nkey_seed) if options.nkey_seed else None,
        user=options.user,
        password=options.password.get_secret_value() if options.password else None,
        token=options.token.get_secret_value() if options.token else None,
        tls=tls_context(options),
        inbox_prefix=options.inbox_prefix,
        drain_timeout=int(options.drain_timeout.total_seconds()) or 1,
    )


async def _abandon(nc: Client) -> None:
    """Closes a client whose first connect did not complete, its socket included."""
    try:
        await nc.close()
    except Exception:  # a client that never connected may have little to close
        log.debug("closing an unconnected client failed", exc_info=True)
    finally:
        nats_internals.close_socket(nc)


async def _close(bus: Bus, nc: Client) -> None:
    bus.closed.set()
    if nc.is_closed:
        return
    try:
        await nc.drain()
    except Exception:  # a connection that cannot drain is closed all the same
        log.debug("drain failed; closing", exc_info=True)
        try:
            await nc.close()
        except OSError:  # closed while away: nats-py flushes its reconnect buffer into the lost socket
            log.debug("close failed; closing the socket", exc_info=True)
            nats_internals.close_socket(nc)
