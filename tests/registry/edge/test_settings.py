"""The shared edge: settings from flags, environment, file and defaults; flags generated from the models."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import typing
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import pytest
from pydantic import AfterValidator, Field, TypeAdapter

from mesh_dev.cli import build_parser as dev_parser
from provisioner.commands.cli import build_parser as server_parser
from provisioner.seat.settings import ServerSettings
from provisioner.settings import (
    CommandLogSettings,
    GrantsArguments,
    QueryArguments,
    RemoveNodeArguments,
    TopArguments,
)
from provisioner_client.cli import WATCH_AND_ROLLOUT
from provisioner_client.cli import build_parser as client_parser
from provisioner_client.settings import ClientSettings
from registry.edge import (
    DEV_CONTEXT,
    BusSettings,
    CommandLine,
    Duration,
    EdgeSettings,
    add_settings_arguments,
    env_of,
    flag_of,
    given_flags,
    load_settings,
)
from registry.errors import SettingsError


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        pytest.param(2, 2, id="a number of seconds"),
        pytest.param("2", 2, id="numeric text as seconds"),
        pytest.param("0.5", 0.5, id="fractional text as seconds"),
        pytest.param("PT1H", 3600, id="ISO 8601"),
    ],
)
def test_a_duration_is_seconds_or_iso_8601(given: object, seconds: float) -> None:
    assert TypeAdapter(Duration).validate_python(given) == timedelta(seconds=seconds)


def test_a_duration_in_the_environment_or_the_file_may_be_plain_seconds(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('cursor_ttl = "5"\n')
    environ = {"MESH_PROVISIONER_COMPILE_INTERVAL": "2"}
    settings = load_settings(ServerSettings, {}, config, environ)
    assert (settings.compile_interval, settings.cursor_ttl) == (timedelta(seconds=2), timedelta(seconds=5))


def test_positive_durations_stay_positive() -> None:
    with pytest.raises(SettingsError, match="compile_interval"):
        load_settings(ServerSettings, {"compile_interval": "0"}, None, {})


def test_nats_settings_come_from_flags_environment_and_the_files_table_alike(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('bucket_replicas = 3\n[nats]\nurl = "nats://file:4222"\nuser = "from-file"\ntimeout = "PT7S"\n')
    environ = {"NATS_USER": "from-env", "NATS_INBOX_PREFIX": "_INBOX_env", "NATS_SERVER_NAME": "not ours"}
    bus = load_settings(BusSettings, {"inbox_prefix": "_INBOX_flag"}, config, environ)
    assert (bus.url, bus.user, bus.inbox_prefix) == ("nats://file:4222", "from-env", "_INBOX_flag")
    assert bus.timeout == timedelta(seconds=7)
    assert load_settings(ServerSettings, {}, config, {}).bucket_replicas == 3  # [nats] is not the server's


@pytest.mark.parametrize(
    ("toml", "complaint"),
    [
        pytest.param('[nats]\nurll = "x"\n', r"urll: unknown setting", id="a misspelt key of [nats]"),
        pytest.param('nats = "x"\n', r"must be a table", id="nats not a table"),
    ],
)
def test_the_nats_table_is_checked_like_the_rest(tmp_path: Path, toml: str, complaint: str) -> None:
    config = tmp_path / "server.toml"
    config.write_text(toml)
    with pytest.raises(SettingsError, match=complaint):
        load_settings(BusSettings, {}, config, {})


def test_the_servers_prefix_leaves_the_clients_variables_alone() -> None:
    load_settings(ServerSettings, {}, None, {"MESH_PROVISIONER_CLIENT_NODE": "n1"})
    with pytest.raises(SettingsError, match="unknown environment variable MESH_PROVISIONER_CLIENT_NOED"):
        load_settings(ClientSettings, {"node": "n1"}, None, {"MESH_PROVISIONER_CLIENT_NOED": "n1"})


def test_a_wrong_value_names_field_flag_and_variable_but_never_the_value() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(BusSettings, {"timeout": "s3cret-value"}, None, {"NATS_URL": " , "})
    message = str(raised.value)
    assert "timeout" in message and "--nats-timeout" in message and "NATS_TIMEOUT" in message
    assert "url" in message and "--nats-url" in message and "NATS_URL" in message
    assert "s3cret-value" not in message


@pytest.mark.parametrize(
    ("model", "field", "flag", "variable"),
    [
        pytest.param(
            ServerSettings, "compile_interval", "--compile-interval", "MESH_PROVISIONER_COMPILE_INTERVAL", id="server"
        ),
        pytest.param(
            ClientSettings, "backoff_max", "--backoff-max", "MESH_PROVISIONER_CLIENT_BACKOFF_MAX", id="client"
        ),
        pytest.param(BusSettings, "inbox_prefix", "--nats-inbox-prefix", "NATS_INBOX_PREFIX", id="nats"),
    ],
)
def test_a_field_names_its_flag_and_variable(model: type[EdgeSettings], field: str, flag: str, variable: str) -> None:
    assert (flag_of(model, field), env_of(model, field)) == (flag, variable)


def test_only_the_flags_given_are_read_back_as_the_text_given() -> None:
    args = server_parser().parse_args(["serve", "--compile-interval", "PT5M", "--nats-url", "nats://a:4222"])
    assert given_flags(args, ServerSettings) == {"compile_interval": "PT5M"}
    assert given_flags(args, BusSettings) == {"url": "nats://a:4222"}


class StatusSettings(ClientSettings):
    """The client's settings as `status` takes them: none of how a watch paces itself or a rollout goes."""

    left_out: ClassVar[tuple[str, ...]] = WATCH_AND_ROLLOUT


