"""The one edge both programs read their settings through: flags, environment, TOML file, defaults.

Every setting is a field of an `EdgeSettings` model, and everything an operator sees follows
from the field: its flag (`--compile-interval`, or `--nats-url` under a flag prefix), its
environment variable (the model's `env_prefix` + the name in capitals), its key in the `--config`
file (top level for a program's own settings, the `[nats]` table for `BusSettings`) and its
`--help` line (the field's description, its default and its variable). Precedence is
flag > environment > file > default, and every value arrives as text or TOML and is validated by
pydantic, so a wrong value is reported in one place (`describe_validation`) and one way
(`SettingsError`, naming the field, its flag and its variable but never the value: it may be a
secret). A misspelt variable under a program's prefix, a missing config file, a file that is not
TOML and an unknown key in the file are refused, never silently defaulted.

A field may have more flags (`flag_aliases`): `BusSettings` answers to the `nats` CLI's names too
(`--server`/`-s`, `--creds`, `--tlsca`, `--context`...), and once read it looks up what was not
given in the `nats` CLI's contexts (`BusSettings.resolved`, `registry.edge.nats_context`).

A command's own arguments are a model too, read from the command line alone (`command_line_only`:
no variable, no file key). A `bool` field is a switch (`--json`); `CommandLine` in a field's
`Annotated` metadata makes it a positional argument, a flag repeated into a list, a value argparse
checks against the field's `Literal`, one of flags given at most one at a time, or names its flag.

Example config file of the server:

    compile_interval = "10m"
    bucket_replicas = 3

    [nats]
    url = "nats://nats-1:4222,nats://nats-2:4222"
    creds = "/etc/mesh-provisioner/seat.creds"
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, NamedTuple, Self, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic.fields import FieldInfo

from registry.command_line import did_you_mean, duration_text, parse_duration
from registry.contract import TomlRefused, read_toml
from registry.edge.nats_context import DEV_CONTEXT, NatsContext, NatsContexts
from registry.errors import SettingsError
from registry.runtime import LogFormat, LogLevel

if TYPE_CHECKING:
    from registry.wire import BusOptions


def _with_unit(value: object) -> object:
    """Text is a duration with its unit (`90s`, `10m`, `1h`; bare seconds and ISO 8601 `PT1H` are
    still read), refused with what is taken; anything else (a TOML number: seconds) is pydantic's.
    Environment variables and flags are always text."""
    return parse_duration(value) if isinstance(value, str) else value


Duration = Annotated[timedelta, BeforeValidator(_with_unit)]
"""A duration setting: `90s`, `10m`, `1h`, `1h30m`, `500ms` (a bare number: seconds)."""


@dataclass(frozen=True)
class CommandLine:
    """How a field is given on the command line when not as `--field VALUE`, in its `Annotated`
    metadata: `what: Annotated[What, CommandLine(positional=True, choices=True)]`."""

    flag: str | None = None  # its flag when not named after the field: `--json` for `as_json`
    positional: bool = False  # an argument, not a flag; it may be left out when the field has a default
    metavar: str | None = None
    choices: bool = False  # argparse refuses a value outside the field's `Literal`, with the usage
    repeat: bool = False  # the flag may be given again, each value one item of the field's list
    exclusive: str | None = None  # of the flags sharing this name, at most one may be given


class EdgeSettings(BaseModel):
    """A settings model read by `load_settings`; each field's `description` is its `--help` line.

    `env_prefix` begins each field's environment variable, `flag_prefix` names the model's flags
    (`"nats"`: `--nats-url`), `config_table` the TOML table its keys live in (`None`: the top
    level), `foreign_env_prefixes` the variables under its `env_prefix` that belong to someone else
    and are not refused as misspellings, and `command_line_only` a command's arguments: read from
    its flags alone, never a variable or file. A plain pydantic model: `load_settings` reads the
    sources itself (only the environment it is given, never `os.environ` or a `.env` file)."""

    model_config = ConfigDict(extra="forbid", defer_build=True, validate_default=True, arbitrary_types_allowed=True)

    env_prefix: ClassVar[str] = ""
    flag_prefix: ClassVar[str] = ""
    flag_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    config_table: ClassVar[str | None] = None
    foreign_env_prefixes: ClassVar[tuple[str, ...]] = ()
    command_line_only: ClassVar[bool] = False

    def resolved(self, environ: Mapping[str, str], origins: Mapping[str, str]) -> Self:
        """The settings once what was not given is looked up elsewhere; `origins` says where each
        field given came from (the command line, a variable, the config file). Itself by default."""
        return self


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


class LogSettings(EdgeSettings):
    """How a program logs; both programs' settings include these fields."""

    log_format: LogFormat = Field(
        default="text", description="log lines as readable text or as one JSON object per line"
    )
    log_level: Annotated[LogLevel, BeforeValidator(_upper)] = Field(
        default="INFO", description="the least severe level logged"
    )


