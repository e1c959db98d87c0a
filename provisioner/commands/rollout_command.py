"""`mesh-provisioner rollout`: an operator sees, pauses, resumes and aborts a module's rollout.

A module's rollout is held by one key of the fleet bucket (`registry.contract.fleet`),
`rollout.<module>`: `paused` (no node takes a new slot; those changing finish) or `aborted` (the
nodes that changed it under a slot go back to their last good env content where its manifest
allows, and nobody changes it); no key, it runs. The seat pauses a rollout when a node running the
module fails its change (`provisioner.seat.rollouts`); the operator decides what comes next:

    status [MODULE]   each module with a hold or a claim: its hold (state, by whom, since when,
                      why) and its nodes' claims by state; with MODULE, each node's claim too
    pause MODULE      writes the hold `paused` (an aborted rollout stays aborted)
    resume MODULE     deletes the hold: nodes take slots again; a failed claim's node frees its own
    abort MODULE      writes the hold `aborted` (over a pause)

The operator's account may write `rollout.>` and read the fleet (direct and batch gets): a write
is conditional on the revision read, so an operator and the seat never write over each other
unseen; a write that lost is read again and tried again. Nothing here asks the seat: it reads and
writes the bucket, so it works while the seat is down.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Annotated, Literal, TextIO

import anyio
from pydantic import Field, ValidationError

from provisioner.seat.rollouts import CLAIM_STATES, HOLD_STATES, ClaimSeen, write_hold_unless
from provisioner.settings import CommandArguments
from registry.command_line import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_ROLLOUT_HELD,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    exit_codes_help,
    timestamp,
)
from registry.contract import Name, fleet
from registry.edge import CommandLine, Duration, add_settings_arguments, given_flags, load_settings
from registry.errors import BusError, KeyShapeError, WrongLastSequence
from registry.runtime import json_text, terminal_safe
from registry.wire import (
    Bus,
    BusOptions,
    KvItem,
    TooManyKeys,
    connect_within,
    delete,
    get_last_many,
    get_latest,
    get_latest_paged,
)

ATTEMPTS = 3  # writes tried while another party writes the same hold
_WAIT = timedelta(seconds=10)
_SHOWN_REASON = 80

ACTIONS = ("status", "pause", "resume", "abort")
_EPILOG = """\
A module's rollout is held by the key rollout.<module> of the fleet bucket (mesh-provisioner_fleet):
paused, no node takes a new slot of it and those changing finish; aborted, the nodes that changed it
under a slot go back to their last good env content and run its change action again, where its
manifest says "rollout": {"rollback": true}, and nobody changes it. The seat pauses a rollout when a
node running the module fails its change action or health check; you decide: resume or abort.
Connect as `query` does, with the operator's credentials (--nats-nkey operator-NAME.nk, or
--nats-creds operator-NAME.creds).

`status` exits 11 when a rollout shown is held; `pause` when the rollout is aborted (left aborted);
0 also when there is nothing to do (said).

examples:
  mesh-provisioner rollout status                  every module with a hold or a claim
  mesh-provisioner rollout status web              module web: its hold, each node's claim
  mesh-provisioner rollout pause web --reason "checking the new db url"
  mesh-provisioner rollout resume web              nodes go on changing web
  mesh-provisioner rollout abort web --reason "bad value"    nodes that changed web roll back

