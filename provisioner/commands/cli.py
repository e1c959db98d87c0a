"""The `mesh-provisioner` command: `serve`, `query`, `top`, `remove-node`, `grants` and `rollout`, a
thin layer over callable functions.

Each command imports what it uses when it runs: `--help`, `--version` and a command's own `--help`
load no more than `registry.command_line` and that command's settings, and `query` never loads the
seat. Exit codes are the table of `registry.command_line`, shared by every program:
    0  done; `serve` also after a clean stop on SIGTERM or SIGINT; `remove-node` also when there
       was nothing to remove
    1  `serve`: stopped at once by a second SIGTERM/SIGINT, cutting requests in flight; a key
       `remove-node` could not remove
    2  usage: a flag, a MESH_PROVISIONER_* variable, the config, domains or grants file, a seed
       --keys lacks; `remove-node` not confirmed (nothing was removed)
    3  NATS unreachable
    4  the bus refused or failed an operation: credentials, a permission, a bucket or the registry
       not written, `query` or `top --once` with no answer within --wait, a connection closed for
       good by nats-server (an authorization violation after a reload, say: a supervisor should
       restart `serve`)
    5  `query`, `top --once`: the verb answered with an error (other than 410 and 503, which are
       retried)
    6  `remove-node`: the node's client holds its lease (nothing was removed; the message names it)
    8  `grants --check`: something would change (printed)
    9  `query nodes`, `top --once`: a node shown is stale, gone or over quota (before 10: the fleet first)
   10  `query`: answered, with malformed keys (listed and marked in every output)
   11  `rollout status`: a rollout shown is held; `rollout pause`: the rollout is aborted (left so)
  141  stdout's reader went away (`| head`): ended quietly
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from registry.command_line import (
    EXIT_CLOSED_PIPE,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_MALFORMED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_ROLLOUT_HELD,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    EXIT_VERB_ERROR,
    EXIT_WOULD_CHANGE,
    Parser,
    exit_code_of,
    exit_codes_help,
    pause_collector_for_start_up,
    quiet_on_closed_pipe,
    start_up_done,
)

if TYPE_CHECKING:
    import anyio

    from provisioner.commands.removal import AccountRemoval, Footprint, LiveLease
    from provisioner.seat.settings import ServerSettings
    from provisioner.settings import RemoveNodeArguments
    from registry.contract import MergedAnswer
    from registry.edge import LogSettings
    from registry.wire import BusOptions

PROG = "mesh-provisioner"
EXIT_CODES = (
    EXIT_OK,
    EXIT_FAILED,
    EXIT_USAGE,
    EXIT_UNREACHABLE,
    EXIT_REFUSED,
    EXIT_VERB_ERROR,
    EXIT_HELD,
    EXIT_WOULD_CHANGE,
    EXIT_UNHEALTHY,
    EXIT_MALFORMED,
    EXIT_ROLLOUT_HELD,
    EXIT_CLOSED_PIPE,
)
ENV_PREFIX = "MESH_PROVISIONER_"  # provisioner.settings.ENV_PREFIX, said here without loading the settings

_EPILOG_SERVE = f"""\
settings: flags over {ENV_PREFIX}<FIELD> environment variables (e.g. {ENV_PREFIX}COMPILE_INTERVAL=10m)
over the --config TOML file (keys named as the fields: compile_interval = "10m"; NATS options in its
[nats] table: url = "nats://...") over defaults. Durations take a unit: 90s, 10m, 1h.
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
  mesh-provisioner query nodes --state stale --stale-after 10m   the nodes silent for 10 min (exit 9 if any)

query nodes: a node's sign of life is its client's lease, renewed every third of its ttl while the
client watches and released when a one-shot reconcile ends or the client stops; the server stamps
each renewal and release. healthy: renewed within --stale-after and within the lease's ttl (+5 s),
or released within --stale-after; stale: neither; gone: no lease record at all. APPLIED and PENDING
count the node's applied records, CHANGED is the latest of their changes. Exit 9 when a node shown
is stale, gone or over quota (after --state), so `query nodes` can be a monitoring check.
"""

_EPILOG_TOP = """Asks the verb what=nodes every --interval seconds and shows the fleet: a summary line (nodes healthy,
stale, gone and over quota; modules applied and pending) over the nodes, those first (see `query nodes
--help` for the verdicts). On a terminal the view is redrawn in place, with a progress bar while a
long answer is read; elsewhere each frame is printed after the last. Ctrl-C (SIGINT) or SIGTERM ends
it with exit 0. A seat that does not answer is said in the frame and asked again at the next tick;
a connection nats-server closed for good ends it with exit 4.

