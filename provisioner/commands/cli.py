"""The `mesh-provisioner` command: `serve`, `query`, `top`, `remove-node`, `grants` and `rollout`, a
thin layer over callable functions.

Exit codes:
    0  done; `serve` also after a clean stop on SIGTERM or SIGINT; `remove-node` also when there
       was nothing to remove
    1  a runtime failure: NATS unreachable, a bucket or the registry could not be written, a key
       that could not be removed, a second SIGTERM/SIGINT that stopped `serve` at once,
       cutting requests in flight, `serve`'s connection closed for good by nats-server (an
       authorization violation after a reload, say: a supervisor should restart it), or
       `query`, `top --once`: no answer from the seat within --wait; `top`'s connection closed for good
    2  a usage or settings error (a flag, a MESH_PROVISIONER_* variable, the config, domains or
       grants file, a seed --keys lacks); `remove-node` not confirmed (nothing was removed)
    3  `query`, `top --once`: the verb answered with an error (other than 410 and 503, which are
       retried)
    4  `query`: answered, with malformed keys (listed and marked in every output)
    5  `query nodes`, `top --once`: a node shown is stale, gone or over quota (before 4: the fleet first);
       `remove-node`: the node's client holds its lease (nothing was removed; the message names it)
    6  `grants --check`: something would change (printed)
    7  `rollout status`: a rollout shown is held; `rollout pause`: the rollout is aborted (left so)
  141  stdout's reader went away (`| head`): ended quietly
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread

from provisioner.commands.grants_command import add_grants_command, grants_main
from provisioner.commands.removal import (
    AccountRemoval,
    Footprint,
    LiveLease,
    NodeStillHeld,
    delete_node_account,
    footprint,
    remove_footprint,
)
from provisioner.commands.rollout_command import add_rollout_command, rollout_main
from provisioner.errors import ProvisionerError
from provisioner.seat.server import run_server
from provisioner.settings import (
    ENV_PREFIX,
    CommandLogSettings,
    QueryArguments,
    RemoveNodeArguments,
    ServerSettings,
    TopArguments,
)
from registry.contract import MergedAnswer, buckets
from registry.edge import BusSettings, LogSettings, add_settings_arguments, given_flags, load_settings
from registry.errors import CatalogueError, RegistryError, ServiceError, SettingsError, sole_exception
from registry.runtime import configure_logging, quiet_on_closed_pipe, terminal_safe, until_signalled
from registry.wire import BusOptions, answer_patiently, connect_within

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_VERB_ERROR, EXIT_MALFORMED, EXIT_STALE = 0, 1, 2, 3, 4, 5

_EPILOG_SERVE = f"""\
settings: flags over {ENV_PREFIX}<FIELD> environment variables (e.g. {ENV_PREFIX}COMPILE_INTERVAL=600)
over the --config TOML file (keys named as the fields: compile_interval = 600; NATS options in its
[nats] table: url = "nats://...") over defaults. Durations are seconds or ISO 8601 (PT10M).
NATS: --nats-* flags over NATS_URL, NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD, ...

SIGTERM or SIGINT: stop taking requests, answer those in flight (--shutdown-timeout), exit 0;
a second one stops at once (exit 1).

examples:
  mesh-provisioner serve --nats-url nats://nats-1:4222,nats://nats-2:4222 --nats-creds seat.creds
  NATS_URL=nats://127.0.0.1:4222 mesh-provisioner serve --domains-file deploy/domains.toml
  mesh-provisioner serve --config /etc/mesh-provisioner/server.toml --log-format json
  mesh-provisioner serve --site home --sites-file sites.json --nats-nkey seat-home.nk --grants-file grants.json

