"""A local PostgreSQL: for the dev loop's provider side and the tests.

PostgreSQL refuses to run as root, so when this process is root every PostgreSQL program runs as
the unprivileged `nobody` (through `runuser`) and the folders it writes are given to that user.
A cluster is initialised UTF-8 with the superuser `postgres`, trusted through its socket only;
every TCP connection proves a password by SCRAM-SHA-256. A server listens on loopback at a free
port and is ready when `pg_ctl -w` says so, never after a sleep.

The binaries are found on PATH, else in Debian's `/usr/lib/postgresql/<version>/bin` (the
`postgresql` package puts them off PATH). Blocking calls: run them in a worker thread from async
code. psycopg is imported only by what connects, so the dev loop runs without it.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from registry.errors import RegistryError

SUPERUSER = "postgres"
UNPRIVILEGED = "nobody"  # who runs PostgreSQL when this process is root
INSTALL = "Debian: sudo apt-get install postgresql"
_DEBIAN = Path("/usr/lib/postgresql")
_PORT_TRIES = 3


class LocalPostgresError(RegistryError):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"local PostgreSQL: {reason}")


def find_binaries() -> Path | None:
    """The folder of `initdb`, `pg_ctl` and `postgres`: on PATH, else Debian's newest; None without."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(found).resolve().parent
    installed = sorted(_DEBIAN.glob("*/bin/initdb"), key=lambda p: _version(p.parts[-3]))
    return installed[-1].parent if installed else None


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def binaries() -> Path:
    found = find_binaries()
    if found is None:
        raise LocalPostgresError(f"not installed: initdb, pg_ctl and postgres are needed ({INSTALL})")
    return found


def as_owner(command: Sequence[str]) -> list[str]:
    """`command` as the user PostgreSQL runs as."""
    return ["runuser", "-u", UNPRIVILEGED, "--", *command] if os.geteuid() == 0 else list(command)


def give_away(path: Path) -> None:
    """`path` owned by the user PostgreSQL runs as (nothing to do unless this process is root)."""
    if os.geteuid() == 0:
        user = pwd.getpwnam(UNPRIVILEGED)
        os.chown(path, user.pw_uid, user.pw_gid)


def owner_can_write(folder: Path) -> bool:
    """Whether the user PostgreSQL runs as reaches and writes `folder` (a root-only parent hides it)."""
    if os.geteuid() != 0:
        return os.access(folder, os.W_OK | os.X_OK)
    return _call(["test", "-w", str(folder), "-a", "-x", str(folder)]).returncode == 0


def _call(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """`command` run as PostgreSQL's user, its output captured: a list built here, never a shell."""
    return subprocess.run(as_owner(command), capture_output=True, text=True, check=False)  # noqa: S603


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    done = _call(command)
    if done.returncode != 0:
        output = f"{done.stdout}{done.stderr}".strip()
        raise LocalPostgresError(f"{Path(command[0]).name} failed ({done.returncode}): {output}")
    return done


def initialise(data: Path) -> None:
    """A new cluster in `data` (which must not exist; its parent belongs to PostgreSQL's user)."""
    _run(
        [
            str(binaries() / "initdb"),
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            "-E",
            "UTF8",
            "--locale=C",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
        ]
    )


def conninfo(**params: object) -> str:
    """A libpq connection string: each value single-quoted, `\\` and `'` escaped."""
    return " ".join(f"{key}='{_quoted(str(value))}'" for key, value in params.items())


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


@dataclass(frozen=True)
class LocalPostgres:
    """One running server: its cluster under `root/data`, its log `root/postgres.log`, its socket
    in `socket_dir`, listening on 127.0.0.1:`port`."""

    root: Path
    port: int
    socket_dir: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "postgres.log"

    @property
    def admin_dsn(self) -> str:
        """The superuser through the socket: no password, none in a process argument."""
        return conninfo(host=self.socket_dir, port=self.port, user=SUPERUSER, dbname="postgres")

    def tcp_dsn(self, user: str, password: str, dbname: str) -> str:
        """A consumer over TCP, proving `password` by SCRAM."""
        return conninfo(host="127.0.0.1", port=self.port, user=user, password=password, dbname=dbname)

    def log(self) -> str:
        return self.log_file.read_text(encoding="utf-8", errors="replace")


def start(root: Path, socket_dir: Path, settings: Mapping[str, str] | None = None) -> LocalPostgres:
    """The cluster in `root/data` started on a free loopback port (another one if the first was
    taken meanwhile), ready when this returns. `settings` are extra `-c name=value`."""
    extra = "".join(f" -c {name}={value}" for name, value in (settings or {}).items())
    for _ in range(_PORT_TRIES):
        server = LocalPostgres(root, _free_port(), socket_dir)
        options = f"-p {server.port} -k {socket_dir} -c listen_addresses=127.0.0.1 -c logging_collector=off{extra}"
        pg_ctl = [str(binaries() / "pg_ctl"), "-D", str(server.data), "-l", str(server.log_file), "-w", "-t", "60"]
        started = _call([*pg_ctl, "-o", options, "start"])
        if started.returncode == 0:
            return server
        log = server.log() if server.log_file.exists() else ""
        if "could not bind" not in log and "already in use" not in log:
            raise LocalPostgresError(f"did not start: {started.stdout}{started.stderr}{log[-2000:]}".strip())
    raise LocalPostgresError(f"found no free port in {_PORT_TRIES} tries")


def stop(server: LocalPostgres) -> None:
    """Stopped, its sessions ended (`-m fast`), once `pg_ctl -w` says it is gone."""
    stop_cluster(server.data)


def stop_cluster(data: Path) -> None:
    """The server of the cluster in `data` stopped, its sessions ended, once `pg_ctl -w` says so."""
    _run([str(binaries() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])


def running(data: Path) -> bool:
    """Whether a server of the cluster in `data` runs (`pg_ctl status`: its postmaster.pid names a live one)."""
    return _call([str(binaries() / "pg_ctl"), "-D", str(data), "status"]).returncode == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