COMMANDS = [
    pytest.param(server_parser, ["serve"], [ServerSettings, BusSettings], id="mesh-provisioner serve"),
    pytest.param(server_parser, ["query"], [CommandLogSettings, BusSettings], id="mesh-provisioner query"),
    pytest.param(server_parser, ["top"], [CommandLogSettings, BusSettings], id="mesh-provisioner top"),
    pytest.param(
        server_parser, ["remove-node", "n1"], [CommandLogSettings, BusSettings], id="mesh-provisioner remove-node"
    ),
    pytest.param(client_parser, ["reconcile"], [ClientSettings, BusSettings], id="client reconcile"),
    pytest.param(client_parser, ["status"], [StatusSettings, BusSettings], id="client status"),
    pytest.param(dev_parser, [], [ServerSettings], id="mesh-provisioner-dev"),
]


@pytest.mark.parametrize(("parser", "command", "models"), COMMANDS)
def test_help_lists_every_field_of_every_settings_model_the_command_takes(
    parser: Callable[[], argparse.ArgumentParser],
    command: list[str],
    models: list[type[EdgeSettings]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args([*command, "--help"])
    shown = capsys.readouterr().out
    missing = [
        f"{flag_of(model, field)} ({env_of(model, field)})"
        for model in models
        for field in model.model_fields
        if field not in getattr(model, "left_out", ())
        if flag_of(model, field) not in shown or env_of(model, field) not in shown.replace("\n", "").replace(" ", "")
    ]
    aliases = [alias for model in models for names in model.flag_aliases.values() for alias in names]
    assert missing == [] and [alias for alias in aliases if f"{alias} " not in shown] == []


# -- a command's arguments -----------------------------------------------------------------------


class Arguments(EdgeSettings):
    """A command's arguments, given every way the command line gives one."""

    command_line_only: ClassVar[bool] = True

    target: Annotated[str, CommandLine(positional=True, metavar="TARGET")] = Field(min_length=1)
    what: Annotated[Literal["one", "two"], CommandLine(positional=True, choices=True)] = "one"
    level: Annotated[Literal["low", "high"] | None, CommandLine(choices=True)] = None
    as_json: Annotated[bool, CommandLine(flag="--json", exclusive="output")] = False
    jsonl: Annotated[bool, CommandLine(exclusive="output")] = False
    tag: Annotated[tuple[str, ...], CommandLine(repeat=True, metavar="TAG")] = ()
    out: Path = Field(description="where it goes")
    pause: Duration = Field(default=timedelta(seconds=2), gt=timedelta(0), description="how long it waits")


def arguments_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="command")
    add_settings_arguments(parser, Arguments, "arguments")
    return parser


def test_a_commands_arguments_are_read_from_its_command_line_alone(tmp_path: Path) -> None:
    argv = ["t", "two", "--level", "high", "--json", "--tag", "a", "--tag", "b", "--out", "o", "--pause", "PT1M"]
    flags = given_flags(arguments_parser().parse_args(argv), Arguments)
    given = {"target": "t", "what": "two", "level": "high", "as_json": True, "tag": ["a", "b"], "out": "o"}
    assert flags == given | {"pause": "PT1M"}
    config = tmp_path / "config.toml"
    config.write_text("pause = 9\nunknown = 1\n")
    environ = {"PAUSE": "5", "TARGET": "env", "JSONL": "true", "MESH_PROVISIONER_PAUSE": "5"}
    read = load_settings(Arguments, flags, config, environ).model_dump()
    assert read == given | {"tag": ("a", "b"), "out": Path("o"), "jsonl": False, "pause": timedelta(minutes=1)}


def test_an_argument_not_given_is_its_default() -> None:
    flags = given_flags(arguments_parser().parse_args(["t", "--out", "o"]), Arguments)
    assert flags == {"target": "t", "out": "o"}
    read = load_settings(Arguments, flags, None, {})
    assert (read.what, read.level, read.as_json, read.tag, read.pause) == ("one", None, False, (), timedelta(seconds=2))


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["t", "three", "--out", "o"], id="a positional argument outside its choices"),
        pytest.param(["t", "--level", "mid", "--out", "o"], id="a flag outside its choices"),
        pytest.param(["t", "--json", "--jsonl", "--out", "o"], id="two flags of one exclusive group"),
        pytest.param(["t"], id="a required flag left out"),
        pytest.param(["--out", "o"], id="a required positional argument left out"),
        pytest.param(["t", "--out", "o", "--json", "yes"], id="a value after a switch"),
    ],
)
def test_argparse_refuses_what_the_generated_arguments_do_not_take(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        arguments_parser().parse_args(argv)
    assert raised.value.code == 2


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        pytest.param({"target": "", "out": "o"}, "least 1 character (argument TARGET)", id="a positional argument"),
        pytest.param({"target": "t", "out": "o", "pause": "-1"}, "(flag --pause)", id="a flag"),
    ],
)
def test_a_wrong_argument_is_named_as_given_and_never_as_a_variable(flags: dict[str, str], names: str) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(Arguments, flags, None, {})
    assert str(raised.value).startswith("settings (the command line): ")
    assert names in str(raised.value) and "env" not in str(raised.value)


