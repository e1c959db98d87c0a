"""The `mesh-provisioner` command: `serve`, `dev` and `query`, a thin layer over callable functions.

Exit codes:
    0  done; `serve` and `dev` also after a clean stop on SIGTERM or SIGINT
    1  a runtime failure: NATS unreachable, a bucket or the registry could not be written
    2  a usage or settings error (a flag, a MESH_PROVISIONER_* variable, the config or domains file)
    3  `query`: the verb answered with an error
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from provisioner.dev import Participant, run_dev
from provisioner.errors import ProvisionerError, SettingsError, VerbError
from provisioner.query import ask
from provisioner.server import run_server, until_signalled
from provisioner.settings import ENV_PREFIX, describe_validation, load_server_settings
from registry import buckets
from registry.bus import BusError, BusOptions, connect
from registry.errors import CatalogueError, RegistryError
from registry.logs import configure_logging
from registry.settings import add_bus_arguments, bus_settings_from

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_VERB_ERROR = 0, 1, 2, 3

# Server flags: settings field -> (flag, type, help). Only flags given on the command line are passed.
_SERVER_FLAGS: dict[str, tuple[str, Any, str]] = {
    "domains_file": ("--domains-file", Path, "a TOML file adding or overriding domains of the catalogue"),
    "compile_interval": ("--compile-interval", float, "seconds between registry compiles (default 3600)"),
    "bucket_replicas": ("--bucket-replicas", int, "replicas of buckets created by the server (default 1)"),
    "bucket_storage": ("--bucket-storage", str, "storage of buckets created by the server: file or memory"),
    "bucket_history": ("--bucket-history", int, "history kept per key in created buckets (default 1)"),
    "max_concurrent_requests": ("--max-concurrent-requests", int, "requests answered at once (default 32)"),
    "max_waiting_requests": ("--max-waiting-requests", int, "requests waiting beyond those, then 503 (1000)"),
    "shutdown_timeout": ("--shutdown-timeout", float, "seconds to finish requests in flight on stop (10)"),
    "cursor_ttl": ("--cursor-ttl", float, "seconds a paged listing's cursor stays valid (default 120)"),
    "max_cursors": ("--max-cursors", int, "paged listings kept at once (default 32)"),
    "cursor_cache_bytes": ("--cursor-cache-bytes", int, "bytes of pages kept in all (default 134217728, 128 MiB)"),
}
_DURATIONS = {"compile_interval", "shutdown_timeout", "cursor_ttl"}

_EPILOG_SERVE = f"""\
settings: flags over {ENV_PREFIX}<FIELD> environment variables (e.g. {ENV_PREFIX}COMPILE_INTERVAL=600)
over the --config TOML file (keys named as the fields: compile_interval = 600) over defaults.
NATS: --nats-* flags over NATS_URL, NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD, ...

examples:
  mesh-provisioner serve --nats-url nats://nats-1:4222,nats://nats-2:4222 --nats-creds seat.creds
  NATS_URL=nats://127.0.0.1:4222 mesh-provisioner serve --domains-file deploy/domains.toml
  mesh-provisioner serve --config /etc/mesh-provisioner/server.toml --log-json
"""

_EPILOG_QUERY = """\
examples:
  mesh-provisioner query                           the registry: one entry per kind
  mesh-provisioner query needs --node n1           what node n1's modules need
  mesh-provisioner query applied --module web      where module web is applied
  mesh-provisioner query collect --collection shell:zsh:normal
