"""Server settings: flags over environment over config file over defaults; unknown names refused. The
commands' arguments: from the command line alone, bounded by their types."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from provisioner.commands import tables
from provisioner.commands.cli import build_parser
from provisioner.commands.top import TopOptions
from provisioner.seat.settings import ServerSettings
from provisioner.settings import (
    STATES,
    GrantsArguments,
    QueryArguments,
    RemoveNodeArguments,
    State,
    TopArguments,
)
from registry.contract import MAX_STALE_AFTER_SECONDS, What
from registry.edge import EdgeSettings, given_flags, load_settings
from registry.errors import SettingsError

S = TypeVar("S", bound=EdgeSettings)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "server.toml"
    path.write_text('compile_interval = 600\nbucket_replicas = 3\nmax_cursors = 5\ncursor_ttl = "PT30S"\n')
    return path


def load(
    flags: dict[str, str], config_file: Path | None = None, environ: dict[str, str] | None = None
) -> ServerSettings:
    return load_settings(ServerSettings, flags, config_file, environ or {})


def test_defaults_without_flags_environment_or_file() -> None:
    settings = load({})
    assert settings.compile_interval == timedelta(hours=1)
    assert (settings.log_format, settings.log_level) == ("text", "INFO")


def test_flags_over_environment_over_file_over_defaults(config_file: Path) -> None:
    environ = {"MESH_PROVISIONER_BUCKET_REPLICAS": "2", "MESH_PROVISIONER_MAX_CURSORS": "7"}
    settings = load({"max_cursors": "9"}, config_file, environ)
    assert settings.max_cursors == 9  # flag over environment and file
    assert settings.bucket_replicas == 2  # environment over file
    assert settings.compile_interval == timedelta(minutes=10)  # file over default
    assert settings.cursor_ttl == timedelta(seconds=30)
    assert settings.bucket_history == 1  # default


@pytest.mark.parametrize(
    ("given", "mode"),
    [(None, "placed"), ("declared", "declared"), ("off", "off"), ("false", "off"), ("true", "placed"), ("no", "off")],
)
def test_pausing_on_failure_is_a_mode_and_a_yes_or_no_as_before(given: str | None, mode: str) -> None:
    environ = {"MESH_PROVISIONER_PAUSE_ON_FAILURE": given} if given is not None else {}
    assert load({}, environ=environ).pause_on_failure == mode


def test_an_unknown_pause_mode_is_refused() -> None:
    with pytest.raises(SettingsError, match="pause"):
        load({"pause_on_failure": "sometimes"})


def test_the_log_settings_are_settings_like_the_others(config_file: Path) -> None:
    settings = load({"log_level": "debug"}, config_file, {"MESH_PROVISIONER_LOG_FORMAT": "json"})
    assert (settings.log_format, settings.log_level) == ("json", "DEBUG")


def test_an_unknown_key_in_the_config_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("compile_intervall = 600\n")
    with pytest.raises(SettingsError, match="compile_intervall: unknown setting"):
        load({}, path)


def test_a_misspelt_environment_variable_is_an_error() -> None:
    with pytest.raises(SettingsError, match="MESH_PROVISIONER_COMPILE_INTERVALL"):
        load({}, environ={"MESH_PROVISIONER_COMPILE_INTERVALL": "60"})


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not found"):
        load({}, tmp_path / "nowhere.toml")


def test_a_config_file_that_is_not_toml_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("compile_interval = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load({}, path)


def test_a_bad_value_names_the_field_its_flag_and_variable() -> None:
    with pytest.raises(SettingsError) as raised:
        load({"bucket_replicas": "0"})
    assert "bucket_replicas" in str(raised.value)
    assert "--bucket-replicas" in str(raised.value)
    assert "MESH_PROVISIONER_BUCKET_REPLICAS" in str(raised.value)


def test_the_node_clients_variables_on_the_same_machine_are_left_to_it() -> None:
    assert load({}, environ={"MESH_PROVISIONER_CLIENT_NODE": "n1"}) == load({})


def test_providers_are_comma_separated_names_in_a_flag_or_variable_and_a_list_in_the_file(tmp_path: Path) -> None:
    assert load({"providers": "postgres, mysql"}).providers == ["postgres", "mysql"]
    assert load({}, environ={"MESH_PROVISIONER_PROVIDERS": "postgres"}).providers == ["postgres"]
    path = tmp_path / "server.toml"
    path.write_text('providers = ["postgres"]\ngrants_file = "/etc/mesh/grants.json"\n')
    settings = load({}, path)
    assert (settings.providers, settings.grants_file) == (["postgres"], Path("/etc/mesh/grants.json"))
    assert (load({}).providers, load({}).grants_file) == ([], None)


def test_a_provider_name_that_cannot_name_a_bucket_is_an_error() -> None:
    with pytest.raises(SettingsError, match="providers"):
        load({"providers": "post.gres"})


# -- the commands' arguments ---------------------------------------------------------------------


def arguments(model: type[S], flags: Mapping[str, object], environ: dict[str, str] | None = None) -> S:
    return load_settings(model, flags, None, environ or {})


def test_querys_choices_are_the_whats_and_states_its_tables_show() -> None:
    assert typing.get_args(What) == tuple(tables.COLUMNS)
    assert set(typing.get_args(State)) == {state for states in STATES.values() for state in states}


def test_query_asks_the_verb_to_narrow_and_keeps_the_rest_to_filter_here() -> None:
    flags = {"what": "nodes", "node": "n1", "state": "stale", "stale_after": "PT10M", "as_json": True}
    query = arguments(QueryArguments, flags)
    assert query.request() == {"what": "nodes", "node": "n1", "stale_after": 600.0}
    assert (query.state, query.as_json, query.wait) == ("stale", True, timedelta(seconds=30))
    assert arguments(QueryArguments, {}).request() == {"what": "registry"}


NOT_APPLYING = {
    "a kind for applied": (
        {"what": "applied", "kind": "secret"},
        "--kind: does not apply to applied; only to registry, needs",
    ),
    "by reason for needs": (
        {"what": "needs", "by_reason": True},
        "--by-reason: does not apply to needs; only to applied",
    ),
    "a threshold for the registry": ({"stale_after": "5"}, "--stale-after: does not apply to registry; only to nodes"),
    "a module's state for nodes": (
        {"what": "nodes", "state": "pending"},
        "--state: pending is not a state of nodes; one of healthy, stale, gone, over-quota",
    ),
}


@pytest.mark.parametrize(("flags", "says"), NOT_APPLYING.values(), ids=NOT_APPLYING.keys())
def test_a_query_argument_that_does_not_apply_is_refused_naming_its_flag(flags: dict[str, object], says: str) -> None:
    with pytest.raises(SettingsError) as raised:
        arguments(QueryArguments, flags)
    assert str(raised.value) == says


@pytest.mark.parametrize("model", [QueryArguments, TopArguments], ids=["query nodes", "top"])
@pytest.mark.parametrize(
    ("seconds", "taken"),
    [
        pytest.param("0", False, id="0"),
        pytest.param("-1", False, id="negative"),
        pytest.param("nan", False, id="NaN"),
        pytest.param("inf", False, id="infinity"),
        pytest.param(str(MAX_STALE_AFTER_SECONDS + 1), False, id="past the verb's bound"),
        pytest.param(str(MAX_STALE_AFTER_SECONDS), True, id="the verb's bound"),
        pytest.param("0.001", True, id="a millisecond"),
    ],
)
def test_stale_after_is_a_duration_the_verb_takes(model: type[EdgeSettings], seconds: str, taken: bool) -> None:
    flags = {"stale_after": seconds} | ({"what": "nodes"} if model is QueryArguments else {})
    if taken:
        assert arguments(model, flags).model_dump()["stale_after"] == timedelta(seconds=float(seconds))
        return
    with pytest.raises(SettingsError, match="--stale-after"):
        arguments(model, flags)


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf", "86401", "PT24H1S"])
def test_tops_interval_is_above_0_and_at_most_a_day(interval: str) -> None:
    with pytest.raises(SettingsError, match="--interval"):
        arguments(TopArguments, {"interval": interval})


def test_top_asks_every_interval_and_waits_for_an_answer_as_long_as_to_connect() -> None:
    options = TopOptions.of(arguments(TopArguments, {"interval": "PT24H", "stale_after": "60", "wait": "5"}))
    assert (options.interval, options.reply_wait, options.once) == (timedelta(days=1), timedelta(seconds=5), False)
    assert options.request() == {"what": "nodes", "stale_after": 60.0}


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        pytest.param({"node": ""}, "argument NODE", id="an empty node"),
        pytest.param({"node": "n1", "wait": "0"}, "flag --wait", id="no time to connect"),
    ],
)
def test_remove_node_needs_a_node_and_time_to_connect(flags: dict[str, object], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        arguments(RemoveNodeArguments, flags)


def test_a_name_past_the_verbs_bound_is_refused_before_anything_is_asked() -> None:
    with pytest.raises(SettingsError, match=r"node: a name is at most 1024 bytes"):
        arguments(QueryArguments, {"node": "é" * 513})
    assert arguments(QueryArguments, {"node": "é" * 512}).node == "é" * 512


def test_grants_takes_each_party_once_in_the_order_given() -> None:
    args = build_parser().parse_args(["grants", "--out", "o", "--node", "n2", "--node", "n1", "--node", "n2", "--jwt"])
    grants = arguments(GrantsArguments, given_flags(args, GrantsArguments))
    assert (grants.out, grants.keys, grants.node, grants.provider, grants.jwt) == (
        Path("o"),
        None,
        ("n2", "n1"),
        (),
        True,
    )


def test_a_commands_arguments_are_never_read_from_the_environment() -> None:
    environ = {"INTERVAL": "nan", "NODE": "n1", "MESH_PROVISIONER_INTERVAL": "nan", "MESH_PROVISIONER_TOP_NODE": "n1"}
    assert arguments(TopArguments, {}, environ) == arguments(TopArguments, {})


def test_the_process_environment_answers_no_commands_question(monkeypatch: pytest.MonkeyPatch) -> None:
    """`YES=1` in the operator's shell must not remove a node's keys without asking: the settings
    read what `load_settings` is given, never `os.environ` behind its back."""
    for name, value in {"YES": "1", "NODE": "evil", "WAIT": "1", "JSONL": "true", "LOG_LEVEL": "debug"}.items():
        monkeypatch.setenv(name, value)
    removal = arguments(RemoveNodeArguments, {"node": "n1"})
    assert (removal.node, removal.yes, removal.wait) == ("n1", False, RemoveNodeArguments.model_fields["wait"].default)
    assert arguments(QueryArguments, {}).node is None
