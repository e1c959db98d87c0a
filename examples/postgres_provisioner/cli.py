"""`mesh-postgres-provisioner`: makes PostgreSQL accept the consumers the mesh delivered.

    mesh-postgres-provisioner --env-file /run/mesh/env/postgres.env [--variable PG_CONSUMERS]
                              [--dsn 'host=/run/postgresql dbname=postgres'] [--watch]

PostgreSQL is reached with libpq's settings: `--dsn`, then the `PG*` variables (`PGHOST`,
`PGUSER`, `PGPASSFILE`, ...). Exit codes: 0 applied, 1 something refused, 2 usage, a delivery
that cannot be used (nothing changed) or psycopg missing (the `postgres` extra), 3 PostgreSQL
unreachable. With `--watch` it runs until SIGTERM or SIGINT (exit 0; a second signal exits 1 at once).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from examples.postgres_provisioner.consumers import Digests
from examples.postgres_provisioner.errors import DeliveryError, PostgresUnavailable
from registry.runtime import configure_logging, missing_extra, quiet_on_closed_pipe

if TYPE_CHECKING:  # psycopg's: imported once `main` knows the extra is installed
    from examples.postgres_provisioner.watching import Plan

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mesh-postgres-provisioner", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--env-file", type=Path, required=True, help="the provider module's env file the node client writes"
    )
    parser.add_argument(
        "--variable", default="PG_CONSUMERS", help="the variable holding the consumers (default %(default)s)"
    )
    parser.add_argument("--dsn", default="", help="libpq connection string (default: the PG* variables)")
    parser.add_argument("--watch", action="store_true", help="poll the file and apply every change, until SIGTERM")
    parser.add_argument("--poll", type=_seconds, default=2.0, help="seconds between polls (default %(default)s)")
    parser.add_argument(
        "--resync",
        type=_seconds,
        default=300.0,
        help="seconds between applying an unchanged file (default %(default)s)",
    )
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO")
    return parser


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError("expected seconds between 0 and 86400")
    return value


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(log_format=args.log_format, level=args.log_level)
    missing = missing_extra("postgres", "psycopg")
    if missing is not None:
        return _fail(2, f"mesh-postgres-provisioner cannot run: {missing}")
    from examples.postgres_provisioner.watching import Plan, apply_once  # noqa: PLC0415 (psycopg's, found)

    plan = Plan(env_file=args.env_file, variable=args.variable, dsn=args.dsn, poll=args.poll, resync=args.resync)
    if args.watch:
        _watch(plan)
        return 0
    try:
        outcome = apply_once(plan, Digests())
    except DeliveryError as err:
        return _fail(2, f"delivery not applied: {err}")
    except PostgresUnavailable as err:
        return _fail(3, str(err))
    return 0 if outcome.ok else 1


def _fail(code: int, message: str) -> int:
    log.error("%s", message)  # an expected failure: its one line, no traceback
    return code


def _watch(plan: Plan) -> None:
    from examples.postgres_provisioner.watching import Watcher  # noqa: PLC0415 (psycopg's, as in main)

    stop = threading.Event()

    def on_signal(number: int, frame: FrameType | None) -> None:
        if stop.is_set():
            sys.exit(1)
        log.info("stopping on %s", signal.Signals(number).name)
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
    log.info("watching %s every %g s", plan.env_file, plan.poll)
    Watcher(plan).run(stop)
