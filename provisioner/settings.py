"""The server's own settings, read once at the edge by `registry.edge.settings.load_settings`.

Precedence: command-line flags, then environment variables `MESH_PROVISIONER_<FIELD>`, then the
TOML config file given by `--config` (top-level keys named as the fields; NATS options in its
`[nats]` table), then the defaults. Unknown names are errors. Durations are seconds or ISO 8601
(`PT1H`). NATS connection options are `registry.edge.settings.BusSettings` (`--nats-*`, `NATS_*`).

Example config file:

    domains_file = "/etc/mesh-provisioner/domains.toml"
    grants_file = "/etc/mesh-provisioner/grants.json"
    providers = ["postgres"]
    compile_interval = 3600
    bucket_replicas = 3
    log_format = "json"

    [nats]
    url = "nats://nats-1:4222,nats://nats-2:4222"
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, StringConstraints
from pydantic_settings import SettingsConfigDict

from registry.edge import Duration, LogSettings
from registry.runtime import LogLevel

ENV_PREFIX = "MESH_PROVISIONER_"


def _comma_separated(value: Any) -> Any:
    """A list given as text (a flag, an environment variable) is comma-separated names."""
    return [name.strip() for name in value.split(",") if name.strip()] if isinstance(value, str) else value


# A provider module's name makes its bucket's name `<provider>_bound`: only what a bucket name holds.
ProviderName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+$")]


class ServerSettings(LogSettings):
    """Everything `mesh-provisioner serve` can be told besides how to reach NATS."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)
    # The node client's variables share the prefix; on a machine running both they are not ours to refuse.
    foreign_env_prefixes: ClassVar[tuple[str, ...]] = ("MESH_PROVISIONER_CLIENT_",)

    domains_file: Path | None = Field(default=None, description="a TOML file adding or overriding domains")
    grants_file: Path | None = Field(
        default=None,
        description="the grants.json written by `mesh-provisioner grants`; without it every request is answered "
        "about the mesh, as in a single-account development bus",
    )
    providers: Annotated[list[ProviderName], BeforeValidator(_comma_separated)] = Field(
        default_factory=list, description="provider modules (comma-separated) whose <provider>_bound bucket it creates"
    )
    compile_interval: Duration = Field(
        default=timedelta(hours=1), gt=timedelta(0), description="how often the registry is compiled again"
    )
    compile_lease_ttl: Duration = Field(
        default=timedelta(seconds=15), gt=timedelta(0),
        description="how long the compile lease outlives its holder's last renewal (renewed every third of it)",
    )  # fmt: skip
    bucket_replicas: int = Field(default=1, ge=1, le=5, description="replicas of the buckets the server creates")
    bucket_storage: Literal["file", "memory"] = Field(
        default="file", description="storage of the buckets the server creates"
    )
    bucket_history: int = Field(default=1, ge=1, le=64, description="values kept per key in the buckets it creates")
    bucket_max_value_size: int = Field(
        default=64 * 1024, ge=1024, description="bytes one value may hold in the buckets it creates (under max_payload)"
    )
    bucket_max_bytes: int = Field(
        default=1024**3, ge=1024 * 1024, description="bytes each bucket it creates may hold in all"
    )
    max_concurrent_requests: int = Field(default=32, ge=1, description="verb requests answered at once")
    max_waiting_requests: int = Field(
        default=1000, ge=0, description="requests waiting beyond those; more are answered 503"
    )
    shutdown_timeout: Duration = Field(
        default=timedelta(seconds=10), ge=timedelta(0), description="how long requests in flight may take on stop"
    )
    cursor_ttl: Duration = Field(
        default=timedelta(seconds=120), gt=timedelta(0), description="how long a paged listing's cursor stays valid"
    )
    max_cursors: int = Field(default=32, ge=1, description="paged listings kept at once")
    cursor_cache_bytes: int = Field(
        default=128 * 1024 * 1024, ge=0, description="bytes of pages kept for all listings together"
    )


class QuerySettings(LogSettings):
    """`mesh-provisioner query` reads only how to log: quieter by default, and it leaves the
    server's other `MESH_PROVISIONER_*` variables (set in the same shell, say) alone."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)
    foreign_env_prefixes: ClassVar[tuple[str, ...]] = (ENV_PREFIX,)

    log_level: Annotated[LogLevel, BeforeValidator(str.upper)] = Field(
        default="WARNING", description="the least severe level logged"
    )
