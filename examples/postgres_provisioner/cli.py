"""`mesh-postgres-provisioner`: makes PostgreSQL accept the consumers the mesh delivered.

    mesh-postgres-provisioner --env-file /run/mesh/env/postgres.env [--variable PG_CONSUMERS]
                              [--dsn 'host=/run/postgresql dbname=postgres'] [--watch]

PostgreSQL is reached with libpq's settings: `--dsn`, then the `PG*` variables (`PGHOST`,
`PGUSER`, `PGPASSFILE`, ...). The program's own settings follow every program's conventions
(`examples.postgres_provisioner.settings`). Exit codes are the shared table's
(`registry.command_line`): 0 applied, 1 something refused, 2 usage, a delivery that cannot be
used (nothing changed) or psycopg missing (the `postgres` extra), 3 PostgreSQL unreachable. With
`--watch` it runs until SIGTERM or SIGINT (exit 0; a second signal exits 1 at once).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from registry.command_line import (
    EXIT_CLOSED_PIPE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Parser,
    exit_codes_help,
    exit_if_version,
    pause_collector_for_start_up,
    quiet_on_closed_pipe,
    start_up_done,
)

if TYPE_CHECKING:  # psycopg's: imported once `main` knows the extra is installed
    from examples.postgres_provisioner.settings import PostgresProvisionerSettings
    from examples.postgres_provisioner.watching import Plan

log = logging.getLogger(__name__)

PROG = "mesh-postgres-provisioner"
EXIT_CODES = (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CLOSED_PIPE)
_EPILOG = """\
settings: flags over MESH_POSTGRES_PROVISIONER_<SETTING> environment variables over the --config
TOML file (keys named as the settings: env_file = "...") over defaults. Durations take a unit:
2s, 5m, 1h.

examples:
  mesh-postgres-provisioner --env-file /run/mesh-provisioner/env/postgres.env --watch
  mesh-postgres-provisioner --env-file postgres.env --dsn "host=db1 dbname=postgres" --resync 10m
"""


def build_parser() -> argparse.ArgumentParser:
    from examples.postgres_provisioner.settings import PostgresProvisionerSettings  # noqa: PLC0415
    from registry.edge import add_settings_arguments  # noqa: PLC0415

    parser = Parser(
        prog=PROG,
        version=True,
        description=(__doc__ or "").split("\n\n")[0],
        epilog=_EPILOG + "\n" + exit_codes_help(EXIT_CODES),
    )
    parser.add_argument("--config", type=Path, metavar="PATH", help="a TOML file of settings")
    add_settings_arguments(parser, PostgresProvisionerSettings, "settings")
    return parser


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    pause_collector_for_start_up(argv)
    exit_if_version(PROG, sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from examples.postgres_provisioner.settings import PostgresProvisionerSettings  # noqa: PLC0415
    from registry.edge import given_flags, load_settings  # noqa: PLC0415
    from registry.errors import SettingsError  # noqa: PLC0415
    from registry.runtime import configure_logging, missing_extra  # noqa: PLC0415

    try:
        flags = given_flags(args, PostgresProvisionerSettings)
        settings = load_settings(PostgresProvisionerSettings, flags, args.config, os.environ)
    except SettingsError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(log_format=settings.log_format, level=settings.log_level)
    start_up_done()
    missing = missing_extra("postgres", "psycopg")
    if missing is not None:
        return _fail(EXIT_USAGE, f"{PROG} cannot run: {missing}")
    return _run(settings)


def _run(settings: PostgresProvisionerSettings) -> int:
    from examples.postgres_provisioner.consumers import Digests  # noqa: PLC0415
    from examples.postgres_provisioner.errors import DeliveryError, PostgresUnavailable  # noqa: PLC0415
    from examples.postgres_provisioner.watching import Plan, apply_once  # noqa: PLC0415 (psycopg's, found)

    plan = Plan(
        env_file=settings.env_file,
        variable=settings.variable,
        dsn=settings.dsn,
        poll=settings.poll.total_seconds(),
        resync=settings.resync.total_seconds(),
    )
    if settings.watch:
        _watch(plan)
        return EXIT_OK
    try:
        outcome = apply_once(plan, Digests())
    except DeliveryError as err:
        return _fail(EXIT_USAGE, f"delivery not applied: {err}")
    except PostgresUnavailable as err:
        return _fail(EXIT_UNREACHABLE, str(err))
    return EXIT_OK if outcome.ok else EXIT_FAILED


def _fail(code: int, message: str) -> int:
    log.error("%s", message)  # an expected failure: its one line, no traceback
    return code


def _watch(plan: Plan) -> None:
    from examples.postgres_provisioner.watching import Watcher  # noqa: PLC0415 (psycopg's, as in main)

    stop = threading.Event()

    def on_signal(number: int, frame: FrameType | None) -> None:
        if stop.is_set():
            sys.exit(EXIT_FAILED)
        log.info("stopping on %s", signal.Signals(number).name)
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
    log.info("watching %s every %g s", plan.env_file, plan.poll)
    Watcher(plan).run(stop)