DEFAULT_URL = "nats://127.0.0.1:4222"
MAX_SETTINGS_FILE_BYTES = 1 << 20
_DEFAULT_FROM = "the default"
# The schemes nats-py connects with (a URL without one, `host:4222`, is read as nats://); a
# WebSocket needs aiohttp besides. Anything else it would take for a host name (`nat://h` as the
# host `nat`) and fail on after the connect timeout, with a DNS error.
NATS_SCHEMES = ("nats", "tls")
WEBSOCKET_SCHEMES = ("ws", "wss")


class BusSettings(EdgeSettings):
    """NATS connection settings, under the `nats` CLI's names as well (`--server`, `-s`, `--creds`,
    `--tlsca`, `--context`...), read from the variables the NATS tools honour.

    The server comes from the first of: `url` (flag, NATS_URL, the file's [nats] url); the context
    `context` names; the `nats` CLI's selected context; `mesh-provisioner-dev`'s context while the
    dev loop runs; nats://127.0.0.1:4222. A context named, or the one that gave the server, also
    gives every other field not set otherwise; a server given without a context takes nothing from
    any context (a context's credentials never go to a server it does not name). Wherever the URLs
    came from, their schemes are checked as they are read (`check_schemes`)."""

    # NATS_* is shared with the NATS tools: an unknown name is not ours to refuse.
    env_prefix: ClassVar[str] = "NATS_"
    flag_prefix: ClassVar[str] = "nats"
    flag_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "url": ("-s", "--server"),
        "context": ("--context",),
        "creds": ("--creds",),
        "nkey": ("--nkey",),
        "user": ("--user",),
        "password": ("--password",),
        "ca": ("--tlsca",),
        "cert": ("--tlscert",),
        "key": ("--tlskey",),
    }
    config_table: ClassVar[str | None] = "nats"
    foreign_env_prefixes: ClassVar[tuple[str, ...]] = ("NATS_",)

    url: str | None = Field(
        default=None,
        description="NATS server URLs, comma-separated",
        json_schema_extra={"shown_default": f"from a nats context (--context), else {DEFAULT_URL}"},
    )
    context: str | None = Field(
        default=None,
        description="a nats CLI context to connect as (its server, credentials and TLS files, under any given here); "
        "without it and without a URL, the nats CLI's selected context, else mesh-provisioner-dev's while it runs",
    )
    creds: Path | None = Field(default=None, description="a NATS credentials file (JWT and nkey seed)")
    nkey: Path | None = Field(default=None, description="an nkey seed file")
    user: str | None = Field(default=None, description="user name")
    password: SecretStr | None = Field(default=None, description="password; prefer the variable: flags show in ps")
    token: SecretStr | None = Field(default=None, description="an auth token; prefer the variable: flags show in ps")
    ca: Path | None = Field(default=None, description="a CA certificate file to verify the server's TLS")
    cert: Path | None = Field(default=None, description="a client certificate file for TLS")
    key: Path | None = Field(default=None, description="the client certificate's key file")
    inbox_prefix: str = Field(default="_INBOX", description="this user's own reply-inbox prefix")
    timeout: Duration = Field(
        default=timedelta(seconds=5),
        gt=timedelta(0),
        description="how long a request to NATS may take, and a one-shot command's wait for a first connection",
    )

    _url_from: str = PrivateAttr(default="")
    _credentials_from: str = PrivateAttr(default="")

    @field_validator("url")
    @classmethod
    def _servers_given(cls, value: str | None) -> str | None:
        if value is not None and not [u for u in value.split(",") if u.strip()]:
            raise ValueError("give at least one NATS server URL")
        return value

    @property
    def url_from(self) -> str:
        """Where the server URL came from, as said in logs and errors."""
        return self._url_from or ("the settings" if self.url else _DEFAULT_FROM)

    def resolved(self, environ: Mapping[str, str], origins: Mapping[str, str]) -> Self:
        """Itself completed from the context named, or the fallback one when no URL was given."""
        contexts = NatsContexts.of(environ)
        if self.context is not None:
            return self._with(_named(contexts, self.context), origins, environ.get("HOME"))
        if self.url is not None:
            return self._with(None, origins, None)
        return self._with(_fallback(contexts), origins, environ.get("HOME"))

    def _with(self, found: FoundContext | None, origins: Mapping[str, str], home: str | None) -> Self:
        """Itself with the fields not given taken from the context `found`, and where its URL and
        credentials came from; `SettingsError` when a server URL has a scheme nats-py does not
        connect with."""
        taken = _unset_fields(self, found.context, home) if found else {}
        settled = self.model_copy(update=taken)
        if "url" in origins:
            settled._url_from = origins["url"]
        elif found is not None and found.context.url:
            settled._url_from = found.source
        elif found is not None:
            settled._url_from = f"{_DEFAULT_FROM}: {found.source} names no url"
        said = {
            origins.get(f) or (found.source if found and f in taken else "")
            for f in _CREDENTIALS
            if f in taken or f in origins
        }
        settled._credentials_from = " and ".join(sorted(s for s in said if s))
        check_schemes(settled.servers, settled.url_from)
        return settled

    @classmethod
    def credentials_hint(cls) -> str:
        """How credentials are given, said when a server refuses those used."""
        given = [f"{' or '.join(cls._names(f))} ({what})" for f, what in _CREDENTIAL_KINDS.items()]
        context = " or ".join(cls._names("context"))
        return (
            f"credentials are given by {', '.join(given)}, a nats context holding them ({context}), "
            f"or the [{cls.config_table}] table of the --config file"
        )

    @classmethod
    def _names(cls, field: str) -> tuple[str, str]:
        return ((*cls.flag_aliases.get(field, ()), flag_of(cls, field))[0], env_of(cls, field))

    @property
    def servers(self) -> tuple[str, ...]:
        return tuple(u.strip() for u in (self.url or DEFAULT_URL).split(",") if u.strip())

    def options(self, name: str) -> BusOptions:
        from registry.wire import BusOptions  # noqa: PLC0415 (nats-py's, loaded by a program that connects)

        return BusOptions(
            servers=self.servers,
            servers_from=self.url_from,
            name=name,
            creds=self.creds,
            nkey_seed=self.nkey,
            user=self.user,
            password=self.password,
            token=self.token,
            tls_ca=self.ca,
            tls_cert=self.cert,
            tls_key=self.key,
            inbox_prefix=self.inbox_prefix,
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            credentials_from=self._credentials_from,
            credentials_hint=self.credentials_hint(),
        )


