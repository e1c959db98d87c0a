"""How both programs read their NATS options at the edge: flags, then environment, then defaults.

The environment variables are those the NATS tools honour (`NATS_URL`, `NATS_CREDS`, `NATS_NKEY`,
`NATS_USER`, `NATS_PASSWORD`, `NATS_TOKEN`, `NATS_CA`, `NATS_CERT`, `NATS_KEY`) plus
`NATS_INBOX_PREFIX`. A program's own settings may also come from a TOML file (see each program's
settings); a flag always wins.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from registry.bus import BusOptions

_FLAGS: Mapping[str, tuple[str, str]] = {
    "url": ("--nats-url", "NATS server URLs, comma-separated (env NATS_URL; default nats://127.0.0.1:4222)"),
    "creds": ("--nats-creds", "a NATS credentials file (env NATS_CREDS)"),
    "nkey": ("--nats-nkey", "an nkey seed file (env NATS_NKEY)"),
    "user": ("--nats-user", "user name (env NATS_USER)"),
    "password": ("--nats-password", "password; prefer the env NATS_PASSWORD, flags show in ps"),
    "token": ("--nats-token", "an auth token; prefer the env NATS_TOKEN"),
    "ca": ("--nats-ca", "a CA certificate file to verify the server's TLS (env NATS_CA)"),
    "cert": ("--nats-cert", "a client certificate file for TLS (env NATS_CERT)"),
    "key": ("--nats-key", "the client certificate's key file (env NATS_KEY)"),
    "inbox_prefix": ("--nats-inbox-prefix", "this user's own reply-inbox prefix (env NATS_INBOX_PREFIX)"),
}


class BusSettings(BaseSettings):
    """NATS connection settings as an operator gives them."""

    model_config = SettingsConfigDict(env_prefix="NATS_", extra="forbid")

    url: str = "nats://127.0.0.1:4222"
    creds: Path | None = None
    nkey: Path | None = None
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    inbox_prefix: str = "_INBOX"
    timeout: float = 5.0

    @field_validator("url")
    @classmethod
    def _servers_given(cls, value: str) -> str:
        if not [u for u in value.split(",") if u.strip()]:
            raise ValueError("give at least one NATS server URL")
        return value

    def options(self, name: str) -> BusOptions:
        return BusOptions(
            servers=tuple(u.strip() for u in self.url.split(",") if u.strip()),
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
            request_timeout=timedelta(seconds=self.timeout),
        )


def add_bus_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("NATS connection")
    for field, (flag, help_text) in _FLAGS.items():
        group.add_argument(flag, dest=f"nats_{field}", default=None, metavar=field.upper(), help=help_text)


def bus_settings_from(args: argparse.Namespace) -> BusSettings:
    """Flags given on the command line over the environment over defaults."""
    given: dict[str, Any] = {
        field: getattr(args, f"nats_{field}") for field in _FLAGS if getattr(args, f"nats_{field}", None) is not None
    }
    return BusSettings(**given)


S = TypeVar("S", bound=BaseSettings)


def load_with_file(settings_cls: type[S], flags: Mapping[str, Any], config_file: Path | None) -> S:
    """`settings_cls` from `flags` over its environment variables over the TOML `config_file` over
    its defaults. Raises pydantic's `ValidationError`, or `ValueError` for a file that is not TOML."""

    class WithFile(settings_cls):  # type: ignore[valid-type, misc]
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            if config_file is None:
                return (init_settings, env_settings)
            return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file))

    return settings_cls.model_validate(dict(WithFile(**flags)))  # the plain class: the file was this call's