"""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    logging_group = common.add_argument_group("logging")
    logging_group.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    logging_group.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="default INFO; WARNING for query",
    )

    parser = argparse.ArgumentParser(
        prog="mesh-provisioner",
        description="The mesh-provisioner server: keeps the registry of which domain answers which kind of "
        f"placeholder in bucket {buckets.REGISTRY.name}, and answers the read-only verb {buckets.VERB_SUBJECT}.",
        epilog="start with `mesh-provisioner dev`; see `mesh-provisioner <command> --help`.\n\n"
        + (__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{serve,dev,query}")

    serve = commands.add_parser(
        "serve", parents=[common], help="run the server against a NATS deployment",
        description="Connect to NATS (reconnecting forever), make sure the four buckets exist, compile the "
        "registry now and every interval, and serve the verb until SIGTERM or SIGINT.",
        epilog=_EPILOG_SERVE, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    serve.add_argument("--config", type=Path, metavar="PATH", help="a TOML file of server settings")
    _add_server_arguments(serve)
    add_bus_arguments(serve)

    dev = commands.add_parser(
        "dev", parents=[common], help="run a local nats-server, the server and the demo loop, for a first try",
        description="Start a local nats-server with JetStream on loopback (data under --state-dir), then the "
        "server against it, then the demo: stand-ins for the other domains (a config bucket, a vault verb, a "
        "postgres provider's bound bucket, the controller's placement mirror) and a node client that "
        "materializes deploy/examples/ into --state-dir/demo/env and keeps watching. Prints how to query it. "
        "Ctrl-C stops everything.",
        epilog="examples:\n  mesh-provisioner dev --state-dir ./state\n  mesh-provisioner dev --no-demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    dev.add_argument(
        "--state-dir", type=Path, default=Path("state"), metavar="PATH", help="nats-server's data folder (./state)"
    )
    dev.add_argument("--no-demo", action="store_true", help="only nats-server and the server: no stand-ins, no client")
    dev.add_argument("--config", type=Path, metavar="PATH", help="a TOML file of server settings")
    _add_server_arguments(dev)

    query = commands.add_parser(
        "query", parents=[common], help="ask the verb and print the whole answer as JSON",
        description="Ask the verb, follow every page, and print the merged answer as JSON "
        "(entries, malformed keys and totals).",
        epilog=_EPILOG_QUERY, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    query.add_argument("what", nargs="?", default="registry", choices=("registry", "needs", "applied", "collect"))
    query.add_argument("--node", help="narrow to one node (needs, applied, collect)")
    query.add_argument("--module", help="narrow to one module; for collect, the contributor")
    query.add_argument("--collection", help="narrow to one collection (collect)")
    query.add_argument("--compact", action="store_true", help="print JSON on one line")
    query.add_argument(
        "--wait", type=float, default=30.0, metavar="SECONDS",
        help="how long to wait to connect and for each page (default 30; a large listing's first page is slowest)",
    )  # fmt: skip
    add_bus_arguments(query)
    return parser


def _add_server_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("server settings")
    for field, (flag, kind, help_text) in _SERVER_FLAGS.items():
        choices = ("file", "memory") if field == "bucket_storage" else None
        metavar = None if choices else {Path: "PATH", float: "SECONDS", int: "N"}[kind]
        group.add_argument(flag, dest=field, type=kind, default=None, choices=choices, metavar=metavar, help=help_text)


def _server_flags(args: argparse.Namespace) -> dict[str, Any]:
    given = {field: getattr(args, field) for field in _SERVER_FLAGS if getattr(args, field) is not None}
    return {f: timedelta(seconds=v) if f in _DURATIONS else v for f, v in given.items()}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    default_level = "WARNING" if args.command == "query" else "INFO"
    configure_logging(json_lines=args.log_json, level=args.log_level or default_level)
    try:
        return anyio.run(partial(_COMMANDS[args.command], args))
    except Exception as err:
        ours = _ours(err)
        if ours is None:
            raise
        print(f"mesh-provisioner {args.command}: {ours}", file=sys.stderr)
        return _exit_code(ours)


async def _serve(args: argparse.Namespace) -> int:
    settings = load_server_settings(_server_flags(args), args.config, environ=os.environ)
    bus_options = _bus_options(args, buckets.SEAT)
    await until_signalled(lambda stop: run_server(bus_options=bus_options, settings=settings, stop=stop))
    return EXIT_OK


async def _dev(args: argparse.Namespace) -> int:
    settings = load_server_settings(_server_flags(args), args.config, environ=os.environ)
    participants = () if args.no_demo else (_demo(args.state_dir / "demo"),)
    await until_signalled(
        lambda stop: run_dev(
            state_dir=args.state_dir, settings=settings, stop=stop, participants=participants, out=sys.stdout
        )
    )
    return EXIT_OK


def _demo(state_dir: Path) -> Participant:
    # Only the demo joins the server to the node client: `serve` never imports it.
    from provisioner_client.demo import run_demo  # noqa: PLC0415

    return partial(run_demo, state_dir=state_dir)


async def _query(args: argparse.Namespace) -> int:
    request = {"what": args.what} | {f: getattr(args, f) for f in ("node", "module", "collection") if getattr(args, f)}
    options = _bus_options(args, f"{buckets.SEAT}-query")
    async with AsyncExitStack() as resources:
        try:
            with anyio.fail_after(args.wait):  # nats-py would retry a first connect forever
                bus = await resources.enter_async_context(connect(options))
        except TimeoutError:
            servers = ", ".join(options.servers)
            raise BusError(f"connect to {servers}", f"no connection within {args.wait:g} s") from None
        answer = await ask(bus, request, reply_wait=timedelta(seconds=args.wait))
    print(json.dumps(answer, indent=None if args.compact else 2, ensure_ascii=False))
    return EXIT_OK


def _bus_options(args: argparse.Namespace, name: str) -> BusOptions:
    try:
        return bus_settings_from(args).options(name)
    except ValidationError as err:
        raise SettingsError("NATS settings (--nats-* flags, NATS_* environment)", describe_validation(err)) from None


_COMMANDS = {"serve": _serve, "dev": _dev, "query": _query}


def _ours(err: BaseException) -> ProvisionerError | RegistryError | None:
    """Our error inside `err`, unwrapping the exception groups task groups raise."""
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    return err if isinstance(err, ProvisionerError | RegistryError) else None


def _exit_code(err: ProvisionerError | RegistryError) -> int:
    if isinstance(err, VerbError):
        return EXIT_VERB_ERROR
    if isinstance(err, SettingsError | CatalogueError):
        return EXIT_USAGE
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
