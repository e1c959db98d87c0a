"""The demo's provider side, for real when the machine has PostgreSQL.

- `local_database`: a PostgreSQL (`mesh_dev.local_postgres`) with its cluster under the demo's
  state folder, initialised once and kept between runs; under a temporary folder, removed at
  stop, when PostgreSQL's unprivileged user cannot reach the state folder (a root-only parent).
  Its socket is in a short temporary folder (a socket path has at most 107 bytes).
- `ProviderLoop`: the provider helper (`registry.provider.sdk.provide`) for provider `postgres`,
  writing `postgres_bound` from the needs: host, port and the consumer's database, as the vault's
  consumers name it. Run once at start, then again after each of the node client's reconciles.
- `provisioner_watching`: `examples/postgres_provisioner` in watch mode, as its own process,
  against the `postgres` module's env file (which receives `${consumers:db}` from the vault).
- `connects`: whether a module's database URL logs in (`SELECT 1`), said without the URL.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from examples.postgres_provisioner.consumers import read_env_variable
from examples.postgres_provisioner.errors import DeliveryError
from mesh_dev import local_postgres
from mesh_dev.local_postgres import INSTALL, LocalPostgres, LocalPostgresError, give_away, owner_can_write
from mesh_dev.standins import Vault
from registry.errors import BusError
from registry.provider import Bind, BoundNeed, provide
from registry.runtime import event, missing_extra
from registry.wire import Bus, Changes

log = logging.getLogger(__name__)

PROVIDER = "postgres"
HOST = "127.0.0.1"
_POLL_SECONDS = "0.5"
_FIRST_OUTCOME_SECONDS = 60.0
_LEVELS = logging.getLevelNamesMapping()


@dataclass(frozen=True)
class Database:
    """The demo's PostgreSQL, or why there is none (`why_not`)."""

    server: LocalPostgres | None = None
    why_not: str = ""
    temporary: bool = False


def why_not_postgres(*, wanted: bool) -> str:
    """Why the demo runs without PostgreSQL, or "" when it can start one."""
    if not wanted:
        return "not started (--no-postgres)"
    if local_postgres.find_binaries() is None:
        return f"not installed on this machine: install it to see the provider side for real ({INSTALL})"
    missing = missing_extra("postgres", "psycopg")
    return f"not used: the postgres provisioner cannot run: {missing}" if missing else ""


@asynccontextmanager
async def local_database(folder: Path, *, wanted: bool = True) -> AsyncIterator[Database]:
    """PostgreSQL running with its cluster under `folder` until the block ends, when the machine has it."""
    why_not = why_not_postgres(wanted=wanted)
    if why_not:
        yield Database(why_not=why_not)
        return
    try:
        root, temporary = await anyio.to_thread.run_sync(_cluster_root, folder)
    except LocalPostgresError as err:
        yield _without(err, folder / "data")
        return
    sockets = Path(tempfile.mkdtemp(prefix="mesh-pg-"))
    try:
        give_away(sockets)
        try:
            server = await anyio.to_thread.run_sync(_started, root, sockets)
        except LocalPostgresError as err:
            yield _without(err, root / "postgres.log")
            return
        log.info("PostgreSQL listening on %s:%d", HOST, server.port, extra=event(path=str(server.data)))
        try:
            yield Database(server, temporary=temporary)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(local_postgres.stop, server)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def _without(err: LocalPostgresError, where: Path) -> Database:
    """No PostgreSQL, and why in a line: its own output, which may run to pages, stays in `where`."""
    reason = next((line.strip() for line in err.reason.splitlines() if line.strip()), "no reason given")
    log.warning("PostgreSQL did not start, the demo goes on without it: %s (see %s)", reason[:300], where)
    return Database(why_not=f"did not start: {reason[:300]} (see {where})")


def _started(root: Path, sockets: Path) -> LocalPostgres:
    """The cluster's server started; one still running from a loop that was killed (the state folder
    is this loop's alone, `mesh_dev.ownership`) is stopped first, as its socket folder is gone."""
    if local_postgres.running(root / "data"):
        log.info("stopping the PostgreSQL a killed dev loop left running on %s", root / "data")
        local_postgres.stop_cluster(root / "data")
    return local_postgres.start(root, sockets)


def _cluster_root(folder: Path) -> tuple[Path, bool]:
    """Where the cluster lives (initialised there when new), and whether that is a temporary folder."""
    folder.mkdir(parents=True, exist_ok=True)
    give_away(folder)
    temporary = not owner_can_write(folder)
    root = Path(tempfile.mkdtemp(prefix="mesh-dev-pg-")) if temporary else folder
    give_away(root)
    if not (root / "data" / "PG_VERSION").exists():
        local_postgres.initialise(root / "data")
    return root, temporary


