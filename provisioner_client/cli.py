"""`mesh-provisioner-client`: the node client's command line.

    mesh-provisioner-client reconcile [--watch] [--json]
    mesh-provisioner-client status [--json]

Exit codes are the table of `registry.command_line`, shared by every program:

    0  done: every module applied (status: every module recorded as applied and its env file in
       place, as applied); in watch mode, stopped cleanly by SIGTERM or SIGINT
    1  a stop forced by a second signal, or by the reconcile outlasting --shutdown-timeout
    2  usage or settings error (no node given names where it looked; in watch mode also a
       metrics_listen address that cannot be listened on)
    3  NATS unreachable
    4  the bus refused an operation (credentials, a permission, a write it refused)
    6  another client holds this node (`reconcile` only; the message names its host, pid and
       since when): one client per node; `reconcile --watch` waits for the lease instead
    7  something is pending: a module waits for a value (or has one an env file cannot carry,
       such as a NUL), a manifest cannot be read, a module's env file cannot be written (a folder
       where it goes, say), or a change action failed; the reasons are logged and shown by
       `status`, which also exits 7 when an env file drifted from what was applied or is missing
       (or is not in the env folder used), while a module's last change action has not
       succeeded, and when the last reconcile's writes were refused (a full bucket: the modules
       whose needs or contributions were refused are pending, saying so; `status` names the
       bucket and the server's answer, also when applied refused the records and `reconcile`
       exited 4).
   12  a local failure the client cannot work around: the materialize folder, the ledger or the
       digest key cannot be read or written, or something other than a regular file stands where
       one of them goes (the message names the path and what is there)
  141  stdout's reader went away (`status --json | head -1`): ended quietly, as a Unix tool

Each command imports what it uses when it runs: `--help` and `--version` load no more than
`registry.command_line` and the settings.

Settings are read from the same file as the systemd unit's: `--config`, else
$MESH_PROVISIONER_CLIENT_CONFIG, else /etc/mesh-provisioner/client.toml when it exists.

The node's figures for Prometheus: a textfile in metrics_folder (both modes) and, in watch mode,
an endpoint at metrics_listen's /metrics (provisioner_client.metrics). A one-shot reconcile
serves no endpoint: given metrics_listen it says so in a warning and goes on (the settings file is
the unit's, and a figure is never worth a provisioning run).

The first SIGTERM or SIGINT lets the reconcile in progress finish, its change actions included
(for at most --shutdown-timeout); a second one stops at once.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from registry.command_line import (
    EXIT_CLOSED_PIPE,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_LOCAL,
    EXIT_OK,
    EXIT_PENDING,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Parser,
    exit_code_of,
    exit_codes_help,
    pause_collector_for_start_up,
    quiet_on_closed_pipe,
    start_up_done,
)

if TYPE_CHECKING:
    import anyio

    from provisioner_client.metrics import NodeMetrics
    from provisioner_client.reconcile import ClientPlan
    from provisioner_client.rollout import RolloutPlan
    from provisioner_client.settings import ClientSettings
    from registry.wire import Bus, BusOptions

PROG = "mesh-provisioner-client"
EXIT_CODES = (
    EXIT_OK,
    EXIT_FAILED,
    EXIT_USAGE,
    EXIT_UNREACHABLE,
    EXIT_REFUSED,
    EXIT_HELD,
    EXIT_PENDING,
    EXIT_LOCAL,
    EXIT_CLOSED_PIPE,
)
ENV_PREFIX = "MESH_PROVISIONER_CLIENT_"  # provisioner_client.settings', said here without loading them
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
DEFAULT_CONFIG = Path("/etc/mesh-provisioner/client.toml")
# What `status` is never told: how a watch paces itself and serves figures, how a rollout goes.
WATCH_AND_ROLLOUT = (
    "debounce",
    "refresh",
    "poll",
    "drift_poll",
    "backoff_max",
    "lease_ttl",
    "metrics_folder",
    "metrics_listen",
    "shutdown_timeout",
    "rollout_budget",
    "rollout_claim_ttl",
    "rollout_wait_limit",
    "rollout_unreachable",
)

_EPILOG = f"""\
examples:
  mesh-provisioner-client status                  (settings from {DEFAULT_CONFIG})
  mesh-provisioner-client reconcile --watch --config /etc/mesh-provisioner/client.toml
  mesh-provisioner-client reconcile --node node-1 --manifests /etc/mesh-provisioner/modules \\
      --materialize /run/mesh-provisioner/env --nats-url nats://10.0.0.1:4222
  {ENV_PREFIX}NODE=node-1 mesh-provisioner-client status --json