_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,15}")  # RFC 3986's shape, short: a real scheme's


def check_schemes(servers: tuple[str, ...], source: str) -> None:
    """`SettingsError` (naming where the URLs came from and the scheme, never a URL: it may hold a
    password) unless every server's scheme is one nats-py connects with, all of one kind."""
    schemes = [url.partition("://")[0].lower() if "://" in url else "nats" for url in servers]
    where = f"NATS server URL (from {source})"
    for scheme in schemes:
        if scheme not in NATS_SCHEMES + WEBSOCKET_SCHEMES:
            # Named only when it reads as a scheme: what precedes `://` may be part of a password
            # (`user:pa://ss@host`, a URL without a scheme).
            named = f"the scheme {scheme}://" if _SCHEME.fullmatch(scheme) else "its scheme"
            raise SettingsError(
                where,
                f"{named} is not one nats-py connects with: nats://, tls://, ws:// or wss:// "
                "(a URL without one, host:4222, is nats://)",
            )
    websocket = {scheme in WEBSOCKET_SCHEMES for scheme in schemes}
    if websocket == {True, False}:
        raise SettingsError(where, "nats:// or tls:// mixed with ws:// or wss://: nats-py takes one kind")
    if websocket == {True} and importlib.util.find_spec("aiohttp") is None:
        raise SettingsError(where, "ws:// and wss:// need the aiohttp package, not installed: pip install aiohttp")


# The fields that say who connects, and what each is.
_CREDENTIAL_KINDS = {
    "creds": "a .creds file: JWT accounts",
    "nkey": "an nkey seed file: static accounts",
    "user": "a user name, with --password or NATS_PASSWORD",
    "token": "a token",
}
_CREDENTIALS = (*_CREDENTIAL_KINDS, "password")

# A context's fields that are settings of the same name, by kind of value.
_CONTEXT_PATHS = ("creds", "nkey", "ca", "cert", "key")
_CONTEXT_TEXTS = ("url", "user", "inbox_prefix")
_CONTEXT_SECRETS = ("password", "token")