@pytest.mark.parametrize("field", WATCH_AND_ROLLOUT)
def test_client_status_takes_no_flag_of_watch_mode_or_rollouts(field: str) -> None:
    with pytest.raises(SystemExit) as raised:
        client_parser().parse_args(["status", flag_of(ClientSettings, field), "1"])
    assert raised.value.code == 2


def _even(n: int) -> int:
    if n % 2:
        raise ValueError("an even number of pairs")
    return n


class Pairs(EdgeSettings):
    command_line_only: ClassVar[bool] = True

    count: Annotated[int, AfterValidator(_even)] = 0


def test_a_validators_own_complaint_is_said_as_it_is() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(Pairs, {"count": "3"}, None, {})
    assert str(raised.value) == "settings (the command line): count: an even number of pairs (flag --count)"


def test_the_help_of_arguments_says_only_the_defaults_worth_saying() -> None:
    shown = " ".join(arguments_parser().format_help().split())
    assert "TARGET" in shown and "--out PATH where it goes --pause DURATION how long it waits (default 2s)" in shown
    assert "{one,two} what (default one)" in shown and "[--json | --jsonl]" in shown and "--tag TAG tag --out" in shown
    assert "env" not in shown and "file" not in shown and "default none" not in shown and "False" not in shown


def shown_as(model: type[EdgeSettings], field: str) -> str:
    """How `--help` names a field of a command's arguments: its positional argument or its flag."""
    info = model.model_fields[field]
    said = next((m for m in info.metadata if isinstance(m, CommandLine)), CommandLine())
    if not said.positional:
        return flag_of(model, field)
    return said.metavar or "{" + ",".join(typing.get_args(info.annotation)) + "}"


