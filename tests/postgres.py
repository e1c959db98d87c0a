"""A real PostgreSQL for the tests (`mesh_dev.local_postgres`, run as an unprivileged user when the
tests are root): one cluster initialised per session, copied and started per test on a free
loopback port, its socket in a folder that user owns, every statement in its log
(`log_statement = 'all'`).

The superuser `postgres` connects through the socket without a password (`local ... trust`); every
TCP connection must prove a password by SCRAM-SHA-256, so a consumer's login tests its password.
When PostgreSQL cannot be found this fails, saying what to install: it never skips.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ParamSpec, TypeVar

import psycopg
import pytest

from mesh_dev import local_postgres
from mesh_dev.local_postgres import LocalPostgres, LocalPostgresError, give_away

P = ParamSpec("P")
T = TypeVar("T")

TEST_SETTINGS = {"log_statement": "all", "fsync": "off"}


def binaries() -> Path:
    """The folder of `initdb`, `pg_ctl` and `postgres`; the test fails, saying what to install, without."""
    try:
        return local_postgres.binaries()
    except LocalPostgresError as err:
        pytest.fail(f"{err} (scripts/test installs it when it runs as root)", pytrace=False)


@contextmanager
def initialised_cluster() -> Iterator[Path]:
    """A cluster initialised once (UTF-8, SCRAM over TCP), to be copied by each test's server."""
    binaries()
    root = Path(tempfile.mkdtemp(prefix="mesh-pg-template-"))
    try:
        give_away(root)
        data = root / "data"
        _or_fail(local_postgres.initialise, data)
        yield data
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class Postgres(LocalPostgres):
    """One running server, with what the tests ask of it: statements as the superuser, its log."""

    def statements(self, since: int = 0) -> list[str]:
        """Each statement the server logged after byte `since` of its log."""
        text = self.log_file.read_bytes()[since:].decode("utf-8", errors="replace")
        return re.findall(r"LOG:  statement: (.*)", text)

    def log_size(self) -> int:
        return self.log_file.stat().st_size

    def query(self, statement: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            cursor = conn.execute(statement.encode(), params)
            return cursor.fetchall() if cursor.description is not None else []

    def roles(self) -> set[str]:
        return {str(row[0]) for row in self.query("SELECT rolname FROM pg_roles WHERE rolname !~ '^pg_'")}

    def databases(self) -> dict[str, str]:
        """Each database's owner."""
        rows = self.query("SELECT datname, pg_get_userbyid(datdba) FROM pg_database WHERE NOT datistemplate")
        return {str(name): str(owner) for name, owner in rows}


@contextmanager
def running_postgres(template: Path) -> Iterator[Postgres]:
    """A copy of `template` served on a free loopback port until the block ends."""
    root = Path(tempfile.mkdtemp(prefix="mesh-pg-"))
    try:
        subprocess.run(["cp", "-a", str(template), str(root / "data")], check=True)
        give_away(root)
        (root / "socket").mkdir()
        give_away(root / "socket")
        started = _or_fail(local_postgres.start, root, root / "socket", TEST_SETTINGS)
        server = Postgres(started.root, started.port, started.socket_dir)
        try:
            yield server
        finally:
            _or_fail(local_postgres.stop, server)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _or_fail(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call`'s result; a PostgreSQL that cannot be set up fails the test with what it said."""
    try:
        return call(*args, **kwargs)
    except LocalPostgresError as err:
        pytest.fail(str(err), pytrace=False)


class Lines:
    """The lines a child process writes to one pipe, read as they come."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.seen: list[str] = []
        self._buffer = b""

    def until(self, predicate: str, within: float = 30.0) -> str:
        """The first line (read from now on) holding `predicate`; fails after `within` seconds."""
        deadline = time.monotonic() + within
        with selectors.DefaultSelector() as selector:
            selector.register(self.stream, selectors.EVENT_READ)
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    text = line.decode("utf-8", errors="replace")
                    self.seen.append(text)
                    if predicate in text:
                        return text
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    pytest.fail(f"no line with {predicate!r} within {within} s; seen:\n" + "\n".join(self.seen))
                chunk = os.read(self.stream.fileno(), 65536)
                if not chunk:
                    pytest.fail(f"the process ended before a line with {predicate!r}; seen:\n" + "\n".join(self.seen))
                self._buffer += chunk
