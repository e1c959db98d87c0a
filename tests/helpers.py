"""Helpers shared by the test modules: imported from here, never from one test module into another."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

from mesh_dev.local_nats import LocalNats, local_nats
from provisioner.seat.buckets import ensure_buckets
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from provisioner_client.reconcile import ClientPlan, Report
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import Bucket, buckets
from registry.errors import WrongLastSequence
from registry.wire import BucketConfig, Bus, BusOptions, Message, connect, get_direct, put, update

T = TypeVar("T")

NODE = "node-1"
DEPLOY = Path(__file__).parents[1] / "deploy"
EXAMPLES = DEPLOY / "examples"


# The bounded waits, for what follows a write on its own time (a view's watch, a mirror, a stream's
# store, a listener's copy) where no event says so. Three meanings, three names: `until` answers
# whether it came, `eventually` the first value that came, `wait_for` fails the test if it did not.
# `within` only bounds a failure: no speed is ever asserted by them.

WITHIN = 20.0
"""How long a wait lasts before it counts as a failure, unless told: far past any state's own time
on a loaded machine."""


async def until(holds: Callable[[], bool | Awaitable[bool]], within: float = WITHIN, *, every: float = 0.01) -> bool:
    """Whether `holds` came true within `within` seconds, asked every `every`; the caller asserts
    the result, saying what."""
    with anyio.move_on_after(within):
        while not await _answer_of(holds):
            await anyio.sleep(every)
        return True
    return False


async def eventually(
    probe: Callable[[], Awaitable[T | None]], what: str, within: float = WITHIN, *, every: float = 0.02
) -> T:
    """`probe`'s first answer that is not None, asked every `every`; fails the test, saying `what`
    was awaited, if none came within `within` seconds."""
    with anyio.move_on_after(within):
        while (found := await probe()) is None:
            await anyio.sleep(every)
        return found
    pytest.fail(f"not within {within} s: {what}")


async def wait_for(
    holds: Callable[[], bool | Awaitable[bool]], what: str, within: float = WITHIN, *, every: float = 0.02
) -> None:
    """Returns once `holds` came true, asked every `every`; fails the test, saying `what` was
    awaited, if it did not within `within` seconds."""
    if not await until(holds, within, every=every):
        pytest.fail(f"not within {within} s: {what}")


async def _answer_of(holds: Callable[[], bool | Awaitable[bool]]) -> bool:
    answer = holds()
    return await answer if inspect.isawaitable(answer) else answer


async def last_sequence(bus: Bus, bucket: Bucket) -> int:
    """The last sequence of `bucket`'s stream: it grows by one per message stored (a write, a
    delete marker), whoever wrote it."""
    info = await bus.jetstream(bucket.info_api, operation=f"info {bucket.name}")
    return int(info["state"]["last_seq"])


BARRIER_KEY = "barrier.never.written"
NEVER = 1 << 62
"""A revision no key reaches: a write expecting it is refused by the stream, storing nothing."""


async def stream_barrier(bus: Bus, among: Iterable[Bucket]) -> None:
    """Returns once every message routed into the streams of `among` before it was called has been
    stored or refused: the barrier after which "nothing happened" is judged, once the attack's own
    connection was flushed or answered, never after a fixed time.

    nats-server takes a stream's incoming messages in the order they were routed: the answer to a
    write the stream refuses (its expected last revision never reached) comes after every message
    routed to it before, an attack's write or an answer sent into the stream on an attack's behalf
    (a direct get first: its answers go out in the order asked). The refused write stores nothing
    and wakes no watcher."""
    for bucket in among:
        await get_direct(bus, bucket, BARRIER_KEY)
        try:
            await update(bus, bucket, BARRIER_KEY, b"", last=NEVER)
        except WrongLastSequence:
            continue
        raise AssertionError(f"a write to {bucket.name} expecting revision {NEVER} was stored")


@asynccontextmanager
async def in_own_task(context: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """`context` entered and left by a task of its own, for an async fixture.

    pytest-asyncio sets a fixture up and tears it down in two different tasks, while an anyio task
    group or cancel scope must be left by the task that entered it (pytest-asyncio refuses it otherwise)."""
    loop = asyncio.get_running_loop()
    entered: asyncio.Future[T] = loop.create_future()
    leave = asyncio.Event()

    async def hold() -> None:
        async with context as value:
            entered.set_result(value)
            await leave.wait()

    holder = loop.create_task(hold())
    try:
        either: list[asyncio.Future[Any]] = [entered, holder]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not entered.done():
            holder.result()  # entering failed: raise why
        yield entered.result()
    finally:
        leave.set()
        await holder


@asynccontextmanager
async def serving(url: str, *, bus_options: BusOptions | None = None, **settings: Any) -> AsyncIterator[None]:
    """The server running against `url` (or as `bus_options` say) for the block, ready when it
    starts, stopped cleanly after."""
    stop = anyio.Event()
    options = bus_options or BusOptions(servers=(url,), name=buckets.SEAT)
    run = partial(run_server, bus_options=options, settings=ServerSettings(**settings), stop=stop)
    async with anyio.create_task_group() as tasks:
        await tasks.start(run)
        try:
            yield
        finally:
            stop.set()


@asynccontextmanager
async def paging_seat(folder: Path) -> AsyncIterator[tuple[LocalNats, Bus]]:
    """A seat on a nats-server of 16 KiB messages, so that answers take many pages; the server and
    our connection to it."""
    async with (
        in_own_task(local_nats(folder / "nats", "max_payload: 16384")) as server,
        in_own_task(serving(server.url, bucket_max_value_size=8192)),
        connect(BusOptions(servers=(server.url,), name="test")) as bus,
    ):
        yield server, bus


def clean_environment() -> dict[str, str]:
    """This process's environment without the settings either program would read from it (the
    `nats` CLI's contexts included: XDG_CONFIG_HOME points nowhere)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "MESH_PROVISIONER_"))}
    return kept | {"XDG_CONFIG_HOME": "/nonexistent/mesh-provisioner-tests"}