@pytest.mark.parametrize(
    ("command", "model"),
    [
        pytest.param("query", QueryArguments, id="query"),
        pytest.param("top", TopArguments, id="top"),
        pytest.param("remove-node", RemoveNodeArguments, id="remove-node"),
        pytest.param("grants", GrantsArguments, id="grants"),
    ],
)
def test_help_lists_every_argument_of_every_command(
    command: str, model: type[EdgeSettings], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        server_parser().parse_args([command, "--help"])
    shown = capsys.readouterr().out
    described = " ".join(shown.split())
    missing = [
        field
        for field, info in model.model_fields.items()
        if shown_as(model, field) not in shown or " ".join(str(info.description).split()) not in described
    ]
    assert model.command_line_only and missing == []


# -- the nats CLI's names and contexts -----------------------------------------------------------

NATS_CLI_FLAGS = [
    pytest.param(["-s", "nats://a:4222,nats://b:4222"], "url", "nats://a:4222,nats://b:4222", id="-s"),
    pytest.param(["--server", "nats://a:4222"], "url", "nats://a:4222", id="--server"),
    pytest.param(["--context", "prod"], "context", "prod", id="--context"),
    pytest.param(["--creds", "ops.creds"], "creds", "ops.creds", id="--creds"),
    pytest.param(["--nkey", "ops.nk"], "nkey", "ops.nk", id="--nkey"),
    pytest.param(["--user", "ops"], "user", "ops", id="--user"),
    pytest.param(["--password", "pw"], "password", "pw", id="--password"),
    pytest.param(["--tlsca", "ca.pem"], "ca", "ca.pem", id="--tlsca"),
    pytest.param(["--tlscert", "cert.pem"], "cert", "cert.pem", id="--tlscert"),
    pytest.param(["--tlskey", "key.pem"], "key", "key.pem", id="--tlskey"),
]


@pytest.mark.parametrize(("argv", "field", "value"), NATS_CLI_FLAGS)
@pytest.mark.parametrize(
    ("parser", "command"),
    [
        pytest.param(server_parser, ["query"], id="query"),
        pytest.param(server_parser, ["serve"], id="serve"),
        pytest.param(server_parser, ["remove-node", "n1"], id="remove-node"),
        pytest.param(server_parser, ["top"], id="top"),
        pytest.param(client_parser, ["status"], id="client status"),
        pytest.param(client_parser, ["reconcile"], id="client reconcile"),
    ],
)
def test_every_command_takes_the_nats_clis_flags_for_its_own(
    parser: Callable[[], argparse.ArgumentParser], command: list[str], argv: list[str], field: str, value: str
) -> None:
    assert given_flags(parser().parse_args([*command, *argv]), BusSettings) == {field: value}


def nats_config(
    tmp_path: Path, contexts: Mapping[str, Mapping[str, object]], selected: str | None = None
) -> dict[str, str]:
    """An environment whose XDG_CONFIG_HOME holds these `nats` CLI contexts, `selected` selected."""
    folder = tmp_path / "config" / "nats"
    for name, fields in contexts.items():
        (folder / "context").mkdir(parents=True, exist_ok=True)
        (folder / "context" / f"{name}.json").write_text(json.dumps(fields))
    if selected is not None:
        (folder / "context.txt").write_text(selected + "\n")
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path / "home")}


def resolved_url(flags: dict[str, str], config: Path | None, environ: dict[str, str]) -> tuple[str, str]:
    options = load_settings(BusSettings, flags, config, environ).options("test")
    return ",".join(options.servers), options.servers_from


SOURCES = ["a flag", "NATS_URL", "the file's url", "the context named", "the selected context", "the dev context"]
SAID = [
    "the command line",
    "NATS_URL",
    "config file",
    "nats context 'named' at",
    "the nats CLI's selected context 'selected' at",
    f"{DEV_CONTEXT}'s context at",
    "the default",
]


@pytest.mark.parametrize("first", range(len(SOURCES) + 1), ids=[*(f"{s} first" for s in SOURCES), "the default last"])
def test_the_server_comes_from_flag_variable_file_context_selected_dev_default_in_that_order(
    tmp_path: Path, first: int
) -> None:
    """Every source from `first` on is there; the first of them gives the server and is named."""
    present = SOURCES[first:]
    contexts: dict[str, dict[str, object]] = {
        "named": {"url": "nats://named:4222"},
        "selected": {"url": "nats://selected:4222"},
    }
    if "the dev context" in present:
        contexts[DEV_CONTEXT] = {"url": "nats://dev:4222", "mesh_provisioner_dev_pid": os.getpid()}
    environ = nats_config(tmp_path, contexts, "selected" if "the selected context" in present else None)
    environ |= {"NATS_URL": "nats://NATS_URL:4222"} if "NATS_URL" in present else {}
    flags = {"url": "nats://flag:4222"} if "a flag" in present else {}
    flags |= {"context": "named"} if "the context named" in present else {}
    config = tmp_path / "client.toml"
    config.write_text('[nats]\nurl = "nats://file:4222"\n' if "the file's url" in present else "")
    url, said = resolved_url(flags, config, environ)
    expected = [
        "nats://flag:4222",
        "nats://NATS_URL:4222",
        "nats://file:4222",
        "nats://named:4222",
        "nats://selected:4222",
        "nats://dev:4222",
        "nats://127.0.0.1:4222",
    ][first]
    assert (url, said.startswith(SAID[first])) == (expected, True), said


