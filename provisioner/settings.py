"""Every `mesh-provisioner` command's settings, read once at the edge by `registry.edge.load_settings`.

The server's (`ServerSettings`) are `provisioner.seat.settings`, loaded by `serve` alone: a
one-shot query builds none of them.

`query`, `top` and `remove-node` log as `CommandLogSettings` say (`MESH_PROVISIONER_LOG_*`), and
connect as `serve` does. Each command's own arguments (`QueryArguments`, `TopArguments`,
`RemoveNodeArguments`, `GrantsArguments`) are read from its command line alone: what to ask this
time is no variable of the shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Self

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, JsonValue, model_validator

from registry.command_line import duration_text
from registry.contract import FILTERS, MAX_STALE_AFTER_SECONDS, Name, Verdict, What
from registry.edge import CommandLine, Duration, EdgeSettings, LogSettings, flag_of
from registry.errors import SettingsError
from registry.runtime import LogLevel

__all__ = [
    "CLIENT_FILTERS",
    "DEFAULT_STALE_AFTER",
    "ENV_PREFIX",
    "STATES",
    "CommandArguments",
    "CommandLogSettings",
    "GrantsArguments",
    "QueryArguments",
    "RemoveNodeArguments",
    "TopArguments",
]

ENV_PREFIX = "MESH_PROVISIONER_"
# When the seat judges a node stale unless a request says otherwise (`provisioner.verb.nodes`).
DEFAULT_STALE_AFTER = timedelta(minutes=5)


# `query`'s filters read from the entries here, not asked of the verb, and the `what`s whose entries
# have the field.
CLIENT_FILTERS: Mapping[str, tuple[str, ...]] = {
    "kind": ("registry", "needs"),
    "name": ("needs",),
    "state": ("applied", "nodes"),
}
# The values `state` takes for each `what` it applies to: a module's state, a node's verdict.
STATES: Mapping[str, tuple[str, ...]] = {
    "applied": ("applied", "pending"),
    "nodes": ("healthy", "stale", "gone", "over-quota"),
}


class CommandLogSettings(LogSettings):
    """How `query`, `top` and `remove-node` log: quieter than the server by default, and they leave
    the server's other `MESH_PROVISIONER_*` variables (set in the same shell, say) alone."""

    env_prefix: ClassVar[str] = ENV_PREFIX
    foreign_env_prefixes: ClassVar[tuple[str, ...]] = (ENV_PREFIX,)

    log_level: Annotated[LogLevel, BeforeValidator(str.upper)] = Field(
        default="WARNING", description="the least severe level logged"
    )


class CommandArguments(EdgeSettings):
    """A command's own arguments: from its command line alone, never a variable or the file."""

    model_config = ConfigDict(frozen=True)
    command_line_only: ClassVar[bool] = True


