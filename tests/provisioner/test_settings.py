"""Server settings: flags over environment over config file over defaults; unknown names refused."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from provisioner.settings import ServerSettings
from registry.edge import load_settings
from registry.errors import SettingsError


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