def test_nats_context_names_a_context_as_the_flag_does(tmp_path: Path) -> None:
    environ = nats_config(tmp_path, {"named": {"url": "nats://named:4222"}}) | {"NATS_CONTEXT": "named"}
    assert resolved_url({}, None, environ)[0] == "nats://named:4222"


def test_without_xdg_config_home_the_contexts_are_under_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "nats" / "context").mkdir(parents=True)
    (home / ".config" / "nats" / "context" / "lab.json").write_text('{"url": "nats://lab:4222"}')
    (home / ".config" / "nats" / "context.txt").write_text("lab")
    assert resolved_url({}, None, {"HOME": str(home)})[0] == "nats://lab:4222"
    assert resolved_url({}, None, {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "empty")})[0] == (
        "nats://127.0.0.1:4222"
    )


def test_a_context_gives_what_was_not_given_otherwise(tmp_path: Path) -> None:
    lab = {
        "url": "nats://lab:4222",
        "creds": "~/lab.creds",
        "nkey": "",
        "user": "ops",
        "password": "s3cret",
        "cert": "/c.pem",
        "key": "/k.pem",
        "ca": "/ca.pem",
        "inbox_prefix": "_INBOX_ops",
        "nsc": "nsc://ignored",
    }
    environ = nats_config(tmp_path, {"lab": lab}) | {"NATS_CONTEXT": "lab", "NATS_USER": "me"}
    bus = load_settings(BusSettings, {"ca": "/mine.pem"}, None, environ)
    home = Path(environ["HOME"])
    assert (bus.url, bus.creds, bus.nkey, bus.user, bus.ca, bus.cert, bus.key, bus.inbox_prefix) == (
        "nats://lab:4222",
        home / "lab.creds",
        None,
        "me",
        Path("/mine.pem"),
        Path("/c.pem"),
        Path("/k.pem"),
        "_INBOX_ops",
    )
    assert bus.password is not None and bus.password.get_secret_value() == "s3cret"


def test_a_url_given_without_a_context_takes_nothing_from_the_selected_one(tmp_path: Path) -> None:
    """The selected context's credentials are for its server, never for one named elsewhere."""
    environ = nats_config(tmp_path, {"prod": {"url": "nats://prod:4222", "creds": "/prod.creds"}}, "prod")
    bus = load_settings(BusSettings, {"url": "nats://elsewhere:4222"}, None, environ)
    assert (bus.url, bus.creds) == ("nats://elsewhere:4222", None)


def test_a_dev_context_whose_loop_is_gone_is_passed_over(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead = {"url": "nats://dev:4222", "mesh_provisioner_dev_pid": int(gone.stdout)}
    assert resolved_url({}, None, nats_config(tmp_path, {DEV_CONTEXT: dead})) == (
        "nats://127.0.0.1:4222",
        "the default",
    )


@pytest.mark.parametrize(
    ("context", "selected", "complaint"),
    [
        pytest.param(None, "missing", r"nats context 'missing' .*: no such context", id="a selected context missing"),
        pytest.param("missing", None, r"nats context 'missing' .*: no such context", id="a context named missing"),
        pytest.param("../../etc/x", None, r"not a context name", id="a name that climbs out"),
        pytest.param("broken", None, r"not a context: it is not valid JSON", id="not JSON"),
        pytest.param("deep", None, r"not a context: it nests at least \d+ levels deep", id="nested too deep"),
        pytest.param("wrong", None, r"not a context: url: Input should be a valid string", id="a wrong type"),
        pytest.param("nsc", None, r"sets nsc, tls_first, which mesh-provisioner cannot connect by", id="nsc"),
    ],
)
def test_a_context_that_cannot_be_used_is_a_settings_error_naming_it(
    tmp_path: Path, context: str | None, selected: str | None, complaint: str
) -> None:
    nsc = {"url": "nats://x:4222", "nsc": "nsc://op/acc/user", "tls_first": True}
    environ = nats_config(tmp_path, {"wrong": {"url": 4222, "password": "s3cret"}, "nsc": nsc}, selected)
    folder = tmp_path / "config" / "nats" / "context"
    (folder / "broken.json").write_text('{"url": "nats://x:4222", "password": "s3cret"')
    (folder / "deep.json").write_text("[" * 100 + "]" * 100)
    with pytest.raises(SettingsError, match=complaint) as raised:
        load_settings(BusSettings, {"context": context} if context else {}, None, environ)
    assert "s3cret" not in str(raised.value)
