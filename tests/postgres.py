"""A real PostgreSQL for the tests: one cluster initialised per session as an unprivileged user
(PostgreSQL refuses to run as root), copied and started per test on a free loopback port, its
socket in a folder that user owns, every statement in its log (`log_statement = 'all'`).

The superuser `postgres` connects through the socket without a password (`local ... trust`); every
TCP connection must prove a password by SCRAM-SHA-256, so a consumer's login tests its password.
When PostgreSQL cannot be found this fails, saying what to install: it never skips.
"""

from __future__ import annotations

import os
import pwd
import re
import selectors
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

SUPERUSER = "postgres"
UNPRIVILEGED = "nobody"  # who runs PostgreSQL when the tests run as root


def binaries() -> Path:
    """The folder of `initdb`, `pg_ctl` and `postgres`: on PATH, else Debian's newest."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(found).resolve().parent
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if installed:
        return installed[-1].parent
    pytest.fail(
        "PostgreSQL is not installed: these tests need initdb, pg_ctl and postgres "
        "(Debian: apt-get install postgresql; scripts/test does it when it runs as root)",
        pytrace=False,
    )


def _as_owner(command: Sequence[str]) -> list[str]:
    return ["runuser", "-u", UNPRIVILEGED, "--", *command] if os.geteuid() == 0 else list(command)


def _give_away(path: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam(UNPRIVILEGED)
        os.chown(path, user.pw_uid, user.pw_gid)


def _run(command: Sequence[str]) -> None:
    done = subprocess.run(_as_owner(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{command[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}", pytrace=False)


@contextmanager
def initialised_cluster() -> Iterator[Path]:
    """A cluster initialised once (UTF-8, SCRAM over TCP), to be copied by each test's server."""
    root = Path(tempfile.mkdtemp(prefix="mesh-pg-template-"))
    try:
        _give_away(root)
        data = root / "data"
        _run([
            str(binaries() / "initdb"), "-D", str(data), "-U", SUPERUSER, "-E", "UTF8", "--locale=C",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync",
        ])  # fmt: skip
        yield data
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class Postgres:
    """One running server: its port, socket folder, log, and how to reach it."""

    root: Path
    port: int

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    @property
    def log_file(self) -> Path:
        return self.root / "postgres.log"

    @property
    def admin_dsn(self) -> str:
        """The superuser through the socket."""
        return make_conninfo(host=str(self.socket_dir), port=self.port, user=SUPERUSER, dbname="postgres")

    def tcp_dsn(self, user: str, password: str, dbname: str) -> str:
        """A consumer over TCP, proving `password` by SCRAM."""
        return make_conninfo(host="127.0.0.1", port=self.port, user=user, password=password, dbname=dbname)

    def log(self) -> str:
        return self.log_file.read_text(encoding="utf-8", errors="replace")

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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_postgres(template: Path) -> Iterator[Postgres]:
    """A copy of `template` served on a free loopback port until the block ends."""
    root = Path(tempfile.mkdtemp(prefix="mesh-pg-"))
    try:
        subprocess.run(["cp", "-a", str(template), str(root / "data")], check=True)
        _give_away(root)
        (root / "socket").mkdir()
        _give_away(root / "socket")
        server = _start(root)
        try:
            yield server
        finally:
            _run([str(binaries() / "pg_ctl"), "-D", str(root / "data"), "-m", "fast", "-w", "stop"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _start(root: Path) -> Postgres:
    """Started and ready (`pg_ctl -w` waits for it); another port if the first was taken meanwhile."""
    for _ in range(3):
        server = Postgres(root, _free_port())
        options = (
            f"-p {server.port} -k {server.socket_dir} -c listen_addresses=127.0.0.1 -c log_statement=all "
            "-c fsync=off -c logging_collector=off"
        )
        pg_ctl = [str(binaries() / "pg_ctl"), "-D", str(root / "data"), "-l", str(server.log_file), "-w", "-t", "60"]
        started = subprocess.run(
            _as_owner([*pg_ctl, "-o", options, "start"]), capture_output=True, text=True, check=False
        )
        if started.returncode == 0:
            return server
        if "could not bind" not in server.log() and "already in use" not in server.log():
            pytest.fail(f"PostgreSQL did not start:\n{started.stdout}{started.stderr}\n{server.log()}", pytrace=False)
    pytest.fail("PostgreSQL found no free port in 3 tries", pytrace=False)


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