examples:
  mesh-provisioner top
  mesh-provisioner top --stale-after 60 --interval 5
  mesh-provisioner top --once                      one frame; exit 9 if a node is stale, gone or over quota
"""

_EPILOG_REMOVE = """\
Connect as `serve` does, with the seat's credentials in the data account. The node's keys are
those under its name escaped as a key token (node a.b: a=2Eb.>, never a.>); each gets a delete
marker at the revision it was listed at, and its lease (node.<node>) a delete marker saying it
was removed, so `query nodes` no longer lists it. Stop the node's client first: while it holds its
lease nothing is removed (exit 6, naming its host, pid and since when) unless --force; a key it
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


_SUMMARIES = {
    "serve": "run the server against a NATS deployment",
    "query": "ask the verb and print the whole answer as a table, JSON or JSON lines",
    "top": "a live view of the fleet: nodes healthy, stale, gone or over quota, modules applied and pending",
    "remove-node": "remove a node: its keys of needs, applied and collect, its lease, with --jwt its account",
    "grants": "write every party's NATS account, imports and key (for the controller); --check, --push",
    "rollout": "see, pause, resume or abort a module's rollout across the fleet",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, every command named but only that one's arguments
    built (and its settings loaded): what `main` parses with."""
    parser = Parser(
        prog=PROG,
        version=True,
        description="The mesh-provisioner server: keeps the registry of which domain answers which kind of "
        "placeholder in bucket mesh-provisioner_registry, and answers the read-only verb "
        "mesh-provisioner.provisioning.",
        epilog=f"for a first try on one machine, run `mesh-provisioner-dev`; see `{PROG} <command> --help`.\n\n"
        + exit_codes_help(EXIT_CODES),
    )
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(_SUMMARIES) + "}"),
    )
    for name, add in _PARSERS.items():
        if only is None or only == name:
            add(commands)
        else:
            commands.add_parser(name, help=_SUMMARIES[name], add_help=False)
    return parser


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, description: str, epilog: str
) -> argparse.ArgumentParser:
    return commands.add_parser(name, help=_SUMMARIES[name], description=description, epilog=epilog)


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from provisioner.seat.settings import ServerSettings  # noqa: PLC0415 (each command loads its own settings)
    from registry.edge import BusSettings, add_settings_arguments  # noqa: PLC0415

    serve = _command(
        commands,
        "serve",
        description="Connect to NATS (reconnecting forever), make sure the four buckets exist, compile the "
        "registry now and every interval, and serve the verb until SIGTERM or SIGINT. With --site: the seat of "
        "a site, serving the verb from the site's copies of the hub's buckets, which it makes. Every file it "
        "reads (config, domains, grants, sites) is read before it connects.",
        epilog=_EPILOG_SERVE,
    )
    serve.add_argument("--config", type=Path, metavar="PATH", help="a TOML file of settings ([nats]: NATS options)")
    add_settings_arguments(serve, ServerSettings, "server settings")
    add_settings_arguments(serve, BusSettings, "NATS connection")


def _add_query(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from provisioner.settings import QueryArguments  # noqa: PLC0415
    from registry.edge import add_settings_arguments  # noqa: PLC0415

    query = _command(
        commands,
        "query",
        description="Ask the verb, follow every page, and print the merged answer: a table (plain "
        "columns when stdout is not a terminal), or JSON with --json, or JSON lines with --jsonl.",
        epilog=_EPILOG_QUERY,
    )
    add_settings_arguments(query, QueryArguments, "what to ask and how to print it")
    _add_client_settings(query)


def _add_top(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from provisioner.settings import TopArguments  # noqa: PLC0415
    from registry.edge import add_settings_arguments  # noqa: PLC0415

    top = _command(
        commands,
        "top",
        description="Show the fleet's nodes and their verdicts, refreshed every --interval, until Ctrl-C.",
        epilog=_EPILOG_TOP,
    )
    add_settings_arguments(top, TopArguments, "what to show and how often")
    _add_client_settings(top)


def _add_client_settings(command: argparse.ArgumentParser) -> None:
    """The settings of a command that connects as a client of the seat: the config, logging, NATS."""
    from provisioner.settings import CommandLogSettings  # noqa: PLC0415
    from registry.edge import BusSettings, add_settings_arguments  # noqa: PLC0415

    command.add_argument("--config", type=Path, metavar="PATH", help="a TOML file whose [nats] table has NATS options")
    add_settings_arguments(command, CommandLogSettings, "logging")
    add_settings_arguments(command, BusSettings, "NATS connection")


def _add_remove_node(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from provisioner.settings import RemoveNodeArguments  # noqa: PLC0415
    from registry.edge import add_settings_arguments  # noqa: PLC0415

    remove = _command(
        commands,
        "remove-node",
        description="List every key of NODE in the needs, applied and collect buckets and its lease, remove "
        "each (with --jwt its account first), and print what was removed.",
        epilog=_EPILOG_REMOVE,
    )
    add_settings_arguments(remove, RemoveNodeArguments, "what to remove")
    _add_client_settings(remove)


def _add_grants(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from provisioner.commands.grants_command import add_grants_command  # noqa: PLC0415

    add_grants_command(commands)


def _add_rollout(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from provisioner.commands.rollout_command import add_rollout_command  # noqa: PLC0415

    add_rollout_command(commands, _add_client_settings)


_PARSERS: dict[str, Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = {
    "serve": _add_serve,
    "query": _add_query,
    "top": _add_top,
    "remove-node": _add_remove_node,
    "grants": _add_grants,
    "rollout": _add_rollout,
}


def _chosen(argv: Sequence[str]) -> str | None:
    """The command `argv` names, when it is one: the first word not a flag."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in _PARSERS else None


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    pause_collector_for_start_up(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    return _run(build_parser(only=_chosen(words) or "").parse_args(words))


def _run(args: argparse.Namespace) -> int:
    try:
        return _COMMANDS[args.command](args)
    except Exception as err:
        from provisioner.errors import ProvisionerError  # noqa: PLC0415
        from registry.errors import RegistryError, sole_exception  # noqa: PLC0415
        from registry.runtime import terminal_safe  # noqa: PLC0415

        ours = sole_exception(err) if isinstance(err, BaseExceptionGroup) else err
        if not isinstance(ours, ProvisionerError | RegistryError):
            raise
        print(f"{PROG} {args.command}: {terminal_safe(str(ours))}", file=sys.stderr)
        return exit_code_of(ours) if isinstance(ours, RegistryError) else EXIT_FAILED


def _serve(args: argparse.Namespace) -> int:
    from functools import partial  # noqa: PLC0415

    import anyio  # noqa: PLC0415

    from provisioner.seat.settings import ServerSettings  # noqa: PLC0415
    from registry.contract import buckets, load_catalogue  # noqa: PLC0415
    from registry.edge import given_flags, load_settings  # noqa: PLC0415
    from registry.runtime import until_signalled  # noqa: PLC0415

    settings = load_settings(ServerSettings, given_flags(args, ServerSettings), args.config, os.environ)
    bus_options = _bus_options(args, buckets.SEAT)
    load_catalogue(settings.domains_file)  # a broken domains file is said now, not once NATS answers
    _configure_logging(settings)
    finished = anyio.run(until_signalled, partial(_run_server, bus_options, settings))
    return EXIT_OK if finished else EXIT_FAILED


async def _run_server(bus_options: BusOptions, settings: ServerSettings, stop: anyio.Event) -> bool:
    """`True` once the server stopped by itself: `until_signalled` says `None` when it was forced."""
    from provisioner.seat.server import run_server  # noqa: PLC0415

    await run_server(bus_options=bus_options, settings=settings, stop=stop)
    return True


def _query(args: argparse.Namespace) -> int:
    import anyio  # noqa: PLC0415

    from provisioner.settings import QueryArguments  # noqa: PLC0415
    from registry.contract import buckets  # noqa: PLC0415
    from registry.edge import given_flags, load_settings  # noqa: PLC0415
    from registry.wire import answer_patiently, connect_within  # noqa: PLC0415

    query = load_settings(QueryArguments, given_flags(args, QueryArguments), None, os.environ)
    options = _bus_options(args, f"{buckets.SEAT}-query")
    _configure_logging(_log_settings(args))
    wait = query.wait

    async def ask() -> MergedAnswer:
        async with connect_within(options, wait) as bus:
            return await answer_patiently(bus, query.request(), within=wait)

    answer = anyio.run(ask)
    # The tables (rich) are loaded once the answer is in: never by `serve`, nor before the request.
    from provisioner.commands import tables  # noqa: PLC0415

    answer = tables.narrowed(answer, kind=query.kind, name=query.name, state=query.state)
    output = tables.Output(as_json=query.as_json, as_jsonl=query.jsonl, compact=query.compact)
    if query.by_reason:
        tables.print_reasons(answer, output, sys.stdout)
    else:
        tables.print_query_answer(answer, output, sys.stdout)
    if query.what == "nodes" and tables.unhealthy(answer):
        return EXIT_UNHEALTHY
    return EXIT_MALFORMED if answer.malformed else EXIT_OK


def _top(args: argparse.Namespace) -> int:
    from functools import partial  # noqa: PLC0415

    import anyio  # noqa: PLC0415

    from provisioner.commands import tables, top  # noqa: PLC0415 (rich, as for `query`)
    from provisioner.settings import TopArguments  # noqa: PLC0415
    from registry.contract import buckets  # noqa: PLC0415
    from registry.edge import given_flags, load_settings  # noqa: PLC0415
    from registry.runtime import until_signalled  # noqa: PLC0415

    options = top.TopOptions.of(load_settings(TopArguments, given_flags(args, TopArguments), None, os.environ))
    bus_options = _bus_options(args, f"{buckets.SEAT}-top")
    _configure_logging(_log_settings(args))
    last = anyio.run(until_signalled, partial(top.watch_fleet, bus_options, options))
    return EXIT_UNHEALTHY if options.once and last is not None and tables.unhealthy(last) else EXIT_OK


def _remove_node(args: argparse.Namespace) -> int:
    from functools import partial  # noqa: PLC0415

    import anyio  # noqa: PLC0415

    from provisioner.commands.removal import NodeStillHeld  # noqa: PLC0415
    from provisioner.settings import RemoveNodeArguments  # noqa: PLC0415
    from registry.contract import buckets  # noqa: PLC0415
    from registry.edge import given_flags, load_settings  # noqa: PLC0415
    from registry.runtime import terminal_safe  # noqa: PLC0415

    removal = load_settings(RemoveNodeArguments, given_flags(args, RemoveNodeArguments), None, os.environ)
    options = _bus_options(args, f"{buckets.SEAT}-remove-node")
    _configure_logging(_log_settings(args))
    try:
        return anyio.run(partial(_remove, options, removal))
    except NodeStillHeld as held:
        print(f"{PROG} remove-node: {terminal_safe(str(held))}", file=sys.stderr)
        return EXIT_HELD


async def _remove(options: BusOptions, removal: RemoveNodeArguments) -> int:
    """Lists what the node holds, refuses while its client holds its lease (unless --force), asks
    unless --yes, deletes its account first (--jwt), then its keys and lease; prints what went."""
    import anyio.to_thread  # noqa: PLC0415

    from provisioner.commands.removal import AccountRemoval, footprint, remove_footprint  # noqa: PLC0415
    from registry.wire import connect_within  # noqa: PLC0415

    account = AccountRemoval.of(removal.keys, removal.node) if removal.keys is not None else None
    async with connect_within(options, removal.wait) as bus:
        found = await footprint(bus, removal.node)
        live = found.refuse_if_held(force=removal.force)
        if found.empty and account is None:
            if removal.as_json:
                _print_removed_json(removal.node, {}, None)
            else:
                print(
                    f"nothing to remove: node {removal.node!r} has no key in the needs, applied or collect buckets "
                    "and no lease"
                )
            return EXIT_OK
        if not removal.yes and not await anyio.to_thread.run_sync(_confirm, found, account):
            print("nothing removed; pass --yes to remove without asking", file=sys.stderr)
            return EXIT_USAGE
        deleted = None
        if account is not None:
            deleted = await _delete_account(options, account, quiet=removal.as_json)
            # The node can write nothing now: read again what it holds, so that a key or lease its
            # client wrote while we asked goes too, and no renewal can race the lease's removal.
            found = await footprint(bus, removal.node)
        removed = await remove_footprint(bus, found, force=removal.force or account is not None)
    if removal.as_json:
        _print_removed_json(removal.node, removed, deleted)
    _print_removed(removal.node, removed, live if account is None else None, quiet=removal.as_json)
    return EXIT_OK


async def _delete_account(options: BusOptions, account: AccountRemoval, *, quiet: bool) -> str:
    from provisioner.commands.removal import delete_node_account  # noqa: PLC0415
    from registry.runtime import terminal_safe  # noqa: PLC0415
    from registry.wire import connect_within  # noqa: PLC0415

    system = account.options(options)
    async with connect_within(system, system.connect_timeout) as bus:
        answer = await delete_node_account(bus, account)
    if not quiet:
        print(
            f"deleted the account of node {account.node!r} ({terminal_safe(answer)}): its connections are closed "
            "and its credential refused"
        )
    return answer


def _print_removed_json(node: str, removed: dict[str, list[str]], account: str | None) -> None:
    from registry.runtime import json_text  # noqa: PLC0415

    document = {"node": node, "removed": removed, "account_deleted": account}
    print(json_text(document, indent=2, to_terminal=sys.stdout.isatty()))


def _print_removed(node: str, removed: dict[str, list[str]], forced: LiveLease | None, *, quiet: bool) -> None:
    from registry.contract import buckets  # noqa: PLC0415
    from registry.runtime import terminal_safe  # noqa: PLC0415

    if not quiet:
        for bucket, keys in removed.items():
            print("\n".join(f"removed {bucket} {terminal_safe(key)}" for key in keys))
        count = sum(len(keys) for bucket, keys in removed.items() if bucket != buckets.LEASES.name)
        lease = " and its lease" if buckets.LEASES.name in removed else ""
        print(f"removed {count} keys of node {node!r}{lease}")
    if forced is not None:
        print(
            f"{PROG} remove-node: removed while its client held its lease ({forced.describe()}): "
            "unless its account is revoked (the grants issued without it, and nats-server reloaded) it takes "
            "the lease again and writes its keys back",
            file=sys.stderr,
        )


def _confirm(found: Footprint, account: AccountRemoval | None) -> bool:
    """Shows what would be removed and asks on a terminal; anywhere else, `--yes` is needed."""
    from registry.contract import buckets  # noqa: PLC0415
    from registry.runtime import terminal_safe  # noqa: PLC0415

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
    from registry.edge import BusSettings, given_flags, load_settings  # noqa: PLC0415

    return load_settings(BusSettings, given_flags(args, BusSettings), args.config, os.environ).options(name)


def _grants(args: argparse.Namespace) -> int:
    from provisioner.commands.grants_command import grants_main  # noqa: PLC0415

    return grants_main(args, os.environ)


def _rollout(args: argparse.Namespace) -> int:
    from provisioner.commands.rollout_command import rollout_main  # noqa: PLC0415
    from registry.contract import buckets  # noqa: PLC0415

    options = _bus_options(args, f"{buckets.SEAT}-rollout")
    _configure_logging(_log_settings(args))
    return rollout_main(args, options)


def _log_settings(args: argparse.Namespace) -> LogSettings:
    from provisioner.settings import CommandLogSettings  # noqa: PLC0415
    from registry.edge import given_flags, load_settings  # noqa: PLC0415

    return load_settings(CommandLogSettings, given_flags(args, CommandLogSettings), None, os.environ)


def _configure_logging(settings: LogSettings) -> None:
    """Logging set up: the last step of a command's start-up."""
    from registry.runtime import configure_logging  # noqa: PLC0415

    configure_logging(log_format=settings.log_format, level=settings.log_level)
    start_up_done()


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    "query": _query,
    "top": _top,
    "remove-node": _remove_node,
    "grants": _grants,
    "rollout": _rollout,
}


if __name__ == "__main__":
    sys.exit(main())
