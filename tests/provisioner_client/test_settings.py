"""Client settings: flags over environment over the TOML file over defaults; nothing unknown."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from provisioner_client.settings import ClientSettings
from registry.errors import SettingsError
from registry.settings import load_settings


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
        pytest.param("", {}, "node: Field required .flag --node, env MESH_PROVISIONER_CLIENT_NODE", id="no node"),
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