""" + exit_codes_help((EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_REFUSED, EXIT_ROLLOUT_HELD))


def _operator_name() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (OSError, KeyError):
        return "operator"


class RolloutStatusArguments(CommandArguments):
    """What `rollout status` shows."""

    module: Annotated[Name | None, CommandLine(positional=True, metavar="MODULE")] = Field(
        default=None, description="one module: its hold and each node's claim (left out: every module held or claimed)"
    )
    as_json: Annotated[bool, CommandLine(flag="--json")] = Field(default=False, description="print JSON")
    wait: Duration = Field(default=_WAIT, gt=timedelta(0), description="how long to wait to connect")


class RolloutHoldArguments(CommandArguments):
    """Which module's rollout `rollout pause` or `rollout abort` holds, and why."""

    module: Annotated[Name, CommandLine(positional=True, metavar="MODULE")] = Field(
        description="the module's name (never escaped)"
    )
    reason: str | None = Field(
        default=None, max_length=1000, description="why, shown by `rollout status` and `top` (abort: a pause's kept)"
    )
    by: str = Field(
        default_factory=_operator_name, min_length=1, max_length=200, description="who holds it: you, USER@HOST"
    )
    wait: Duration = Field(default=_WAIT, gt=timedelta(0), description="how long to wait to connect")
    as_json: Annotated[bool, CommandLine(flag="--json")] = Field(default=False, description="print JSON")


class RolloutResumeArguments(CommandArguments):
    """Which module's rollout `rollout resume` lets go on."""

    module: Annotated[Name, CommandLine(positional=True, metavar="MODULE")] = Field(
        description="the module's name (never escaped)"
    )
    wait: Duration = Field(default=_WAIT, gt=timedelta(0), description="how long to wait to connect")
    as_json: Annotated[bool, CommandLine(flag="--json")] = Field(default=False, description="print JSON")


_ARGUMENTS: dict[str, type[CommandArguments]] = {
    "status": RolloutStatusArguments,
    "pause": RolloutHoldArguments,
    "resume": RolloutResumeArguments,
    "abort": RolloutHoldArguments,
}
_HELP = {
    "status": "each module's hold and its nodes' claims by state",
    "pause": "hold a module's rollout: no node takes a new slot",
    "resume": "let a held rollout go on: its hold is deleted",
    "abort": "abort a module's rollout: the nodes that changed it roll back where it allows",
}


def add_rollout_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_client_settings: Callable[[argparse.ArgumentParser], None],
) -> None:
    """`rollout` and its actions, each with the client settings (`--config`, logging, NATS)."""
    rollout = commands.add_parser(
        "rollout",
        help="see, pause, resume or abort a module's rollout across the fleet",
        description="See and decide a module's rollout: the hold rollout.<module> of the fleet bucket.",
        epilog=_EPILOG,
    )
    actions = rollout.add_subparsers(dest="rollout_action", required=True, metavar="{" + ",".join(ACTIONS) + "}")
    for action in ACTIONS:
        parser = actions.add_parser(
            action,
            help=_HELP[action],
            description=_HELP[action][0].upper() + _HELP[action][1:] + ".",
            epilog=_EPILOG,
        )
        add_settings_arguments(parser, _ARGUMENTS[action], "what to do")
        add_client_settings(parser)


def rollout_main(args: argparse.Namespace, options: BusOptions) -> int:
    """Runs the action `args` name over a connection made with `options`; the exit code."""
    action: str = args.rollout_action
    arguments = load_settings(_ARGUMENTS[action], given_flags(args, _ARGUMENTS[action]), None, {})
    if isinstance(arguments, RolloutStatusArguments):
        return anyio.run(partial(_status, options, arguments, sys.stdout))
    if isinstance(arguments, RolloutResumeArguments):
        return anyio.run(partial(_resume, options, arguments))
    assert isinstance(arguments, RolloutHoldArguments)
    state: Literal["paused", "aborted"] = "paused" if action == "pause" else "aborted"
    return anyio.run(partial(_hold, options, arguments, state))


# Reading: each module's hold and claims.


@dataclass(frozen=True)
class ClaimShown:
    """A node's claim as `status` shows it: its state (`expired`: not renewed within its ttl)."""

    node: str
    state: str
    change: str
    since: datetime | None
    reason: str