settings: flags, then environment {ENV_PREFIX}<SETTING> (e.g. {ENV_PREFIX}NODE), then the
settings file (NATS options in its [nats] table), then defaults. The settings file is the unit's:
--config, else ${CONFIG_ENV} (empty: none), else {DEFAULT_CONFIG} when it exists.
Durations take a unit: 90s, 10m, 1h. NATS: --nats-* flags, then NATS_* environment.
Every setting, with its default: mesh-provisioner-client COMMAND --help.

"""


_SUMMARIES = {
    "reconcile": "register needs, resolve, materialize, record",
    "status": "the client, then per module: state, file, action",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, both commands named but only that one's arguments
    built (and the settings loaded): what `main` parses with."""
    epilog = _EPILOG + "\n" + exit_codes_help(EXIT_CODES)
    parser = Parser(
        prog=PROG,
        version=True,
        description="Resolves this node's module placeholders through the mesh-provisioner registry "
        "and materializes them as env files.",
        epilog=epilog,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in _SUMMARIES.items():
        if only is None or only == name:
            _add_command(commands.add_parser(name, help=summary, epilog=epilog), name)
        else:
            commands.add_parser(name, help=summary, add_help=False)
    return parser


def _add_command(command: argparse.ArgumentParser, name: str) -> None:
    from provisioner_client.settings import ClientSettings  # noqa: PLC0415 (built when parsing, not at import)
    from registry.edge import BusSettings, add_settings_arguments  # noqa: PLC0415

    command.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help=f"the TOML settings file ([nats]: NATS options) (default ${CONFIG_ENV}, else "
        f"{DEFAULT_CONFIG} when it exists)",
    )
    leave_out = WATCH_AND_ROLLOUT if name == "status" else ()
    add_settings_arguments(command, ClientSettings, "client settings", leave_out=leave_out)
    add_settings_arguments(command, BusSettings, "NATS connection")
    if name == "reconcile":
        command.add_argument("--watch", action="store_true", help="keep reconciling on every change until stopped")
        command.add_argument("--json", action="store_true", help="print the report as JSON (not with --watch)")
    else:
        command.add_argument("--json", action="store_true", help="print JSON for machines")


