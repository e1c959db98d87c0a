"""The server's own settings, read once at the edge.

Precedence: command-line flags, then environment variables `MESH_PROVISIONER_<FIELD>`, then the
TOML config file given by `--config` (top-level keys named as the fields), then the defaults.
Unknown keys are errors. Durations are seconds or ISO 8601 (`PT1H`). NATS connection options
are separate: `registry.settings.BusSettings` (`NATS_*` and `--nats-*`).

Example config file:

    domains_file = "/etc/mesh-provisioner/domains.toml"
    compile_interval = 3600
    bucket_replicas = 3
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from provisioner.errors import SettingsError
from registry.settings import load_with_file

ENV_PREFIX = "MESH_PROVISIONER_"
# The node client's variables share the prefix; on a machine running both they are not ours to refuse.
OTHER_PROGRAM_PREFIX = "MESH_PROVISIONER_CLIENT_"


class ServerSettings(BaseSettings):
    """Everything `mesh-provisioner serve` can be told besides how to reach NATS."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    domains_file: Path | None = Field(default=None, description="TOML file adding or overriding domains")
    compile_interval: timedelta = Field(default=timedelta(hours=1), gt=timedelta(0))
    bucket_replicas: int = Field(default=1, ge=1, le=5)
    bucket_storage: Literal["file", "memory"] = "file"
    bucket_history: int = Field(default=1, ge=1, le=64)
    max_concurrent_requests: int = Field(default=32, ge=1)
    max_waiting_requests: int = Field(default=1000, ge=0)
    shutdown_timeout: timedelta = Field(default=timedelta(seconds=10), ge=timedelta(0))
    cursor_ttl: timedelta = Field(default=timedelta(seconds=120), gt=timedelta(0))
    max_cursors: int = Field(default=32, ge=1)
    cursor_cache_bytes: int = Field(default=128 * 1024 * 1024, ge=0)


def load_server_settings(
    flags: Mapping[str, Any], config_file: Path | None = None, *, environ: Mapping[str, str] | None = None
) -> ServerSettings:
    """Settings from `flags` (only those given) over the environment over `config_file`.

    `environ` is only checked for misspelt `MESH_PROVISIONER_*` names (pydantic-settings ignores
    unknown environment variables); the values are read by pydantic-settings itself."""
    if config_file is not None and not config_file.is_file():
        raise SettingsError(str(config_file), "config file not found")

    try:
        _refuse_unknown_environment(environ)
        return load_with_file(ServerSettings, flags, config_file)
    except ValidationError as err:
        raise SettingsError(_source_name(config_file), describe_validation(err)) from None
    except ValueError as err:  # the TOML file itself does not parse
        raise SettingsError(str(config_file), f"is not valid TOML: {err}") from None


def _refuse_unknown_environment(environ: Mapping[str, str] | None) -> None:
    known = {f"{ENV_PREFIX}{name}".upper() for name in ServerSettings.model_fields}
    ours = [
        n
        for n in (environ or {})
        if n.upper().startswith(ENV_PREFIX) and not n.upper().startswith(OTHER_PROGRAM_PREFIX)
    ]
    unknown = sorted(n for n in ours if n.upper() not in known)
    if unknown:
        raise SettingsError("environment", f"unknown variable {unknown[0]}; known: {', '.join(sorted(known))}")


def _source_name(config_file: Path | None) -> str:
    files = f", config file {config_file}" if config_file else ""
    return f"settings (flags, {ENV_PREFIX}* environment{files})"


def describe_validation(err: ValidationError) -> str:
    """The first problem, naming the field but never echoing its value (it may be a secret)."""
    first = err.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "?"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{field}: {first['msg']}{more}"