@dataclass
class ModuleRollout:
    """A module's hold and its nodes' claims."""

    module: str
    hold: fleet.Hold | None = None
    claims: list[ClaimShown] = field(default_factory=list)

    def by_state(self) -> dict[str, int]:
        counts = dict.fromkeys((*CLAIM_STATES, "unreadable"), 0)
        for claim in self.claims:
            counts[claim.state] += 1
        return counts

    def document(self, *, with_nodes: bool) -> dict[str, object]:
        hold = self.hold.model_dump(mode="json") if self.hold is not None else None
        shown: dict[str, object] = {"module": self.module, "hold": hold, "claims": self.by_state()}
        if with_nodes:
            shown["nodes"] = [_claim_document(c) for c in self.claims]
        return shown


def _claim_document(claim: ClaimShown) -> dict[str, object]:
    since = claim.since.isoformat() if claim.since is not None else None
    return {"node": claim.node, "state": claim.state, "change": claim.change, "since": since, "reason": claim.reason}


async def read_rollouts(bus: Bus, module: str | None = None) -> list[ModuleRollout]:
    """Every module with a hold or a claim (or `module` alone, shown even with neither), by name."""
    found: dict[str, ModuleRollout] = {}
    if module is not None:
        found[module] = ModuleRollout(module)
    for item in await get_last_many(bus, fleet.FLEET, fleet.hold_key(module) if module else f"{fleet.ROLLOUT}.>"):
        key = _parsed(item)
        if key is not None and key.module is not None and not item.deleted:
            found.setdefault(key.module, ModuleRollout(key.module)).hold = fleet.read_hold(item.value, item.stored_at)
    claims_filter = fleet.claims_of(module) if module else f"{fleet.CLAIM}.>"
    try:
        claims = await get_last_many(bus, fleet.FLEET, claims_filter)
    except TooManyKeys:  # past one batch read (a deleted claim's marker stays): paged
        claims = await get_latest_paged(bus, fleet.FLEET, claims_filter)
    now = datetime.now(UTC)
    for item in claims:
        key = _parsed(item)
        if key is None or key.module is None or key.node is None or item.deleted:
            continue
        found.setdefault(key.module, ModuleRollout(key.module)).claims.append(_claim_shown(key.node, item, now))
    return sorted(found.values(), key=lambda r: r.module)


def _parsed(item: KvItem) -> fleet.FleetKey | None:
    try:
        return fleet.parse_fleet_key(item.key)
    except KeyShapeError:
        return None


def _claim_shown(node: str, item: KvItem, now: datetime) -> ClaimShown:
    try:
        claim = fleet.Claim.model_validate_json(item.value)
    except ValidationError:
        return ClaimShown(node, "unreadable", "", item.stored_at, "not a claim")
    seen = ClaimSeen(claim.state, claim.change, item.stored_at or now, claim.lifetime())  # as every reader: capped
    return ClaimShown(node, seen.shown_state(now), claim.change, claim.since, claim.reason)


async def held_rollouts(bus: Bus) -> list[tuple[str, fleet.Hold]]:
    """Each held module and its hold, by module (for `top`)."""
    held = []
    for item in await get_last_many(bus, fleet.FLEET, f"{fleet.ROLLOUT}.>"):
        key = _parsed(item)
        if key is not None and key.module is not None and not item.deleted:
            held.append((key.module, fleet.read_hold(item.value, item.stored_at)))
    return sorted(held, key=lambda pair: pair[0])


async def _status(options: BusOptions, arguments: RolloutStatusArguments, out: TextIO) -> int:
    async with connect_within(options, arguments.wait) as bus:
        rollouts = await read_rollouts(bus, arguments.module)
    if arguments.as_json:
        documents = [r.document(with_nodes=arguments.module is not None) for r in rollouts]
        print(json_text({"rollouts": documents}, indent=2, to_terminal=out.isatty()), file=out)
    else:
        print_status(rollouts, out, with_nodes=arguments.module is not None)
    return EXIT_ROLLOUT_HELD if any(r.hold is not None for r in rollouts) else EXIT_OK


STATUS_COLUMNS = ("module", "hold", "by", "since", "waiting", "running", "failed", "expired", "why")
NODE_COLUMNS = ("node", "state", "change", "since", "why")


