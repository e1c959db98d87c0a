"""Client settings: flags over environment over the TOML file over defaults; nothing unknown."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from provisioner_client.errors import SettingsError
from provisioner_client.settings import load_settings


def test_flags_win_over_the_environment_which_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "client.toml"
    config.write_text('node = "from-file"\nrefresh = 10\npoll = 7\nmanifests = "/m"\n')
    monkeypatch.setenv("MESH_PROVISIONER_CLIENT_REFRESH", "20")
    monkeypatch.setenv("MESH_PROVISIONER_CLIENT_POLL", "PT8S")
    environ = {"MESH_PROVISIONER_CLIENT_REFRESH": "20", "MESH_PROVISIONER_CLIENT_POLL": "PT8S"}
    settings = load_settings({"refresh": "30", "node": None}, config, environ)
    assert (settings.node, settings.refresh, settings.poll) == (
        "from-file",
        timedelta(seconds=30),
        timedelta(seconds=8),
    )
    assert settings.manifests == Path("/m")
    assert settings.debounce == timedelta(seconds=0.5)


@pytest.mark.parametrize(
    ("toml", "environ", "complaint"),
    [
        pytest.param('node = "n"\nrefrsh = 1\n', {}, "refrsh: Extra inputs are not permitted", id="a mistyped key"),
        pytest.param(
            'node = "n"\n',
            {"MESH_PROVISIONER_CLIENT_NOED": "x"},
            "unknown environment variable",
            id="a mistyped variable",
        ),
        pytest.param("", {}, "node: Field required", id="no node"),
        pytest.param("node = ", {}, "config file", id="a file that is not TOML"),
    ],
)
def test_what_cannot_be_read_is_an_error_naming_it(
    tmp_path: Path, toml: str, environ: dict[str, str], complaint: str
) -> None:
    config = tmp_path / "client.toml"
    config.write_text(toml)
    with pytest.raises(SettingsError, match=complaint):
        load_settings({}, config, environ)
