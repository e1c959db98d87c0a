"""`mesh-provisioner-client`: the node client's command line.

    mesh-provisioner-client reconcile [--watch]
    mesh-provisioner-client status [--json]

Exit codes:

    0  done: every module applied (status: every module recorded as applied)
    1  something is pending: a module waits for a value, a manifest cannot be read,
       or a change action failed; the reasons are logged and shown by `status`
    2  usage or settings error
    3  the bus could not be reached or refused an operation
    4  a local failure the client cannot work around (e.g. the materialize folder)

In watch mode SIGTERM or SIGINT stop it cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from provisioner_client.errors import ClientError, SettingsError
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.settings import ENV_PREFIX, ClientSettings, load_settings
from provisioner_client.status import read_status
from provisioner_client.watching import WatchTiming, watch
from registry.bus import Bus, BusError, BusOptions, connect
from registry.logs import configure_logging
from registry.settings import BusSettings, add_bus_arguments, bus_settings_from

log = logging.getLogger(__name__)

EXIT_OK, EXIT_PENDING, EXIT_USAGE, EXIT_BUS, EXIT_LOCAL = 0, 1, 2, 3, 4

_EPILOG = f"""\
examples:
  mesh-provisioner-client reconcile --node n1 --manifests /etc/mesh-provisioner/modules \\
      --materialize /run/mesh-provisioner/env --nats-url nats://10.0.0.1:4222
  mesh-provisioner-client reconcile --watch --config /etc/mesh-provisioner/client.toml
  {ENV_PREFIX}NODE=n1 mesh-provisioner-client status --json

settings: flags, then environment {ENV_PREFIX}<SETTING> (e.g. {ENV_PREFIX}NODE), then the
--config TOML file, then defaults. NATS: --nats-* flags, then NATS_* environment.

exit codes: 0 all applied; 1 something pending (a value, a manifest, a failed change action);
2 usage or settings error; 3 the bus unreachable or refusing; 4 a local failure.
"""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("client settings")
    group.add_argument("--config", type=Path, help="a TOML file of client settings")
    group.add_argument("--node", help="this node's name (required)")
    group.add_argument("--manifests", type=Path, help="folder of module manifests (*.json)")
    group.add_argument("--materialize", type=Path, help="folder the env files are written to")
    group.add_argument("--verb-timeout", metavar="SECONDS", help="how long a verb (the vault) may take to answer")
    group.add_argument("--log-format", choices=["text", "json"], help="log lines as text or JSON")
    group.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    add_bus_arguments(common)
    parser = argparse.ArgumentParser(
        prog="mesh-provisioner-client",
        description="Resolves this node's module placeholders through the mesh-provisioner registry "
        "and materializes them as env files.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("reconcile", parents=[common], help="register needs, resolve, materialize, record",
                              epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    run.add_argument("--watch", action="store_true", help="keep reconciling on every change until stopped")
    run.add_argument("--debounce", metavar="SECONDS", help="wait this long after a change before reconciling")
    run.add_argument("--refresh", metavar="SECONDS", help="re-ask verb-answered values (secrets) this often")
    run.add_argument("--poll", metavar="SECONDS", help="look at the manifests folder this often")
    status = commands.add_parser("status", parents=[common], help="per module: state, reasons, digests",
                                 epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    status.add_argument("--json", action="store_true", help="print JSON for machines")
    return parser


_SETTING_FLAGS = ("node", "manifests", "materialize", "verb_timeout", "log_format", "log_level",
                  "debounce", "refresh", "poll")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flags: dict[str, Any] = {name: getattr(args, name, None) for name in _SETTING_FLAGS}
    try:
        settings = load_settings(flags, args.config, os.environ)
        bus = bus_settings_from(args)
    except (SettingsError, ValidationError) as err:
        return _fail(EXIT_USAGE, str(err))
    configure_logging(json_lines=settings.log_format == "json", level=settings.log_level)
    try:
        return anyio.run(_command, args, settings, bus)
    except BusError as err:
        return _fail(EXIT_BUS, str(err))
    except ClientError as err:
        return _fail(EXIT_LOCAL, str(err))


def _fail(code: int, message: str) -> int:
    print(f"mesh-provisioner-client: {message}", file=sys.stderr)
    return code


async def _command(args: argparse.Namespace, settings: ClientSettings, bus_settings: BusSettings) -> int:
    options = bus_settings.options(name=f"mesh-provisioner-client {settings.node}")
    if args.command == "status":
        return await _status(options, settings, as_json=args.json)
    plan = ClientPlan(settings.node, settings.manifests, settings.materialize, settings.verb_timeout)
    if args.watch:
        return await _watch(options, settings, plan)
    async with _connect_once(options) as bus:
        report = await reconcile(bus, plan)
    print(report.summary())
    return EXIT_OK if report.ok else EXIT_PENDING


async def _status(options: BusOptions, settings: ClientSettings, *, as_json: bool) -> int:
    async with _connect_once(options) as bus:
        status = await read_status(bus, settings.node, settings.materialize)
    print(status.as_json() if as_json else status.as_text())
    return EXIT_OK if status.ok else EXIT_PENDING


@asynccontextmanager
async def _connect_once(options: BusOptions) -> AsyncIterator[Bus]:
    """A connection for a one-shot command: gives up after the NATS timeout instead of waiting forever."""
    deadline = options.request_timeout.total_seconds()
    async with AsyncExitStack() as stack:
        try:
            with anyio.fail_after(deadline):
                bus = await stack.enter_async_context(connect(options))
        except TimeoutError:
            servers = ", ".join(options.servers)
            raise BusError(f"connect to {servers}", f"no server answered within {deadline:g} s") from None
        yield bus


async def _watch(options: BusOptions, settings: ClientSettings, plan: ClientPlan) -> int:
    timing = WatchTiming(debounce=settings.debounce, refresh=settings.refresh, poll=settings.poll,
                         backoff_max=settings.backoff_max)  # fmt: skip
    async with connect(options) as bus, anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        await watch(bus, plan, timing)
    return EXIT_OK


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for received in signals:
            log.info("received %s; stopping", signal.Signals(received).name)
            scope.cancel()
            return