def print_status(rollouts: Sequence[ModuleRollout], out: TextIO, *, with_nodes: bool) -> None:
    """The modules' table (and with `with_nodes`, the nodes' claims'), as `query` prints its tables."""
    from provisioner.commands import tables  # noqa: PLC0415 (rich: loaded by the commands that print)

    console = tables.console_for(out)
    body = [_module_row(r) for r in rollouts]
    tables.print_listing(console, [c.upper() for c in STATUS_COLUMNS], body, _summary(rollouts))
    if with_nodes and rollouts and rollouts[0].claims:
        console.print()
        rows = [_node_row(c) for c in sorted(rollouts[0].claims, key=lambda c: c.node)]
        tables.print_listing(console, [c.upper() for c in NODE_COLUMNS], rows, _count(len(rows), "claim", "claims"))


def _module_row(rollout: ModuleRollout) -> tuple[str, ...]:
    counts = rollout.by_state()
    claims = tuple(str(counts[s]) for s in ("waiting", "running", "failed", "expired"))
    hold = rollout.hold
    if hold is None:
        return (rollout.module, "none", "", "", *claims, "")
    return (rollout.module, hold.state, hold.by, _moment(hold.since), *claims, _why(hold))


def _node_row(claim: ClaimShown) -> tuple[str, ...]:
    return claim.node, claim.state, claim.change, _moment(claim.since), _short(claim.reason)


def _why(hold: fleet.Hold) -> str:
    return _short(f"node {hold.node}: {hold.reason}" if hold.node else hold.reason)


def _short(text: str) -> str:
    return text if len(text) <= _SHOWN_REASON else text[: _SHOWN_REASON - 1] + "…"


def _moment(moment: datetime | None) -> str:
    return timestamp(moment) if moment is not None else ""


def _summary(rollouts: Sequence[ModuleRollout]) -> str:
    held = {state: sum(r.hold is not None and r.hold.state == state for r in rollouts) for state in HOLD_STATES}
    claims = dict.fromkeys(CLAIM_STATES, 0)
    for rollout in rollouts:
        for state, count in rollout.by_state().items():
            if state in claims:
                claims[state] += count
    said = ", ".join(f"{count} {state}" for state, count in claims.items())
    modules = _count(len(rollouts), "module", "modules")
    return f"{modules}: {held['paused']} paused, {held['aborted']} aborted; claims: {said}"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


# Writing: a hold, conditional on the revision read.


async def _hold(options: BusOptions, arguments: RolloutHoldArguments, state: Literal["paused", "aborted"]) -> int:
    module = arguments.module
    async with connect_within(options, arguments.wait) as bus:
        before = await write_hold(bus, module, state, by=arguments.by, reason=arguments.reason or "")
    document = {"module": module, "state": state, "before": _hold_document(before)}
    if before is not None and before.state == state:
        _said(
            arguments.as_json,
            f"rollout of {_safe(module)} is {state} already ({_held(before)}); left as it is",
            document | {"changed": False},
        )
        return EXIT_OK
    if before is not None and before.state == "aborted":
        print(
            f"mesh-provisioner rollout pause: rollout of {_safe(module)} is aborted ({_held(before)}); left aborted: "
            f"`mesh-provisioner rollout resume {_safe(module)}` first",
            file=sys.stderr,
        )
        if arguments.as_json:
            _said(True, "", document | {"state": "aborted", "changed": False})
        return EXIT_ROLLOUT_HELD
    was = f" (it was {before.state}: {_held(before)})" if before is not None else ""
    said = f"rollout of {_safe(module)} {state} by {_safe(arguments.by)}{was}: {_what_it_does(state, module)}"
    _said(arguments.as_json, said, document | {"changed": True})
    return EXIT_OK


def _hold_document(hold: fleet.Hold | None) -> object:
    return hold.model_dump(mode="json") if hold is not None else None