def _chosen(words: Sequence[str]) -> str:
    """The command `words` name, else none (`--help`, `--version`): the first word not a flag."""
    first = next((word for word in words if not word.startswith("-")), "")
    return first if first in _SUMMARIES else ""


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    pause_collector_for_start_up(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(only=_chosen(words)).parse_args(words)
    from registry.errors import RegistryError  # noqa: PLC0415 (after parsing: --help loads nothing)

    try:
        return _main(args)
    except RegistryError as err:
        return _fail(exit_code_of(err), str(err))


def _main(args: argparse.Namespace) -> int:
    from functools import partial  # noqa: PLC0415

    import anyio  # noqa: PLC0415

    from provisioner_client.errors import ClientError, NodeHeld  # noqa: PLC0415
    from provisioner_client.materializing.action import inherited  # noqa: PLC0415
    from provisioner_client.settings import ClientSettings, node_of, settings_file  # noqa: PLC0415
    from registry.edge import BusSettings, given_flags, load_settings  # noqa: PLC0415
    from registry.runtime import configure_logging, until_signalled  # noqa: PLC0415

    if args.command == "reconcile" and args.watch and args.json:
        return _fail(EXIT_USAGE, "--json applies to a one-shot reconcile, not with --watch")
    config = settings_file(args.config, os.environ)
    settings = load_settings(ClientSettings, given_flags(args, ClientSettings), config, os.environ)
    bus = load_settings(BusSettings, given_flags(args, BusSettings), config, os.environ)
    node = node_of(settings, config)
    configure_logging(log_format=settings.log_format, level=_log_level(args.command, settings))
    start_up_done()
    options = bus.options(name=f"{PROG} {node}")
    try:
        command = partial(_command, args, settings, options, _Given(node, config), action_env=inherited(os.environ))
        code = anyio.run(partial(until_signalled, command, grace=settings.shutdown_timeout))
    except NodeHeld as err:
        return _fail(EXIT_HELD, str(err))
    except ClientError as err:
        return _fail(EXIT_LOCAL, str(err))
    return EXIT_FAILED if code is None else code


@dataclass(frozen=True)
class _Given:
    node: str
    config: Path | None


def _log_level(command: str, settings: ClientSettings) -> str:
    """`status` prints what it found: only warnings are logged unless a level was asked for."""
    return "WARNING" if command == "status" and "log_level" not in settings.model_fields_set else settings.log_level


def _fail(code: int, message: str) -> int:
    print(f"mesh-provisioner-client: {message}", file=sys.stderr)
    return code


async def _command(
    args: argparse.Namespace,
    settings: ClientSettings,
    options: BusOptions,
    given: _Given,
    stop: anyio.Event,
    *,
    action_env: dict[str, str],
) -> int:
    """One command; `stop` (the first signal) only ends watch mode: a one-shot command finishes."""
    if args.command == "status":
        return await _status(options, settings, given, as_json=args.json)
    import time  # noqa: PLC0415 (a reconcile's, which status never loads)

    from provisioner_client.reconcile import ClientPlan, reconcile  # noqa: PLC0415
    from provisioner_client.watch.holding import holding  # noqa: PLC0415
    from registry.wire import connect_within  # noqa: PLC0415

    plan = ClientPlan(
        given.node,
        settings.manifests,
        settings.materialize,
        settings.verb_timeout,
        lease_ttl=settings.lease_ttl,
        action_env=action_env,
        rollout=rollout_plan(settings),
    )
    if args.watch:
        return await _watch(options, settings, plan, stop)
    _manifests_found(settings)
    _no_endpoint_without_watch(settings)
    async with connect_within(options, options.request_timeout) as bus, holding(bus, plan.node, plan.lease_ttl):
        metrics = _metrics(settings, plan.node, bus)
        started = time.monotonic()
        with _stdout_to_stderr(when=args.json):
            report = await reconcile(bus, plan)
        if metrics is not None:
            metrics.reconciled(report, time.monotonic() - started)
    if args.json:
        from registry.runtime import json_text  # noqa: PLC0415

        print(json_text(report.document(), indent=2, to_terminal=sys.stdout.isatty()))
    else:
        print(report.summary())
    return EXIT_OK if report.ok else EXIT_PENDING


@contextlib.contextmanager
def _stdout_to_stderr(*, when: bool) -> Iterator[None]:
    """With `--json`, what change actions print goes to stderr: stdout is the report alone."""
    if not when:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, sys.stdout.fileno())
        os.close(saved)


def _metrics(settings: ClientSettings, node: str, bus: Bus) -> NodeMetrics | None:
    """The node's textfile of figures, when a folder is set for it."""
    from provisioner_client.metrics import NodeMetrics  # noqa: PLC0415

    folder = settings.metrics_folder
    return None if folder is None else NodeMetrics(node, folder, connected=lambda: bus.connected)


