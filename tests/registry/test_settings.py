"""The shared edge: settings from flags, environment, file and defaults; flags generated from the models."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from mesh_dev.cli import build_parser as dev_parser
from provisioner.cli import build_parser as server_parser
from provisioner.settings import QuerySettings, ServerSettings
from provisioner_client.cli import build_parser as client_parser
from provisioner_client.settings import ClientSettings
from registry.errors import SettingsError
from registry.settings import (
    BusSettings,
    Duration,
    EdgeSettings,
    env_of,
    flag_of,
    given_flags,
    load_settings,
)


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
        pytest.param(ServerSettings, "compile_interval", "--compile-interval", "MESH_PROVISIONER_COMPILE_INTERVAL",
                     id="server"),
        pytest.param(ClientSettings, "backoff_max", "--backoff-max", "MESH_PROVISIONER_CLIENT_BACKOFF_MAX",
                     id="client"),
        pytest.param(BusSettings, "inbox_prefix", "--nats-inbox-prefix", "NATS_INBOX_PREFIX", id="nats"),
    ],
)  # fmt: skip
def test_a_field_names_its_flag_and_variable(model: type[EdgeSettings], field: str, flag: str, variable: str) -> None:
    assert (flag_of(model, field), env_of(model, field)) == (flag, variable)


def test_only_the_flags_given_are_read_back_as_the_text_given() -> None:
    args = server_parser().parse_args(["serve", "--compile-interval", "PT5M", "--nats-url", "nats://a:4222"])
    assert given_flags(args, ServerSettings) == {"compile_interval": "PT5M"}
    assert given_flags(args, BusSettings) == {"url": "nats://a:4222"}


COMMANDS = [
    pytest.param(server_parser, ["serve"], [ServerSettings, BusSettings], id="mesh-provisioner serve"),
    pytest.param(server_parser, ["query"], [QuerySettings, BusSettings], id="mesh-provisioner query"),
    pytest.param(client_parser, ["reconcile"], [ClientSettings, BusSettings], id="client reconcile"),
    pytest.param(client_parser, ["status"], [ClientSettings, BusSettings], id="client status"),
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
        if flag_of(model, field) not in shown or env_of(model, field) not in shown.replace("\n", "").replace(" ", "")
    ]
    assert missing == []