def _each_once(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _as_the_verb_takes(stale_after: timedelta) -> timedelta:
    if not timedelta(0) < stale_after <= timedelta(seconds=MAX_STALE_AFTER_SECONDS):
        raise ValueError(f"a duration above 0 s and at most {MAX_STALE_AFTER_SECONDS} s (366 days), as the verb takes")
    return stale_after


EachOnce = Annotated[tuple[str, ...], AfterValidator(_each_once)]  # a flag repeated: each name once, in order
StaleAfter = Annotated[Duration, AfterValidator(_as_the_verb_takes)]
State = Literal["applied", "pending", Verdict]  # a module's state (applied) or a node's verdict (nodes)

_WAIT = timedelta(seconds=30)
_THE_SEATS: dict[str, JsonValue] = {"shown_default": f"{duration_text(DEFAULT_STALE_AFTER)}, the seat's"}
_STALE = "a node is stale after this long without a sign of life"
# The `what`s each argument read here applies to; the verb says which of its own filters apply.
_APPLIES: Mapping[str, tuple[str, ...]] = {
    **CLIENT_FILTERS,
    "by_reason": ("applied",),
    "stale_after": ("nodes",),
}


class QueryArguments(CommandArguments):
    """What `mesh-provisioner query` asks the verb, what it keeps of the answer and how it prints it."""

    what: Annotated[What, CommandLine(positional=True, choices=True)] = Field(
        default="registry", description="what to ask the verb for"
    )
    node: Name | None = Field(default=None, description="narrow to one node (needs, applied, collect)")
    module: Name | None = Field(default=None, description="narrow to one module; for collect, the contributor")
    collection: Name | None = Field(default=None, description="narrow to one collection (collect)")
    kind: Name | None = Field(default=None, description="keep the entries of one kind (registry, needs; filtered here)")
    name: Name | None = Field(
        default=None, description="keep the entries of one placeholder name (needs; filtered here)"
    )
    state: Annotated[State | None, CommandLine(choices=True)] = Field(
        default=None,
        description="keep one state: applied or pending (applied), healthy, stale, gone or over-quota (nodes); "
        "filtered here",
    )
    stale_after: StaleAfter | None = Field(default=None, description=f"nodes: {_STALE}", json_schema_extra=_THE_SEATS)
    by_reason: bool = Field(
        default=False,
        description="applied: each reason given, how many modules give it and which (--json: a list; --jsonl: "
        "one a line)",
    )
    as_json: Annotated[bool, CommandLine(flag="--json", exclusive="output")] = Field(
        default=False, description="print the merged answer as JSON"
    )
    jsonl: Annotated[bool, CommandLine(exclusive="output")] = Field(
        default=False, description="print one JSON object per entry, then per malformed key"
    )
    compact: bool = Field(default=False, description="with --json, print it on one line")
    wait: Duration = Field(
        default=_WAIT,
        gt=timedelta(0),
        description="how long to wait to connect, then for the whole answer; a seat that does not answer within "
        "an attempt (2 s, doubled each time), is not there, is busy (503) or forgot the listing (410) is asked "
        "again until then",
    )

    @model_validator(mode="after")
    def _asks_what_applies(self) -> Self:
        """A `SettingsError` naming the flag as typed; pydantic passes it on as it is (no `ValueError`)."""
        for field, whats in _APPLIES.items():
            if getattr(self, field) not in (None, False) and self.what not in whats:
                raise SettingsError(
                    flag_of(type(self), field), f"does not apply to {self.what}; only to {', '.join(whats)}"
                )
        states = STATES.get(self.what, ())
        if self.state is not None and self.state not in states:
            raise SettingsError(
                flag_of(type(self), "state"), f"{self.state} is not a state of {self.what}; one of {', '.join(states)}"
            )
        return self

    def request(self) -> dict[str, object]:
        """The verb's request: `what`, the narrowing nats-server applies, and when a node is stale."""
        asked: dict[str, object] = {"what": self.what}
        asked |= {field: value for field in FILTERS if (value := getattr(self, field)) is not None}
        if self.stale_after is not None:
            asked["stale_after"] = self.stale_after.total_seconds()
        return asked


class TopArguments(CommandArguments):
    """What `mesh-provisioner top` shows, and how often it asks."""

    node: Name | None = Field(default=None, description="show one node only")
    stale_after: StaleAfter | None = Field(default=None, description=_STALE, json_schema_extra=_THE_SEATS)
    interval: Duration = Field(
        default=timedelta(seconds=2), gt=timedelta(0), le=timedelta(days=1), description="how often to ask"
    )
    once: bool = Field(default=False, description="print one frame and exit (9 if a node is stale, gone or over quota)")
    as_json: Annotated[bool, CommandLine(flag="--json")] = Field(
        default=False, description="with --once, print the frame's answer as JSON (as query nodes --json)"
    )
    wait: Duration = Field(
        default=_WAIT, gt=timedelta(0), description="how long to wait to connect, and with --once for the answer"
    )

    @model_validator(mode="after")
    def _json_once(self) -> Self:
        if self.as_json and not self.once:
            raise SettingsError(flag_of(type(self), "as_json"), f"applies only with {flag_of(type(self), 'once')}")
        return self


class RemoveNodeArguments(CommandArguments):
    """Which node `mesh-provisioner remove-node` removes, whether it asks first, whether it
    removes a node whose client still holds its lease, and its account (decentralized auth)."""

    node: Annotated[str, CommandLine(positional=True, metavar="NODE")] = Field(
        min_length=1, description="the node's name, as its client is told it (never escaped)"
    )
    yes: bool = Field(default=False, description="remove without asking")
    force: bool = Field(
        default=False,
        description="remove even while the node's client holds its lease (revoke its account first, or --jwt)",
    )
    jwt: bool = Field(
        default=False, description="decentralized auth: also delete the node's account, first (needs --keys)"
    )
    keys: Annotated[Path | None, CommandLine(metavar="DIR")] = Field(
        default=None,
        description="with --jwt: the seeds `grants --jwt` kept (operator.nk, sys.creds, account-node-NODE.nk)",
    )
    wait: Duration = Field(default=_WAIT, gt=timedelta(0), description="how long to wait to connect")
    as_json: Annotated[bool, CommandLine(flag="--json")] = Field(
        default=False, description="print what was removed as JSON"
    )

    @model_validator(mode="after")
    def _keys_with_jwt(self) -> Self:
        if self.jwt and self.keys is None:
            raise SettingsError(flag_of(type(self), "jwt"), f"needs {flag_of(type(self), 'keys')}: the seeds folder")
        if self.keys is not None and not self.jwt:
            raise SettingsError(flag_of(type(self), "keys"), f"applies only with {flag_of(type(self), 'jwt')}")
        return self


class GrantsArguments(CommandArguments):
    """The parties `mesh-provisioner grants` writes accounts and keys for, and where; a mesh file
    names them as well, the flags adding to it."""

    out: Annotated[Path, CommandLine(metavar="DIR")] = Field(description="where accounts.conf and grants.json go")
    keys: Annotated[Path | None, CommandLine(metavar="DIR")] = Field(
        default=None, description="where the seeds are kept (default: --out)"
    )
    mesh: Annotated[Path | None, CommandLine(metavar="FILE")] = Field(
        default=None, description="a mesh file (TOML) naming the parties; the flags below add to it"
    )
    node: Annotated[EachOnce, CommandLine(repeat=True, metavar="NAME")] = Field(
        default=(), description="a node (repeat)"
    )
    provider: Annotated[EachOnce, CommandLine(repeat=True, metavar="MODULE")] = Field(
        default=(), description="a provider; MODULE@NODE names a machine its module runs on (repeat)"
    )
    operator: Annotated[EachOnce, CommandLine(repeat=True, metavar="NAME")] = Field(
        default=(), description="an operator (repeat)"
    )
    writer: Annotated[EachOnce | None, CommandLine(repeat=True, metavar="DOMAIN")] = Field(
        default=None,
        description="a domain of the catalogue writing a bucket, given an account writing it (repeat); named "
        "neither here nor in the mesh file: every one",
    )
    domains_file: Path | None = Field(
        default=None, description="the seat's domains file, if any (not with a mesh file that names one)"
    )
    jwt: bool = Field(default=False, description="also decentralized auth: JWTs and .creds files")
    check: Annotated[bool, CommandLine(exclusive="mode")] = Field(
        default=False,
        description="write nothing: print what would change against what is in --out; exit 8 if anything would",
    )
    push: Annotated[bool, CommandLine(exclusive="mode")] = Field(
        default=False,
        description="with --jwt, then make nats-server's resolver hold exactly the issued accounts, as the "
        "system account's user (KEYS/sys.creds)",
    )

    as_json: Annotated[bool, CommandLine(flag="--json")] = Field(
        default=False, description="with --check, print what would change as JSON"
    )

    @model_validator(mode="after")
    def _pushes_jwts(self) -> Self:
        if self.push and not self.jwt:
            raise SettingsError(flag_of(type(self), "push"), "pushes account JWTs: give --jwt too")
        if self.as_json and not self.check:
            raise SettingsError(flag_of(type(self), "as_json"), f"applies only with {flag_of(type(self), 'check')}")
        return self