PIPELINED = 10_000
"""Plain publishes sent before one waits for an acknowledgement. nats-server queues a stream's
incoming messages, at most 100,000 of them, and drops what overflows, silently for a publish with no
reply subject: 200,000 at once overflowed it on a loaded machine (its acknowledged last write was
answered 429)."""


async def put_many(bus: Bus, bucket: Bucket, values: Mapping[str, bytes]) -> None:
    """Writes `values` pipelined (plain publishes into the bucket's stream), each run of
    `PIPELINED` closed by an acknowledged write: the stream stores one connection's messages in
    order, so that acknowledgement says every one before it was stored."""
    items = list(values.items())
    for start in range(0, len(items), PIPELINED):
        *rest, (last_key, last_value) = items[start : start + PIPELINED]
        for key, value in rest:
            await bus.publish(bucket.subject(key), value)
        await put(bus, bucket, last_key, last_value)


class Fired:
    """Requests published at once, each with its own reply subject; `replies()` waits for them all."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.received: dict[int, Message] = {}
        self._all = anyio.Event()

    async def on_reply(self, msg: Message) -> None:
        self.received[int(msg.subject.rsplit(".", 1)[1])] = msg
        if len(self.received) == self.count:
            self._all.set()

    async def replies(self, within: float = 10.0) -> list[Message]:
        with anyio.fail_after(within):
            await self._all.wait()
        return [self.received[i] for i in range(self.count)]


async def fire(bus: Bus, bodies: Sequence[bytes]) -> Fired:
    """Publishes every request to the verb, then flushes: once this returns the server has them all."""
    fired = Fired(len(bodies))
    prefix = bus.new_inbox()
    await bus.subscribe(f"{prefix}.*", fired.on_reply)
    for number, body in enumerate(bodies):
        await bus.publish(buckets.VERB_SUBJECT, body, reply=f"{prefix}.{number}")
    await bus.flush()
    return fired


def sh_env(path: Path) -> dict[str, str]:
    """The variables of an env file as POSIX sh reads it."""
    script = f'set -a; . "{path}"; env -0'
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True, env={}).stdout
    pairs = (entry.split("=", 1) for entry in out.decode().split("\0") if entry)
    return {k: v for k, v in pairs if k not in {"PWD", "SHLVL", "_", "OLDPWD"}}


class LogWaiter(logging.Handler):
    """Sets an event once a record whose message holds `text` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.seen = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()

    async def wait(self, within: float) -> None:
        with anyio.fail_after(within):
            await self.seen.wait()


@contextmanager
def logged(text: str, logger: str = "") -> Iterator[LogWaiter]:
    """A `LogWaiter` for `text` on `logger` (the root by default) for the block."""
    waiter = LogWaiter(text)
    target = logging.getLogger(logger)
    target.addHandler(waiter)
    try:
        yield waiter
    finally:
        target.removeHandler(waiter)