def binding(server: LocalPostgres, vault: Vault) -> Bind:
    """What the provider binds for a need: where PostgreSQL listens, and the database the vault
    gives the needing module as a consumer of that provision; nothing for a module that is none."""

    def bind(need: BoundNeed) -> object:
        consumer = next((c for c in vault.consumers.get(need.provision, ()) if c.name == need.module), None)
        if consumer is None:
            return None
        return {"host": HOST, "port": server.port, "database": consumer.database}.get(need.local or "")

    return bind


class ProviderLoop:
    """`provide` for provider `postgres`: `converge` now, or `wake` the `follow` task to converge again."""

    def __init__(self, bus: Bus, bind: Bind) -> None:
        self._bus = bus
        self._bind = bind
        self._wake = anyio.Event()

    async def converge(self) -> Changes:
        return await provide(self._bus, PROVIDER, self._bind)

    def wake(self) -> None:
        self._wake.set()

    async def follow(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            try:
                await self.converge()
            except BusError as err:  # a conflict or an outage: the next wake converges again
                log.warning("postgres_bound not converged: %s", err)


@dataclass
class Provisioner:
    """The provisioner's process and its first outcome, as it logged it."""

    process: Process
    first_outcome: str = ""
    _outcome: anyio.Event = field(default_factory=anyio.Event)

    async def wait_first_outcome(self, seconds: float = _FIRST_OUTCOME_SECONDS) -> str:
        """Its first reconcile's summary (or refusal), or why there is none yet."""
        with anyio.move_on_after(seconds):
            await self._outcome.wait()
            return self.first_outcome
        return f"no reconcile within {seconds:.0f} s: see its log lines"

    def heard(self, level: int, message: str) -> None:
        log.log(level, "postgres provisioner: %s", message)
        if not self._outcome.is_set() and message.startswith(("reconciled ", "delivery not applied")):
            self.first_outcome = message
            self._outcome.set()


@asynccontextmanager
async def provisioner_watching(env_file: Path, server: LocalPostgres) -> AsyncIterator[Provisioner]:
    """`mesh-postgres-provisioner --watch` on `env_file` against `server` as its superuser (through
    the socket: no password in its arguments) until the block ends; then SIGTERM, and it finishes
    the reconcile in progress."""
    command = [
        sys.executable,
        "-m",
        "examples.postgres_provisioner",
        "--env-file",
        str(env_file),
        "--dsn",
        server.admin_dsn,
        "--watch",
        "--poll",
        _POLL_SECONDS,
        "--log-format",
        "json",
    ]
    # its own session: a Ctrl-C at the terminal is ours to pass on, once
    async with (
        await anyio.open_process(command, stdin=None, stdout=None, start_new_session=True) as process,
        anyio.create_task_group() as tg,
    ):
        provisioner = Provisioner(process)
        assert process.stderr is not None
        tg.start_soon(_relay, TextReceiveStream(process.stderr), provisioner)
        try:
            yield provisioner
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
            tg.cancel_scope.cancel()


async def _relay(lines: TextReceiveStream, provisioner: Provisioner) -> None:
    """Each of its JSON log lines, logged here at its level."""
    buffer = ""
    async for chunk in lines:
        *complete, buffer = (buffer + chunk).split("\n")
        for line in filter(None, complete):
            try:
                entry = json.loads(line)
                provisioner.heard(_LEVELS.get(str(entry["level"]).upper(), logging.INFO), str(entry["message"]))
            except (ValueError, KeyError, TypeError):
                provisioner.heard(logging.WARNING, line)


async def _stop(process: Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(10):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


def connects(env_file: Path, variable: str) -> str:
    """Whether the database URL in `variable` of `env_file` logs in: who and where, or why not
    (never the URL, nor its password)."""
    import psycopg  # the postgres extra: only here, once PostgreSQL was found and started  # noqa: PLC0415

    try:
        url = read_env_variable(env_file, variable)
    except DeliveryError as err:
        return f"cannot be read: {err.reason}"
    try:
        password = str(psycopg.conninfo.conninfo_to_dict(url).get("password") or "")
    except psycopg.Error as err:  # its message may quote the URL
        return f"does not connect: the URL cannot be read ({type(err).__name__})"
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            row = conn.execute("SELECT 1, current_user, current_database()").fetchone()
    except psycopg.Error as err:
        reason = str(err).strip()
        return f"does not connect: {reason.replace(password, '***') if password else reason}"
    assert row is not None
    return f"connects: SELECT 1 answered {row[0]} to role {row[1]} in database {row[2]}"
