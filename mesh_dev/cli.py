"""`mesh-provisioner-dev`: a local nats-server, the server and the demo loop, for a first try.

Exit codes:
    0  stopped cleanly on SIGTERM or SIGINT
    1  a runtime failure, or a second SIGTERM/SIGINT that stopped it at once
    2  a usage or settings error (a flag, a MESH_PROVISIONER_* variable, the config or domains file)
  5  the state folder is in use by another process (named, with its pid): nothing was changed
  141  stdout's reader went away (`mesh-provisioner-dev | head`): stopped quietly, as a Unix tool
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import anyio

from mesh_dev.demo import run_demo
from mesh_dev.loop import Participant, run_dev
from mesh_dev.ownership import StateInUse
from provisioner.settings import ServerSettings
from registry.edge import NatsContexts, add_settings_arguments, given_flags, load_settings
from registry.errors import CatalogueError, RegistryError, SettingsError
from registry.runtime import configure_logging, quiet_on_closed_pipe, until_signalled

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_IN_USE = 0, 1, 2, 5
# The server's settings flags are many: a usage line naming them all would bury the one error.
USAGE = "mesh-provisioner-dev [--state-dir PATH] [--no-demo] [--no-postgres] [--config PATH] [server settings]"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mesh-provisioner-dev",
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
        + (__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(ServerSettings, given_flags(args, ServerSettings), args.config, os.environ)
        configure_logging(log_format=settings.log_format, level=settings.log_level)
        participants = () if args.no_demo else (_demo(args.state_dir / "demo", postgres=not args.no_postgres),)
        contexts = NatsContexts.of(os.environ)
        if contexts is None:
            log.warning("neither XDG_CONFIG_HOME nor HOME is set: no nats context can name the dev bus")
        body = partial(_run, state_dir=args.state_dir, settings=settings, participants=participants, contexts=contexts)
        return EXIT_OK if anyio.run(until_signalled, body) else EXIT_FAILURE
    except StateInUse as err:
        print(f"mesh-provisioner-dev: {err}", file=sys.stderr)
        return EXIT_IN_USE
    except RegistryError as err:
        print(f"mesh-provisioner-dev: {err}", file=sys.stderr)
        return EXIT_USAGE if isinstance(err, SettingsError | CatalogueError) else EXIT_FAILURE


async def _run(
    stop: anyio.Event,
    *,
    state_dir: Path,
    settings: ServerSettings,
    participants: Sequence[Participant],
    contexts: NatsContexts | None,
) -> bool:
    """`True` once the loop stopped by itself: `until_signalled` says `None` when it was forced."""
    await run_dev(
        state_dir=state_dir, settings=settings, stop=stop, participants=participants, out=sys.stdout, contexts=contexts
    )
    return True


def _demo(state_dir: Path, *, postgres: bool = True) -> Participant:
    return partial(run_demo, state_dir=state_dir, postgres=postgres)


if __name__ == "__main__":
    sys.exit(main())
