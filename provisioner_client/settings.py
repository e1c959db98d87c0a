"""The client's settings, read once in `main()` and passed down.

Precedence: command-line flags, then environment variables `MESH_PROVISIONER_CLIENT_<NAME>`
(e.g. `MESH_PROVISIONER_CLIENT_NODE=n1`), then a TOML file given by `--config`, then defaults.
An unknown setting in any of them is an error, never ignored. Durations are seconds
(`verb_timeout = 5`) or ISO 8601 (`PT5M`). The NATS connection is read by `registry.settings`
(`--nats-*` flags, `NATS_*` environment).

Example TOML file:

    node = "node-1"
    manifests = "/etc/mesh-provisioner/modules"
    materialize = "/run/mesh-provisioner/env"
    refresh = 300
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from provisioner_client.errors import SettingsError
from registry.settings import load_with_file

ENV_PREFIX = "MESH_PROVISIONER_CLIENT_"


class ClientSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    node: str = Field(min_length=1, description="this node's name, as the controller knows it")
    manifests: Path = Path("/etc/mesh-provisioner/modules")
    materialize: Path = Path("/run/mesh-provisioner/env")
    verb_timeout: timedelta = timedelta(seconds=5)
    debounce: timedelta = timedelta(seconds=0.5)
    refresh: timedelta = timedelta(minutes=5)
    poll: timedelta = timedelta(seconds=2)
    backoff_max: timedelta = timedelta(seconds=30)
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("verb_timeout", "debounce", "refresh", "poll", "backoff_max", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return value
        return value


def load_settings(flags: Mapping[str, Any], config: Path | None, environ: Mapping[str, str]) -> ClientSettings:
    """Settings from flags (those given), the environment and the TOML file `config`."""
    unknown = sorted(
        name for name in environ if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX) :].lower() not in _fields()
    )
    if unknown:
        raise SettingsError(f"unknown environment variable {unknown[0]}; known: {', '.join(_env_names())}")
    if config is not None and not config.is_file():
        raise SettingsError(f"config file {config} does not exist")
    try:
        return load_with_file(ClientSettings, {k: v for k, v in flags.items() if v is not None}, config)
    except ValidationError as err:
        raise SettingsError(_describe(err, config)) from None
    except ValueError as err:  # a TOML file that does not parse
        raise SettingsError(f"config file {config}: {err}") from None


def _fields() -> set[str]:
    return set(ClientSettings.model_fields)


def _env_names() -> list[str]:
    return [f"{ENV_PREFIX}{name.upper()}" for name in ClientSettings.model_fields]


def _describe(err: ValidationError, config: Path | None) -> str:
    reasons = []
    for error in err.errors():
        name = ".".join(str(part) for part in error["loc"])
        where = f" (flag --{name.replace('_', '-')}, env {ENV_PREFIX}{name.upper()}"
        where += f" or {config})" if config else ")"
        reasons.append(f"{name}: {error['msg']}{where}")
    return "; ".join(reasons)