def _manifests_found(settings: ClientSettings) -> None:
    """A one-shot reconcile's folder of manifests, looked at before it connects: one that is not
    there is a setting to correct, said at once (never read as "no modules")."""
    from registry.edge import flag_of  # noqa: PLC0415
    from registry.errors import SettingsError  # noqa: PLC0415

    if not settings.manifests.is_dir():
        flag = flag_of(type(settings), "manifests")
        raise SettingsError(f"manifests ({flag})", f"{settings.manifests}: no such folder")


def _no_endpoint_without_watch(settings: ClientSettings) -> None:
    """A one-shot reconcile ends before anyone could scrape it: said, not refused, since the
    settings file it shares with the unit may well set metrics_listen for watch mode."""
    if settings.metrics_listen is not None:
        logging.getLogger(__name__).warning(
            "metrics_listen %s is served by reconcile --watch only: this one-shot reconcile serves no endpoint%s",
            settings.metrics_listen,
            "" if settings.metrics_folder is None else " (its figures go to metrics_folder's textfile)",
        )


def _watch_metrics(settings: ClientSettings, node: str) -> NodeMetrics | None:
    """The node's figures when a textfile folder, an endpoint or both are set for them."""
    from provisioner_client.metrics import NodeMetrics  # noqa: PLC0415

    if settings.metrics_folder is None and settings.metrics_listen is None:
        return None
    return NodeMetrics(node, settings.metrics_folder)


async def _status(options: BusOptions, settings: ClientSettings, given: _Given, *, as_json: bool) -> int:
    from provisioner_client.status import read_status  # noqa: PLC0415
    from registry.wire import connect_within  # noqa: PLC0415

    async with connect_within(options, options.request_timeout) as bus:
        status = await read_status(bus, given.node, settings.materialize, settings_file=given.config)
    if as_json:
        print(status.as_json(to_terminal=sys.stdout.isatty()))
    else:
        # rich is loaded by this command alone: a reconciling or watching client never needs it.
        from provisioner_client.status_view import print_status  # noqa: PLC0415

        print_status(status, sys.stdout)
    return EXIT_OK if status.ok else EXIT_PENDING


async def _watch(options: BusOptions, settings: ClientSettings, plan: ClientPlan, stop: anyio.Event) -> int:
    from functools import partial  # noqa: PLC0415

    import anyio  # noqa: PLC0415

    from provisioner_client.watch.watching import WatchTiming, watch  # noqa: PLC0415
    from registry.runtime import event  # noqa: PLC0415
    from registry.wire import connect  # noqa: PLC0415

    timing = WatchTiming(
        debounce=settings.debounce,
        refresh=settings.refresh,
        poll=settings.poll,
        backoff_max=settings.backoff_max,
        drift_poll=settings.drift_poll,
    )
    metrics = _watch_metrics(settings, plan.node)
    async with anyio.create_task_group() as tasks:
        # Served before connecting: a node that cannot reach its bus is scraped saying so.
        if metrics is not None and settings.metrics_listen is not None:
            await tasks.start(partial(metrics.serve, settings.metrics_listen))
        async with connect(options) as bus:
            if metrics is not None:
                metrics.track_connection(lambda: bus.connected)
            await watch(bus, plan, timing, stop=stop, metrics=metrics)
        tasks.cancel_scope.cancel()
    logging.getLogger(__name__).info("stopped watching", extra=event(node=plan.node))
    return EXIT_OK


def rollout_plan(settings: ClientSettings) -> RolloutPlan:
    """The rollout settings as the reconcile takes them."""
    from provisioner_client.rollout import Budget, RolloutPlan  # noqa: PLC0415

    budget = Budget.of(settings.rollout_budget) if settings.rollout_budget is not None else None
    return RolloutPlan(
        budget=budget,
        claim_ttl=settings.rollout_claim_ttl,
        wait_limit=settings.rollout_wait_limit,
        unreachable=settings.rollout_unreachable,
    )