class FoundContext(NamedTuple):
    source: str  # which context, and why it was read: said in logs and errors
    context: NatsContext


def _named(contexts: NatsContexts | None, name: str) -> FoundContext:
    if contexts is None:
        raise SettingsError(f"nats context {name!r}", "neither XDG_CONFIG_HOME nor HOME says where contexts are")
    return FoundContext(f"nats context {name!r} at {contexts.path(name)}", contexts.read(name))


def _fallback(contexts: NatsContexts | None) -> FoundContext | None:
    """The `nats` CLI's selected context, else `mesh-provisioner-dev`'s while the dev loop runs."""
    if contexts is None:
        return None
    selected = contexts.selected()
    if selected is not None:
        return FoundContext(
            f"the nats CLI's selected context {selected!r} at {contexts.path(selected)}", contexts.read(selected)
        )
    dev = contexts.dev()
    return FoundContext(f"{DEV_CONTEXT}'s context at {contexts.path(DEV_CONTEXT)}", dev) if dev else None


def _unset_fields(settings: BusSettings, context: NatsContext, home: str | None) -> dict[str, Any]:
    """The fields `context` sets that `settings` was not given, as `BusSettings` values; a path
    starting with `~/` is under `home`, as the `nats` CLI reads it."""
    found: dict[str, Any] = {field: _under_home(getattr(context, field), home) for field in _CONTEXT_PATHS}
    found |= {field: getattr(context, field) or None for field in _CONTEXT_TEXTS}
    found |= {
        field: getattr(context, field) for field in _CONTEXT_SECRETS if getattr(context, field).get_secret_value()
    }
    return {f: v for f, v in found.items() if v is not None and f not in settings.model_fields_set}


def _under_home(text: str, home: str | None) -> Path | None:
    if not text:
        return None
    if home and (text == "~" or text.startswith("~/")):
        return Path(home) / text[2:]
    return Path(text)


S = TypeVar("S", bound=EdgeSettings)

# Tables of the config file read by shared models; a program's own model reads the rest.
_SHARED_TABLES = frozenset({BusSettings.config_table})


# -- names -------------------------------------------------------------------------------------


def flag_of(model_cls: type[EdgeSettings], field: str) -> str:
    """The command-line flag of `field`: `--compile-interval`, `--nats-url`, or the one its
    `CommandLine` names (`--json`)."""
    info = model_cls.model_fields.get(field)
    named = _command_line(info).flag if info is not None else None
    return named or "--" + "-".join(p for p in (model_cls.flag_prefix, field.replace("_", "-")) if p)


def setting_of(model_cls: type[EdgeSettings], field: str) -> str:
    """`field` as an error names it, with where it is given: `grants_file (--grants-file,
    MESH_PROVISIONER_GRANTS_FILE)`."""
    return f"{field} ({flag_of(model_cls, field)}, {env_of(model_cls, field)})"


def env_of(model_cls: type[EdgeSettings], field: str) -> str:
    """The environment variable of `field`: `MESH_PROVISIONER_COMPILE_INTERVAL`, `NATS_URL`."""
    return f"{model_cls.env_prefix}{field}".upper()


def _file_key_of(model_cls: type[EdgeSettings], field: str) -> str:
    return f"[{model_cls.config_table}] {field}" if model_cls.config_table else field


def _dest_of(model_cls: type[EdgeSettings], field: str) -> str:
    return flag_of(model_cls, field)[2:].replace("-", "_")


_AS_A_FLAG = CommandLine()


def _command_line(field: FieldInfo) -> CommandLine:
    return next((said for said in field.metadata if isinstance(said, CommandLine)), _AS_A_FLAG)


def _given_as(model_cls: type[EdgeSettings], name: str) -> str:
    """How an error names the setting `name`: its flag or argument, and its variable."""
    field = model_cls.model_fields[name]
    said = _command_line(field)
    given = f"argument {_metavar(name, field)}" if said.positional else f"flag {flag_of(model_cls, name)}"
    return given if model_cls.command_line_only else f"{given}, env {env_of(model_cls, name)}"


# -- flags -------------------------------------------------------------------------------------