def _said(as_json: bool, text: str, document: dict[str, object]) -> None:
    """What an action did: its sentence, or with --json the same as a JSON document."""
    print(json_text(document, indent=2, to_terminal=sys.stdout.isatty()) if as_json else text)


async def write_hold(
    bus: Bus, module: str, state: Literal["paused", "aborted"], *, by: str, reason: str = ""
) -> fleet.Hold | None:
    """Holds `module`'s rollout in `state` unless it is so already, or aborted and asked paused
    (left as it is); the hold found before, if any."""

    def decide(before: fleet.Hold | None) -> fleet.Hold | None:
        if before is not None and before.state in (state, "aborted"):
            return None
        node = before.node if before is not None else None
        return fleet.Hold(state=state, since=datetime.now(UTC), by=by, reason=reason or _kept(before), node=node)

    return await write_hold_unless(bus, module, decide)


def _kept(before: fleet.Hold | None) -> str:
    return before.reason if before is not None else ""


async def _resume(options: BusOptions, arguments: RolloutResumeArguments) -> int:
    module = arguments.module
    async with connect_within(options, arguments.wait) as bus:
        released = await release(bus, module)
        failed = await _failed_nodes(bus, module) if released is None else []
    document = {"module": module, "state": "resumed", "before": _hold_document(released), "failed_nodes": failed}
    if arguments.as_json:
        _said(True, "", document | {"changed": released is not None})
        return EXIT_OK
    if released is None:
        print(f"rollout of {_safe(module)} is not held: nothing to resume")
        if failed:  # a failure nobody paused for (not placed there, pause_on_failure off, no seat) uses its slot up
            nodes = ", ".join(_safe(node) for node in failed[:10]) + (" ..." if len(failed) > 10 else "")
            print(
                f"the failed changes of {_count(len(failed), 'node', 'nodes')} ({nodes}) hold its slots, no pause "
                f"followed them: `rollout pause {_safe(module)}`, then `rollout resume {_safe(module)}` once they "
                "have seen the hold (a watching node does within seconds), frees them"
            )
        return EXIT_OK
    print(
        f"rollout of {_safe(module)} resumed (its hold deleted: {released.state}, {_held(released)}): nodes take its "
        "slots again; a node whose change failed frees its slot, its record stays failed until its next change"
    )
    return EXIT_OK


async def _failed_nodes(bus: Bus, module: str) -> list[str]:
    """The nodes whose live claims of `module` say their change failed."""
    rollouts = await read_rollouts(bus, module)
    return sorted(claim.node for claim in rollouts[0].claims if claim.state == "failed")


async def release(bus: Bus, module: str) -> fleet.Hold | None:
    """Deletes `module`'s hold, at the revision read; the hold deleted, None when there was none."""
    key = fleet.hold_key(module)
    for _ in range(ATTEMPTS):
        found = await get_latest(bus, fleet.FLEET, key)
        if found is None or found.deleted:
            return None
        try:
            await delete(bus, fleet.FLEET, key, last=found.revision)
        except WrongLastSequence:
            continue
        return fleet.read_hold(found.value, found.stored_at)
    raise BusError(f"resume {key}", f"written by others {ATTEMPTS} times while this delete was tried; try again")


def _held(hold: fleet.Hold) -> str:
    why = f": {hold.reason}" if hold.reason else ""
    node = f", node {hold.node}" if hold.node else ""
    return _safe(f"by {hold.by} since {_moment(hold.since)}{node}{why}")


def _what_it_does(state: str, module: str) -> str:
    module = _safe(module)
    if state == "paused":
        return (
            "no node takes a new slot of it, those changing finish; "
            f"`mesh-provisioner rollout resume {module}` lets it go on, "
            f"`mesh-provisioner rollout abort {module}` rolls back the nodes that changed it"
        )
    return (
        "the nodes that changed it under a slot go back to their last good env content (where its manifest says "
        f'"rollout": {{"rollback": true}}); nobody changes it until `mesh-provisioner rollout resume {module}`'
    )


def _safe(text: str) -> str:
    return terminal_safe(text)
