"""A NATS server URL's scheme is checked as the settings are read, wherever the URL came from:
nats-py connects with nats://, tls://, ws:// and wss:// (a WebSocket with aiohttp); any other
scheme it reads as a host name and fails on after its connect timeout."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from registry.edge import BusSettings, load_settings
from registry.errors import SettingsError

WEBSOCKETS = importlib.util.find_spec("aiohttp") is not None


def servers(flags: dict[str, str], environ: dict[str, str] | None = None) -> tuple[str, ...]:
    return load_settings(BusSettings, flags, None, environ or {}).options("test").servers


@pytest.mark.parametrize(
    "url",
    [
        "nats://127.0.0.1:4222",
        "tls://nats.example:4222",
        "NATS://upper.example:4222",
        "127.0.0.1:4222",
        "nats-1",
        "nats://a:4222,tls://b:4222",
        "nats://user:secret@a:4222",
    ],
)
def test_a_url_nats_py_connects_with_is_taken(url: str) -> None:
    assert servers({"url": url}) == tuple(url.split(","))


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        pytest.param("nat://127.0.0.1:4222", "nat://", id="a typo"),
        pytest.param("http://nats.example:8222", "http://", id="the monitoring port's scheme"),
        pytest.param("nats://a:4222,natss://b:4222", "natss://", id="the second of two"),
        pytest.param("nat://ops:hunter2@nats.example:4222", "nat://", id="a URL holding a password"),
    ],
)
def test_another_scheme_is_refused_at_once_naming_the_schemes_and_never_the_url(url: str, scheme: str) -> None:
    with pytest.raises(SettingsError) as raised:
        servers({"url": url})
    assert str(raised.value) == (
        f"NATS server URL (from the command line): the scheme {scheme} is not one nats-py connects with: "
        "nats://, tls://, ws:// or wss:// (a URL without one, host:4222, is nats://)"
    )
    assert "hunter2" not in str(raised.value)


def test_what_precedes_a_password_s_colon_slashes_is_not_named_as_a_scheme() -> None:
    """A URL without a scheme whose password holds `://`: what precedes it is no scheme, and may be secret."""
    with pytest.raises(SettingsError) as raised:
        servers({"url": "ops:hun://ter2@nats.example:4222"})
    assert "its scheme is not one nats-py connects with" in str(raised.value)
    assert "hun" not in str(raised.value) and "ops" not in str(raised.value)


def test_a_url_from_a_context_is_checked_and_the_context_named(tmp_path: Path) -> None:
    (tmp_path / "nats" / "context").mkdir(parents=True)
    (tmp_path / "nats" / "context" / "lab.json").write_text(json.dumps({"url": "nat://lab:4222"}))
    with pytest.raises(SettingsError, match=r"^NATS server URL \(from nats context 'lab' at .*lab.json\): the scheme"):
        servers({"context": "lab"}, {"XDG_CONFIG_HOME": str(tmp_path)})


def test_a_url_from_the_environment_is_checked_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match=r"^NATS server URL \(from NATS_URL\): the scheme nat:// "):
        servers({}, {"NATS_URL": "nat://x:4222"})


def test_websocket_and_nats_urls_mixed_are_refused() -> None:
    with pytest.raises(SettingsError, match="nats:// or tls:// mixed with ws:// or wss://: nats-py takes one kind"):
        servers({"url": "nats://a:4222,ws://b:8080"})


@pytest.mark.skipif(WEBSOCKETS, reason="aiohttp is installed here: a WebSocket URL is taken")
def test_a_websocket_url_without_aiohttp_says_what_to_install() -> None:
    with pytest.raises(SettingsError, match="ws:// and wss:// need the aiohttp package, not installed: pip install"):
        servers({"url": "wss://nats.example:443"})


@pytest.mark.skipif(not WEBSOCKETS, reason="aiohttp is not installed here")
def test_a_websocket_url_with_aiohttp_is_taken() -> None:
    assert servers({"url": "wss://nats.example:443"}) == ("wss://nats.example:443",)
