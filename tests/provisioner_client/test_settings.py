"""Client settings: flags over environment over the TOML file over defaults; nothing unknown."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from provisioner_client.settings import ClientSettings, node_of, settings_file
from registry.edge import load_settings
from registry.errors import SettingsError


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "client.toml"
    config.write_text('node = "from-file"\nrefresh = 10\npoll = 7\nmanifests = "/m"\nbackoff_max = "3"\n')
    environ = {"MESH_PROVISIONER_CLIENT_REFRESH": "20", "MESH_PROVISIONER_CLIENT_POLL": "PT8S"}
    settings = load_settings(ClientSettings, {"refresh": "30"}, config, environ)
    assert (settings.node, settings.refresh, settings.poll) == (
        "from-file",
        timedelta(seconds=30),
        timedelta(seconds=8),
    )
    assert settings.manifests == Path("/m")
    assert settings.backoff_max == timedelta(seconds=3)
    assert settings.debounce == timedelta(seconds=0.5)
    assert settings.shutdown_timeout == timedelta(seconds=10)


@pytest.mark.parametrize(
    ("toml", "environ", "complaint"),
    [
        pytest.param('node = "n"\nrefrsh = 1\n', {}, "refrsh: unknown setting", id="a mistyped key"),
        pytest.param(
            'node = "n"\n',
            {"MESH_PROVISIONER_CLIENT_NOED": "x"},
            "unknown environment variable MESH_PROVISIONER_CLIENT_NOED",
            id="a mistyped variable",
        ),
        pytest.param("node = ", {}, "config file .* is not valid TOML", id="a file that is not TOML"),
        pytest.param('node = "n"\npoll = "soon"\n', {}, "poll: .*flag --poll", id="a duration that is none"),
    ],
)
def test_what_cannot_be_read_is_an_error_naming_it(
    tmp_path: Path, toml: str, environ: dict[str, str], complaint: str
) -> None:
    config = tmp_path / "client.toml"
    config.write_text(toml)
    with pytest.raises(SettingsError, match=complaint):
        load_settings(ClientSettings, {}, config, environ)


def test_the_settings_file_is_the_flag_else_the_variable_else_the_default_when_it_exists(tmp_path: Path) -> None:
    default, named, given = tmp_path / "client.toml", tmp_path / "named.toml", tmp_path / "given.toml"
    variable = "MESH_PROVISIONER_CLIENT_CONFIG"
    assert settings_file(None, {}, default) is None, "a default that does not exist is no file"
    default.write_text('node = "n"\n')
    assert settings_file(None, {}, default) == default
    assert settings_file(None, {variable: str(named)}, default) == named, "named: it must exist, checked when read"
    assert settings_file(None, {variable: ""}, default) is None, "an empty variable: no file at all"
    assert settings_file(given, {variable: str(named)}, default) == given


def test_the_variable_naming_the_settings_file_is_not_refused_as_a_misspelt_setting(tmp_path: Path) -> None:
    environ = {"MESH_PROVISIONER_CLIENT_CONFIG": "", "MESH_PROVISIONER_CLIENT_NODE": "n"}
    assert load_settings(ClientSettings, {}, None, environ).node == "n"


def test_no_node_anywhere_is_an_error_saying_where_it_looked(tmp_path: Path) -> None:
    default, config = tmp_path / "client.toml", tmp_path / "other.toml"
    config.write_text("refresh = 10\n")
    settings = load_settings(ClientSettings, {}, config, {})
    start = "settings: no node given: not by --node, nor MESH_PROVISIONER_CLIENT_NODE, nor "
    with pytest.raises(SettingsError) as raised:
        node_of(settings, config, default)
    assert str(raised.value) == f"{start}the settings file {config}"
    with pytest.raises(SettingsError) as raised:
        node_of(settings, None, default)
    assert str(raised.value) == f"{start}a settings file ({default} does not exist)"
    default.write_text("refresh = 10\n")
    with pytest.raises(SettingsError) as raised:
        node_of(settings, None, default)
    assert str(raised.value) == f"{start}a settings file ($MESH_PROVISIONER_CLIENT_CONFIG is empty: {default} not read)"