def add_settings_arguments(
    parser: argparse.ArgumentParser, model_cls: type[EdgeSettings], title: str, *, leave_out: Collection[str] = ()
) -> None:
    """An argument for every field of `model_cls` but those of `leave_out` (settings a command does
    not use: a variable or the file may still hold them): a `--flag` in a help group `title`, or a
    positional one. Values stay text for pydantic to validate; read the given ones back with
    `given_flags`."""
    group = parser.add_argument_group(title)
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for name, field in model_cls.model_fields.items():
        if name in leave_out:
            continue
        said = _command_line(field)
        if said.positional:
            parser.add_argument(_dest_of(model_cls, name), **_positional(model_cls, name, field))
            continue
        names = (*model_cls.flag_aliases.get(name, ()), flag_of(model_cls, name))
        where = group if said.exclusive is None else _exclusive(group, exclusive, said.exclusive)
        where.add_argument(*names, dest=_dest_of(model_cls, name), **_flag(model_cls, name, field))


def _exclusive(
    group: argparse._ArgumentGroup, made: dict[str, argparse._MutuallyExclusiveGroup], name: str
) -> argparse._MutuallyExclusiveGroup:
    """The flags `name` of `group`, of which at most one may be given; made at the first."""
    if name not in made:
        made[name] = group.add_mutually_exclusive_group()
    return made[name]


def given_flags(args: argparse.Namespace, model_cls: type[EdgeSettings]) -> dict[str, Any]:
    """The fields of `model_cls` given on the command line: the text given (a list of them for a
    repeated flag, `True` for a switch)."""
    given = {name: getattr(args, _dest_of(model_cls, name), None) for name in model_cls.model_fields}
    return {name: value for name, value in given.items() if value is not None}


def _flag(model_cls: type[EdgeSettings], name: str, field: FieldInfo) -> dict[str, Any]:
    """argparse's keywords for the flag of `name`: a switch for a `bool`, else one value (or more)."""
    said = _command_line(field)
    described = {"default": None, "help": _help(model_cls, name, field)}
    if _without_none(field.annotation) is bool:
        return described | {"action": "store_true"}
    required = model_cls.command_line_only and field.is_required()  # else a variable or the file may give it
    return described | {
        "metavar": _metavar(name, field),
        "choices": _choices(field),
        "action": "append" if said.repeat else "store",
        "required": required,
    }


def _positional(model_cls: type[EdgeSettings], name: str, field: FieldInfo) -> dict[str, Any]:
    given = {"metavar": _metavar(name, field), "choices": _choices(field), "help": _help(model_cls, name, field)}
    return given if field.is_required() else given | {"nargs": "?", "default": None}


def _choices(field: FieldInfo) -> tuple[object, ...] | None:
    return typing.get_args(_without_none(field.annotation)) if _command_line(field).choices else None


def _help(model_cls: type[EdgeSettings], name: str, field: FieldInfo) -> str:
    notes = [note for note in (_default_note(model_cls, field), _where(model_cls, name)) if note]
    described = field.description or name.replace("_", " ")
    return (f"{described} ({'; '.join(notes)})" if notes else described).replace("%", "%%")


def _default_note(model_cls: type[EdgeSettings], field: FieldInfo) -> str | None:
    if field.is_required():  # a command's argument: argparse says it is required
        return None if model_cls.command_line_only else "required"
    shown = _shown_default(field)
    unsaid = model_cls.command_line_only and shown in ("none", "False")  # a switch, a narrowing not asked
    return None if unsaid else f"default {shown}"


def _where(model_cls: type[EdgeSettings], name: str) -> str | None:
    if model_cls.command_line_only:
        return None
    return f"env {env_of(model_cls, name)}, file {_file_key_of(model_cls, name)}"


def _shown_default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("shown_default"), str):
        return str(extra["shown_default"])
    return _shown(field.get_default(call_default_factory=True))


def _shown(value: object) -> str:
    if value is None or value == ():
        return "none"
    if isinstance(value, timedelta):
        return duration_text(value)
    return str(value)


def _metavar(name: str, field: FieldInfo) -> str:
    named = _command_line(field).metavar
    if named is not None:
        return named
    annotation = _without_none(field.annotation)
    if typing.get_origin(annotation) is Literal:
        return "{" + ",".join(str(choice) for choice in typing.get_args(annotation)) + "}"
    known = {timedelta: "DURATION", Path: "PATH", int: "N"}
    return known.get(annotation, name.upper()) if isinstance(annotation, type) else name.upper()


