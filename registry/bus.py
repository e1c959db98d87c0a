"""The NATS connection both programs use: options, reconnect-forever, and error translation.

nats-py reports a denied publish only on the connection's error callback, while the call that
made it times out vaguely later; `Bus` remembers recent permission violations so that
`translate_errors` can say "permission denied" instead of "timeout".
"""

from __future__ import annotations

import logging
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path

import anyio
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from registry.errors import RegistryError

log = logging.getLogger(__name__)


class BusError(RegistryError):
    """A NATS operation failed; says which and why."""

    def __init__(self, operation: str, reason: str) -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(f"{operation}: {reason}")


class PermissionDenied(BusError):
    pass


class BusOptions(BaseModel):
    """How to reach NATS. The same options serve the server and the node client."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
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
    drain_timeout: timedelta = Field(default=timedelta(seconds=5))


class Bus:
    """A live connection: the nats-py client, its JetStream context and its recent errors."""

    def __init__(self, nc: Client, options: BusOptions) -> None:
        self.nc = nc
        self.options = options
        self.js: JetStreamContext = nc.jetstream(timeout=options.request_timeout.total_seconds())
        self._denials: deque[tuple[float, str]] = deque(maxlen=32)

    def note_denial(self, message: str) -> None:
        self._denials.append((time.monotonic(), message))

    def recent_denial(self, since: float) -> str | None:
        found = [message for at, message in self._denials if at >= since]
        return found[-1] if found else None

    @contextmanager
    def translate_errors(self, operation: str) -> Iterator[None]:
        """Maps nats-py's exceptions to `BusError`, naming a permission denial when there was one."""
        started = time.monotonic()
        try:
            yield
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as err:
            denial = self.recent_denial(started)
            if denial is not None:
                raise PermissionDenied(operation, denial) from err
            raise BusError(operation, _describe(err)) from err


def _describe(err: BaseException) -> str:
    text = str(err).strip()
    name = type(err).__name__
    return f"{name}: {text}" if text and text != name else name


def tls_context(options: BusOptions) -> ssl.SSLContext | None:
    if options.tls_ca is None and options.tls_cert is None:
        return None
    context = ssl.create_default_context(cafile=str(options.tls_ca) if options.tls_ca else None)
    if options.tls_cert is not None:
        context.load_cert_chain(str(options.tls_cert), str(options.tls_key) if options.tls_key else None)
    return context


@asynccontextmanager
async def connect(options: BusOptions) -> AsyncIterator[Bus]:
    """A connection that reconnects forever and logs each loss and recovery; drained on exit."""
    holder: list[Bus] = []

    async def on_error(err: Exception) -> None:
        text = str(err)
        if "permissions violation" in text.lower() and holder:
            holder[0].note_denial(text)
        log.warning("nats error: %s", text)

    async def on_disconnected() -> None:
        if holder and holder[0].nc.is_closed:
            return  # nats-py calls this on a close we asked for too: that is no loss
        log.warning("nats connection lost; reconnecting")

    async def on_reconnected() -> None:
        log.info("nats connection recovered to %s", _server_of(holder[0].nc) if holder else "?")

    try:
        nc = await nats.connect(
            servers=list(options.servers),
            name=options.name,
            error_cb=on_error,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
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
    except Exception as err:
        raise BusError(f"connect to {', '.join(options.servers)}", _describe(err)) from None
    bus = Bus(nc, options)
    holder.append(bus)
    log.info("connected to nats at %s as %s", _server_of(nc), options.name)
    try:
        yield bus
    finally:
        # nats-py closes the connection itself once its drain times out: leave it time to.
        with anyio.move_on_after(options.drain_timeout.total_seconds() + 2, shield=True):
            await _close(nc)


def _server_of(nc: Client) -> str:
    url = nc.connected_url
    return url.netloc if url is not None else "?"


async def _close(nc: Client) -> None:
    if nc.is_closed:
        return
    try:
        await nc.drain()
    except Exception:  # a connection that cannot drain is closed all the same
        log.debug("drain failed; closing", exc_info=True)
        await nc.close()