class RestartableNats:
    """A nats-server that is stopped (SIGTERM) or killed (SIGKILL) and started again on the same
    port with the same store."""

    def __init__(self, tg: TaskGroup, state_dir: Path, extra_config: str = "") -> None:
        self._tg = tg
        self._state_dir = state_dir
        self._extra_config = extra_config
        self._running: LocalNats | None = None
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        self.port = -1

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        self._running = await self._tg.start(self._run)
        self.port = self._running.port

    async def stop(self) -> None:
        self._stop.set()
        await self._stopped.wait()

    async def kill(self) -> None:
        """As a crash would: nothing flushed, no client told."""
        if self._running is not None:
            self._running.process.send_signal(signal.SIGKILL)
        await self.stop()

    def copy_store(self, to: Path) -> None:
        """The store as the server has written it so far (not necessarily synced to disk), copied."""
        shutil.copytree(self._state_dir / "jetstream", to)

    async def kill_and_roll_back(self, copy: Path) -> None:
        """As a power failure would leave it: killed, its store replaced by `copy` (every write
        acknowledged since lost), and started again on the same port."""
        await self.kill()
        shutil.rmtree(self._state_dir / "jetstream")
        shutil.copytree(copy, self._state_dir / "jetstream")
        await self.start()

    async def _run(self, *, task_status: TaskStatus[LocalNats]) -> None:
        try:
            async with local_nats(self._state_dir, self._extra_config, port=self.port) as running:
                task_status.started(running)
                await self._stop.wait()
        finally:
            self._running = None
            self._stopped.set()


@asynccontextmanager
async def restartable_nats(state_dir: Path, extra_config: str = "") -> AsyncIterator[RestartableNats]:
    """A restartable nats-server with `extra_config` (the accounts a test includes, say)."""
    async with anyio.create_task_group() as tg:
        server = RestartableNats(tg, state_dir, extra_config)
        await server.start()
        try:
            yield server
        finally:
            await server.stop()


@dataclass
class OnNats:
    """Our bus on a restartable server."""

    server: RestartableNats
    bus: Bus


@asynccontextmanager
async def restartable_bus(
    tmp_path: Path, *, request_timeout: float = 0.5, with_buckets: bool = True
) -> AsyncIterator[OnNats]:
    """Our bus on a restartable server, reconnecting every 0.1 s; with every bucket of the contract
    unless told otherwise."""
    async with restartable_nats(tmp_path / "nats") as server:
        options = BusOptions(
            servers=(server.url,),
            name="test",
            reconnect_wait=timedelta(seconds=0.1),
            request_timeout=timedelta(seconds=request_timeout),
        )
        async with connect(options) as bus:
            if with_buckets:
                await ensure_buckets(bus, BucketConfig())
            yield OnNats(server, bus)


class Reports:
    """Every report of a client's watch loop; `until` waits for reconciles until a check holds."""

    def __init__(self, bound: float = 30.0) -> None:
        self.all: list[Report] = []
        self.bound = bound
        self._event = anyio.Event()

    def __call__(self, report: Report) -> None:
        self.all.append(report)
        self._event.set()
        self._event = anyio.Event()

    async def until(self, check: Callable[[], bool], what: str) -> None:
        try:
            with anyio.fail_after(self.bound):
                while not check():
                    await self._event.wait()
        except TimeoutError:
            pytest.fail(f"not within {self.bound} s: {what}")


async def watch_follows_a_config_change(node: Bus, plan: ClientPlan, writer: Bus, config: Bucket) -> None:
    """Runs the watch loop as `node` until `writer`'s change of the `log-level` config value reaches
    the `app` module's env file (the example manifests), which a reconcile has written before."""
    assert sh_env(plan.materialize / "app.env")["LOG_LEVEL"] != "debug", "the premise: not debug yet"
    changed = anyio.Event()

    def on_report(report: Report) -> None:
        if sh_env(plan.materialize / "app.env")["LOG_LEVEL"] == "debug":
            changed.set()

    timing = WatchTiming(debounce=timedelta(seconds=0.1))
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(node, plan, timing, on_report=on_report, task_status=task_status))
        await put(writer, config, "log-level", b'"debug"')
        with anyio.fail_after(10):
            await changed.wait()
        tg.cancel_scope.cancel()
