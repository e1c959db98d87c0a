"""`mesh-provisioner-dev`: a local nats-server, the server and the demo loop, for a first try.

Exit codes are the shared table's (`registry.command_line`): 0 stopped cleanly on SIGTERM or
SIGINT; 1 a runtime failure, or a second SIGTERM/SIGINT that stopped it at once; 2 a usage or
settings error (a flag, a MESH_PROVISIONER_* variable, the config or domains file, read before
anything starts); 6 the state folder is in use by another process (named, with its pid): nothing
was changed; 141 stdout's reader went away (`mesh-provisioner-dev | head`): stopped quietly.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from registry.command_line import (
    EXIT_CLOSED_PIPE,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    exit_code_of,
    exit_codes_help,
    exit_if_version,
    pause_collector_for_start_up,
    quiet_on_closed_pipe,
    start_up_done,
)

if TYPE_CHECKING:
    import anyio

    from mesh_dev.loop import Participant
    from provisioner.seat.settings import ServerSettings
    from registry.edge import NatsContexts

log = logging.getLogger(__name__)

EXIT_CODES = (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HELD, EXIT_CLOSED_PIPE)
# The server's settings flags are many: a usage line naming them all would bury the one error.
USAGE = "mesh-provisioner-dev [--state-dir PATH] [--no-demo] [--no-postgres] [--config PATH] [server settings]"


def build_parser() -> argparse.ArgumentParser:
    from provisioner.seat.settings import ServerSettings  # noqa: PLC0415 (loaded when parsing, not at import)
    from registry.edge import add_settings_arguments  # noqa: PLC0415

    parser = Parser(
        prog="mesh-provisioner-dev",
        version=True,
        usage=USAGE,
        description="Start a local nats-server with JetStream on loopback (data under --state-dir), then the "
        "server against it, then the demo: stand-ins for the other domains (a config bucket, a vault verb, a "
        "postgres provider's bound bucket, the controller's placement mirror) and a node client that "
        "materializes deploy/examples/ into --state-dir/demo/env and keeps watching. When the machine has "
        "PostgreSQL (initdb on PATH or in /usr/lib/postgresql/*/bin), the provider side is real: a PostgreSQL "
        "under --state-dir/demo/postgres, postgres_bound written from the needs and the postgres provisioner "
        "watching, so module app's DATABASE_URL logs in. A manifest of your own in --state-dir/demo/manifests whose "
        "${port:...}, ${dir:...}, ${access:...}, ${seat:...} or ${machine:...} is pending is placed by adding its "
        'plan to --state-dir/demo/placement.json, e.g. "web": {"port": {"http": 8081}} (the controller\'s mirror '
        "mesh-controller_assignments follows the file within a second). While it runs, the nats CLI context "
        "mesh-provisioner-dev ($XDG_CONFIG_HOME/nats/context/, else ~/.config/nats/context/) names its NATS, so "
        "mesh-provisioner query and "
        "mesh-provisioner-client status in another shell find it without flags (nats --context mesh-provisioner-dev "
        "too); it is removed at stop. Prints how to query it. Ctrl-C stops everything. One loop at a time runs on a "
        "--state-dir: a second is refused, naming the first and its pid, and changes nothing.",
        epilog="examples:\n  mesh-provisioner-dev --state-dir ./state\n  mesh-provisioner-dev --no-demo\n\n"
        + exit_codes_help(EXIT_CODES),
    )
    parser.add_argument(
        "--state-dir", type=Path, default=Path("state"), metavar="PATH", help="nats-server's data folder (./state)"
    )
    parser.add_argument(
        "--no-demo", action="store_true", help="only nats-server and the server: no stand-ins, no client"
    )
    parser.add_argument(
        "--no-postgres", action="store_true", help="no PostgreSQL even when installed: fixed postgres_bound values"
    )
    parser.add_argument("--config", type=Path, metavar="PATH", help="a TOML file of server settings")
    add_settings_arguments(parser, ServerSettings, "server settings")
    return parser


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    pause_collector_for_start_up(argv)
    exit_if_version("mesh-provisioner-dev", sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    import anyio  # noqa: PLC0415 (after parsing: --help and --version load none of the loop)

    from mesh_dev.ownership import StateInUse  # noqa: PLC0415
    from provisioner.seat.settings import ServerSettings  # noqa: PLC0415
    from registry.contract import load_catalogue  # noqa: PLC0415
    from registry.edge import NatsContexts, given_flags, load_settings  # noqa: PLC0415
    from registry.errors import RegistryError  # noqa: PLC0415
    from registry.runtime import configure_logging, until_signalled  # noqa: PLC0415

    try:
        settings = load_settings(ServerSettings, given_flags(args, ServerSettings), args.config, os.environ)
        load_catalogue(settings.domains_file)  # a broken domains file is said before anything starts
        configure_logging(log_format=settings.log_format, level=settings.log_level)
        start_up_done()
        participants = () if args.no_demo else (_demo(args.state_dir / "demo", postgres=not args.no_postgres),)
        contexts = NatsContexts.of(os.environ)
        if contexts is None:
            log.warning("neither XDG_CONFIG_HOME nor HOME is set: no nats context can name the dev bus")
        body = partial(_run, state_dir=args.state_dir, settings=settings, participants=participants, contexts=contexts)
        return EXIT_OK if anyio.run(until_signalled, body) else EXIT_FAILED
    except StateInUse as err:
        print(f"mesh-provisioner-dev: {err}", file=sys.stderr)
        return EXIT_HELD
    except RegistryError as err:
        print(f"mesh-provisioner-dev: {err}", file=sys.stderr)
        return exit_code_of(err)


async def _run(
    stop: anyio.Event,
    *,
    state_dir: Path,
    settings: ServerSettings,
    participants: Sequence[Participant],
    contexts: NatsContexts | None,
) -> bool:
    """`True` once the loop stopped by itself: `until_signalled` says `None` when it was forced."""
    from mesh_dev.loop import run_dev  # noqa: PLC0415

    await run_dev(
        state_dir=state_dir, settings=settings, stop=stop, participants=participants, out=sys.stdout, contexts=contexts
    )
    return True


def _demo(state_dir: Path, *, postgres: bool = True) -> Participant:
    from mesh_dev.demo import run_demo  # noqa: PLC0415

    return partial(run_demo, state_dir=state_dir, postgres=postgres)


if __name__ == "__main__":
    sys.exit(main())