def _without_none(annotation: Any) -> Any:
    """The type a value is given as: `timedelta` for `Duration | None`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = rest[0] if len(rest) == 1 else annotation
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation


# -- loading -----------------------------------------------------------------------------------


def load_settings(
    model_cls: type[S], flags: Mapping[str, Any], config_file: Path | None, environ: Mapping[str, str]
) -> S:
    """`model_cls` from `flags` over `environ` over `config_file` over its defaults.

    Only `environ` is read (never `os.environ`), so a caller and its tests say what the
    environment is. Raises `SettingsError` for anything that cannot be read."""
    _refuse_unknown_variables(model_cls, environ)
    from_file, from_env = _file_values(model_cls, config_file), _env_values(model_cls, environ)
    from_flags = {name: value for name, value in flags.items() if value is not None}
    try:
        settings = model_cls.model_validate(from_file | from_env | from_flags)
    except ValidationError as err:
        raise SettingsError(_sources(model_cls, config_file), describe_validation(err, model_cls)) from None
    origins = {name: f"config file {config_file}" for name in from_file}
    origins |= {name: env_of(model_cls, name) for name in from_env} | {name: "the command line" for name in from_flags}
    return settings.resolved(environ, origins)


def _env_values(model_cls: type[EdgeSettings], environ: Mapping[str, str]) -> dict[str, str]:
    if model_cls.command_line_only:
        return {}
    upper = {name.upper(): value for name, value in environ.items()}
    return {name: upper[env_of(model_cls, name)] for name in model_cls.model_fields if env_of(model_cls, name) in upper}


def _refuse_unknown_variables(model_cls: type[EdgeSettings], environ: Mapping[str, str]) -> None:
    prefix = env_of(model_cls, "")
    if not prefix or model_cls.command_line_only:
        return
    known = {env_of(model_cls, name) for name in model_cls.model_fields}
    ours = (n.upper() for n in environ if n.upper().startswith(prefix))
    unknown = sorted(n for n in ours if n not in known and not n.startswith(model_cls.foreign_env_prefixes))
    if unknown:
        names = ", ".join(sorted(known))
        hint = did_you_mean(unknown[0], known)
        raise SettingsError("settings", f"unknown environment variable {unknown[0]}{hint}; known: {names}")


def _file_values(model_cls: type[EdgeSettings], config_file: Path | None) -> dict[str, Any]:
    if config_file is None or model_cls.command_line_only:
        return {}
    source = f"config file {config_file}"
    try:
        data = read_toml(config_file, max_bytes=MAX_SETTINGS_FILE_BYTES)
    except (FileNotFoundError, IsADirectoryError):
        raise SettingsError(source, "not found") from None
    except OSError as err:
        raise SettingsError(source, f"cannot be read: {err.strerror or err}") from None
    except TomlRefused as err:
        raise SettingsError(source, err.reason) from None
    if model_cls.config_table is None:
        return {key: value for key, value in data.items() if key not in _SHARED_TABLES}
    table = data.get(model_cls.config_table, {})
    if not isinstance(table, dict):
        raise SettingsError(source, f"{model_cls.config_table!r} must be a table: [{model_cls.config_table}]")
    return table


def _sources(model_cls: type[EdgeSettings], config_file: Path | None) -> str:
    if model_cls.command_line_only:
        return "settings (the command line)"
    flags = f"--{model_cls.flag_prefix}-* flags" if model_cls.flag_prefix else "flags"
    file = f", config file {config_file}" if config_file else ""
    if file and model_cls.config_table:
        file += f" [{model_cls.config_table}]"
    return f"settings ({flags}, {env_of(model_cls, '')}* environment{file})"


# -- errors ------------------------------------------------------------------------------------


def describe_validation(err: ValidationError, model_cls: type[EdgeSettings] | None = None) -> str:
    """Every problem in `err`, `; `-separated, naming the field (with its flag and environment
    variable when `model_cls` is given) and pydantic's complaint, never the value given."""
    return "; ".join(_describe_one(error, model_cls) for error in err.errors(include_url=False, include_input=False))


def _describe_one(error: Any, model_cls: type[EdgeSettings] | None) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "?"
    complaint = str(error["msg"]).removeprefix("Value error, ")  # a validator of ours says it all
    if model_cls is None:
        return f"{field}: {complaint}"
    if error["type"] == "extra_forbidden":
        hint = did_you_mean(field, model_cls.model_fields)
        return f"{field}: unknown setting{hint}; known: {', '.join(model_cls.model_fields)}"
    top = str(error["loc"][0]) if error["loc"] else ""
    if top not in model_cls.model_fields:
        return f"{field}: {complaint}"
    return f"{field}: {complaint} ({_given_as(model_cls, top)})"