At a site (--site, with the sites.json `grants --mesh` wrote): run on the site's own nats-server with
the site's seat credentials (seat-SITE.nk, or seat-SITE.creds with --jwt) and the hub seat's
providers and domains file. It makes and checks the site's copies of the hub's buckets (mirrors and
per-node sources through the hub's JetStream domain) and answers the site's nodes from them, also
while the link to the hub is down; it compiles nothing, runs no quota guard, writes nothing at the hub.
"""

_EPILOG_QUERY = """\
--node, --module and --collection are asked of the verb (nats-server narrows the listing); --kind,
--name and --state are then applied here, to the entries answered. Malformed keys under the
narrowing are always listed, marked, and make the exit code 4. A table shows what nodes wrote as
text: each control, bidirectional or other format character as an escape (\\x1b, \\u202e), a
backslash as two. --json and --jsonl are ASCII on a terminal (\\u escapes), UTF-8 as written elsewhere.

examples:
  mesh-provisioner query                           the registry: one entry per kind
  mesh-provisioner query needs --node n1           what node n1's modules need
  mesh-provisioner query needs --kind secret --name db-password    who needs secret:db-password
  mesh-provisioner query applied --module web      where module web is applied, with which digest
  mesh-provisioner query applied --state pending   what is pending, and the first reason why
  mesh-provisioner query applied --state pending --by-reason    each reason: how many modules, which
  mesh-provisioner query collect --collection shell:zsh:normal
  mesh-provisioner query needs --jsonl | jq -r .node
  mesh-provisioner query nodes                     each node: healthy, stale, gone or over quota, and how that is known
  mesh-provisioner query nodes --state stale --stale-after 600    the nodes silent for 10 min (exit 5 if any)

query nodes: a node's sign of life is its client's lease, renewed every third of its ttl while the
client watches and released when a one-shot reconcile ends or the client stops; the server stamps
each renewal and release. healthy: renewed within --stale-after and within the lease's ttl (+5 s),
or released within --stale-after; stale: neither; gone: no lease record at all. APPLIED and PENDING
count the node's applied records, CHANGED is the latest of their changes. Exit 5 when a node shown
is stale, gone or over quota (after --state), so `query nodes` can be a monitoring check.
"""

_EPILOG_TOP = """Asks the verb what=nodes every --interval seconds and shows the fleet: a summary line (nodes healthy,
stale, gone and over quota; modules applied and pending) over the nodes, those first (see `query nodes
--help` for the verdicts). On a terminal the view is redrawn in place, with a progress bar while a
long answer is read; elsewhere each frame is printed after the last. Ctrl-C (SIGINT) or SIGTERM ends
it with exit 0. A seat that does not answer is said in the frame and asked again at the next tick;
a connection nats-server closed for good ends it with exit 1.

examples:
  mesh-provisioner top
  mesh-provisioner top --stale-after 60 --interval 5
  mesh-provisioner top --once                      one frame; exit 5 if a node is stale, gone or over quota
"""

_EPILOG_REMOVE = """\
Connect as `serve` does, with the seat's credentials in the data account. The node's keys are
those under its name escaped as a key token (node a.b: a=2Eb.>, never a.>); each gets a delete
marker at the revision it was listed at, and its lease (node.<node>) a delete marker saying it
was removed, so `query nodes` no longer lists it. Stop the node's client first: while it holds its
lease nothing is removed (exit 5, naming its host, pid and since when) unless --force; a key it
writes again meanwhile is left alone and reported (exit 1).

With --jwt (decentralized auth) the node's account is deleted first, as the system account's user
(KEYS/sys.creds), signed by the operator (KEYS/operator.nk): its connections are closed and its
credential refused. With static accounts, issue the grants without the node and reload
nats-server: its key is then refused. Either way, issue the grants without it afterwards.

examples:
  mesh-provisioner remove-node n1                  list what n1 holds and ask before removing it
  mesh-provisioner remove-node n1 --yes --nats-nkey seat.nk
  mesh-provisioner remove-node n1 --yes --nats-creds mesh-keys/seat.creds --jwt --keys mesh-keys
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mesh-provisioner",
        description="The mesh-provisioner server: keeps the registry of which domain answers which kind of "
        f"placeholder in bucket {buckets.REGISTRY.name}, and answers the read-only verb {buckets.VERB_SUBJECT}.",
        epilog="for a first try on one machine, run `mesh-provisioner-dev`; see `mesh-provisioner <command> "
        "--help`.\n\n" + (__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{serve,query,top,remove-node,grants,rollout}"
    )
    _add_serve(commands)
    _add_query(commands)
    _add_top(commands)
    _add_remove_node(commands)
    add_grants_command(commands)
    add_rollout_command(commands, _add_client_settings)
    return parser


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the server against a NATS deployment",
        description="Connect to NATS (reconnecting forever), make sure the four buckets exist, compile the "
        "registry now and every interval, and serve the verb until SIGTERM or SIGINT. With --site: the seat of "
        "a site, serving the verb from the site's copies of the hub's buckets, which it makes.",
        epilog=_EPILOG_SERVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--config", type=Path, metavar="PATH", help="a TOML file of settings ([nats]: NATS options)")
    add_settings_arguments(serve, ServerSettings, "server settings")
    add_settings_arguments(serve, BusSettings, "NATS connection")


def _add_query(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    query = commands.add_parser(
        "query",
        help="ask the verb and print the whole answer as a table, JSON or JSON lines",
        description="Ask the verb, follow every page, and print the merged answer: a table (plain "
        "columns when stdout is not a terminal), or JSON with --json, or JSON lines with --jsonl.",
        epilog=_EPILOG_QUERY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings_arguments(query, QueryArguments, "what to ask and how to print it")
    _add_client_settings(query)


def _add_top(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = commands.add_parser(
        "top",
        help="a live view of the fleet: nodes healthy, stale, gone or over quota, modules applied and pending",
        description="Show the fleet's nodes and their verdicts, refreshed every --interval seconds, until Ctrl-C.",
        epilog=_EPILOG_TOP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings_arguments(top, TopArguments, "what to show and how often")
    _add_client_settings(top)


def _add_client_settings(command: argparse.ArgumentParser) -> None:
    """The settings of a command that connects as a client of the seat: the config, logging, NATS."""
    command.add_argument("--config", type=Path, metavar="PATH", help="a TOML file whose [nats] table has NATS options")
    add_settings_arguments(command, CommandLogSettings, "logging")
    add_settings_arguments(command, BusSettings, "NATS connection")


def _add_remove_node(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    remove = commands.add_parser(
        "remove-node",
        help="remove a node: its keys of needs, applied and collect, its lease, with --jwt its account",
        description="List every key of NODE in the needs, applied and collect buckets and its lease, remove "
        "each (with --jwt its account first), and print what was removed.",
        epilog=_EPILOG_REMOVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings_arguments(remove, RemoveNodeArguments, "what to remove")
    _add_client_settings(remove)


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except Exception as err:
        ours = _ours(err)
        if ours is None:
            raise
        print(f"mesh-provisioner {args.command}: {terminal_safe(str(ours))}", file=sys.stderr)
        return _exit_code(ours)


def _serve(args: argparse.Namespace) -> int:
    settings = load_settings(ServerSettings, given_flags(args, ServerSettings), args.config, os.environ)
    bus_options = _bus_options(args, buckets.SEAT)
    _configure_logging(settings)
    finished = anyio.run(until_signalled, partial(_run_server, bus_options, settings))
    return EXIT_OK if finished else EXIT_FAILURE


async def _run_server(bus_options: BusOptions, settings: ServerSettings, stop: anyio.Event) -> bool:
    """`True` once the server stopped by itself: `until_signalled` says `None` when it was forced."""
    await run_server(bus_options=bus_options, settings=settings, stop=stop)
    return True


def _query(args: argparse.Namespace) -> int:
    # The tables (rich) are loaded by the commands that print them, never by `serve`.
    from provisioner.commands import tables  # noqa: PLC0415

    query = load_settings(QueryArguments, given_flags(args, QueryArguments), None, os.environ)
    options = _bus_options(args, f"{buckets.SEAT}-query")
    _configure_logging(_log_settings(args))
    answer = anyio.run(partial(_ask, options, query.request(), wait=query.wait.total_seconds()))
    answer = tables.narrowed(answer, kind=query.kind, name=query.name, state=query.state)
    output = tables.Output(as_json=query.as_json, as_jsonl=query.jsonl, compact=query.compact)
    if query.by_reason:
        tables.print_reasons(answer, output, sys.stdout)
    else:
        tables.print_query_answer(answer, output, sys.stdout)
    if query.what == "nodes" and tables.unhealthy(answer):
        return EXIT_STALE
    return EXIT_MALFORMED if answer.malformed else EXIT_OK


async def _ask(options: BusOptions, request: Mapping[str, object], *, wait: float) -> MergedAnswer:
    async with connect_within(options, timedelta(seconds=wait)) as bus:
        return await answer_patiently(bus, request, within=timedelta(seconds=wait))


def _top(args: argparse.Namespace) -> int:
    from provisioner.commands import tables, top  # noqa: PLC0415 (rich, as for `query`)

    options = top.TopOptions.of(load_settings(TopArguments, given_flags(args, TopArguments), None, os.environ))
    bus_options = _bus_options(args, f"{buckets.SEAT}-top")
    _configure_logging(_log_settings(args))
    last = anyio.run(until_signalled, partial(top.watch_fleet, bus_options, options))
    return EXIT_STALE if options.once and last is not None and tables.unhealthy(last) else EXIT_OK


def _remove_node(args: argparse.Namespace) -> int:
    removal = load_settings(RemoveNodeArguments, given_flags(args, RemoveNodeArguments), None, os.environ)
    options = _bus_options(args, f"{buckets.SEAT}-remove-node")
    _configure_logging(_log_settings(args))
    try:
        return anyio.run(partial(_remove, options, removal))
    except NodeStillHeld as held:
        print(f"mesh-provisioner remove-node: {terminal_safe(str(held))}", file=sys.stderr)
        return EXIT_STALE


async def _remove(options: BusOptions, removal: RemoveNodeArguments) -> int:
    """Lists what the node holds, refuses while its client holds its lease (unless --force), asks
    unless --yes, deletes its account first (--jwt), then its keys and lease; prints what went."""
    account = AccountRemoval.of(removal.keys, removal.node) if removal.keys is not None else None
    async with connect_within(options, removal.wait) as bus:
        found = await footprint(bus, removal.node)
        live = found.refuse_if_held(force=removal.force)
        if found.empty and account is None:
            print(
                f"nothing to remove: node {removal.node!r} has no key in the needs, applied or collect buckets "
                "and no lease"
            )
            return EXIT_OK
        if not removal.yes and not await anyio.to_thread.run_sync(_confirm, found, account):
            print("nothing removed; pass --yes to remove without asking", file=sys.stderr)
            return EXIT_USAGE
        if account is not None:
            await _delete_account(options, account)
            # The node can write nothing now: read again what it holds, so that a key or lease its
            # client wrote while we asked goes too, and no renewal can race the lease's removal.
            found = await footprint(bus, removal.node)
        removed = await remove_footprint(bus, found, force=removal.force or account is not None)
    _print_removed(removal.node, removed, live if account is None else None)
    return EXIT_OK


async def _delete_account(options: BusOptions, account: AccountRemoval) -> None:
    system = account.options(options)
    async with connect_within(system, system.connect_timeout) as bus:
        answer = await delete_node_account(bus, account)
    print(
        f"deleted the account of node {account.node!r} ({terminal_safe(answer)}): its connections are closed "
        "and its credential refused"
    )


def _print_removed(node: str, removed: dict[str, list[str]], forced: LiveLease | None) -> None:
    for bucket, keys in removed.items():
        print("\n".join(f"removed {bucket} {terminal_safe(key)}" for key in keys))
    count = sum(len(keys) for bucket, keys in removed.items() if bucket != buckets.LEASES.name)
    lease = " and its lease" if buckets.LEASES.name in removed else ""
    print(f"removed {count} keys of node {node!r}{lease}")
    if forced is not None:
        print(
            f"mesh-provisioner remove-node: removed while its client held its lease ({forced.describe()}): "
            "unless its account is revoked (the grants issued without it, and nats-server reloaded) it takes "
            "the lease again and writes its keys back",
            file=sys.stderr,
        )


def _confirm(found: Footprint, account: AccountRemoval | None) -> bool:
    """Shows what would be removed and asks on a terminal; anywhere else, `--yes` is needed."""
    for bucket, items in found.keys.items():
        keys = sorted(item.key for item in items)
        print("\n".join(f"{bucket.name} {terminal_safe(key)}" for key in keys))
    if found.lease_left is not None:
        print(f"{buckets.LEASES.name} {terminal_safe(found.lease_left.key)}")
    if account is not None:
        print(f"the account of node {found.node!r}: {account.account}")
    count = sum(len(items) for items in found.keys.values())
    if not sys.stdin.isatty():
        return False
    return input(f"remove these {count} keys of node {found.node!r}? [y/N] ").strip().lower() in ("y", "yes")


def _bus_options(args: argparse.Namespace, name: str) -> BusOptions:
    return load_settings(BusSettings, given_flags(args, BusSettings), args.config, os.environ).options(name)


def _grants(args: argparse.Namespace) -> int:
    return grants_main(args, os.environ)


def _rollout(args: argparse.Namespace) -> int:
    options = _bus_options(args, f"{buckets.SEAT}-rollout")
    _configure_logging(_log_settings(args))
    return rollout_main(args, options)


def _log_settings(args: argparse.Namespace) -> CommandLogSettings:
    return load_settings(CommandLogSettings, given_flags(args, CommandLogSettings), None, os.environ)


def _configure_logging(settings: LogSettings) -> None:
    configure_logging(log_format=settings.log_format, level=settings.log_level)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    "query": _query,
    "top": _top,
    "remove-node": _remove_node,
    "grants": _grants,
    "rollout": _rollout,
}


def _ours(err: BaseException) -> ProvisionerError | RegistryError | None:
    """Our error inside `err`, unwrapping the exception groups task groups raise."""
    err = sole_exception(err) if isinstance(err, BaseExceptionGroup) else err
    return err if isinstance(err, ProvisionerError | RegistryError) else None


def _exit_code(err: ProvisionerError | RegistryError) -> int:
    if isinstance(err, ServiceError):
        return EXIT_VERB_ERROR
    if isinstance(err, SettingsError | CatalogueError):
        return EXIT_USAGE
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
