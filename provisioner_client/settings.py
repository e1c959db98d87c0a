"""The client's settings, read once in `main()` by `registry.edge.settings.load_settings` and passed down.

Precedence: command-line flags, then environment variables `MESH_PROVISIONER_CLIENT_<NAME>`
(e.g. `MESH_PROVISIONER_CLIENT_NODE=n1`), then the settings file (NATS options in its `[nats]`
table), then defaults. The settings file is the one the systemd unit uses: `--config`, else
`MESH_PROVISIONER_CLIENT_CONFIG` (empty: none), else `/etc/mesh-provisioner/client.toml` when it
exists (`settings_file`). An unknown setting in any of them is an error, never ignored.
Durations take a unit (`verb_timeout = "5s"`, `"10m"`, `"1h"`; a number is seconds). The NATS
connection is
`registry.edge.settings.BusSettings` (`--nats-*` flags, `NATS_*` environment).

Example TOML file:

    node = "node-1"
    manifests = "/etc/mesh-provisioner/modules"
    materialize = "/run/mesh-provisioner/env"
    refresh = 300
    metrics_folder = "/var/lib/prometheus/node-exporter"
    metrics_listen = "9465"

    [nats]
    url = "nats://10.0.0.1:4222"
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator

from provisioner_client.resolving.manifest import budget_problem
from registry.edge import CommandLine, Duration, LogSettings
from registry.errors import SettingsError
from registry.runtime import MetricsListen

ENV_PREFIX = "MESH_PROVISIONER_CLIENT_"
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
DEFAULT_CONFIG = Path("/etc/mesh-provisioner/client.toml")


def settings_file(given: Path | None, environ: Mapping[str, str], default: Path = DEFAULT_CONFIG) -> Path | None:
    """The settings file to read: `--config`, else `MESH_PROVISIONER_CLIENT_CONFIG` (empty: none),
    else `default` when it exists. A file named explicitly must exist; the default need not."""
    if given is not None:
        return given
    if CONFIG_ENV in environ:
        named = environ[CONFIG_ENV]
        return Path(named) if named else None
    return default if default.exists() else None


def node_of(settings: ClientSettings, used: Path | None, default: Path = DEFAULT_CONFIG) -> str:
    """The node the settings name; `SettingsError` saying where it looked when none does."""
    if settings.node is not None:
        return settings.node
    if used is not None:
        looked = f"the settings file {used}"
    elif default.exists():
        looked = f"a settings file (${CONFIG_ENV} is empty: {default} not read)"
    else:
        looked = f"a settings file ({default} does not exist)"
    raise SettingsError("settings", f"no node given: not by --node, nor {ENV_PREFIX}NODE, nor {looked}")


class ClientSettings(LogSettings):
    """Everything `mesh-provisioner-client` can be told besides how to reach NATS."""

    model_config = ConfigDict(frozen=True)
    env_prefix: ClassVar[str] = ENV_PREFIX
    foreign_env_prefixes: ClassVar[tuple[str, ...]] = (CONFIG_ENV,)  # names the file, is no setting

    node: str | None = Field(
        default=None, min_length=1, description="this node's name, as the controller knows it; required"
    )
    manifests: Path = Field(
        default=Path("/etc/mesh-provisioner/modules"), description="the folder of module manifests (*.json)"
    )
    materialize: Path = Field(
        default=Path("/run/mesh-provisioner/env"), description="the folder the env files are written to"
    )
    verb_timeout: Duration = Field(
        default=timedelta(seconds=5), gt=timedelta(0), description="how long a verb (the vault) may take to answer"
    )
    debounce: Duration = Field(
        default=timedelta(seconds=0.5), ge=timedelta(0), description="watch: how long to wait after a change"
    )
    refresh: Duration = Field(
        default=timedelta(minutes=5),
        gt=timedelta(0),
        description="watch: how often verb answers (secrets) are re-asked",
    )
    poll: Duration = Field(
        default=timedelta(seconds=2), gt=timedelta(0), description="watch: how often the manifests folder is looked at"
    )
    drift_poll: Duration = Field(
        default=timedelta(seconds=1),
        gt=timedelta(0),
        description="watch: how often the env files the client wrote are looked at; a drifted one is put back",
    )
    backoff_max: Duration = Field(
        default=timedelta(seconds=30), gt=timedelta(0), description="watch: the longest wait between retries"
    )
    lease_ttl: Duration = Field(
        default=timedelta(seconds=15),
        gt=timedelta(0),
        description="how long this node's lease outlives its last renewal (renewed every third of it): a second "
        "client for the node takes over that long after the first stopped renewing",
    )
    metrics_folder: Path | None = Field(
        default=None,
        description="node_exporter's textfile folder: the client writes its figures there as "
        "mesh_provisioner_client.prom after each reconcile (provisioner_client.metrics); none: no textfile",
    )
    metrics_listen: Annotated[MetricsListen | None, CommandLine(metavar="[HOST:]PORT")] = Field(
        default=None,
        description="watch: where the client serves the node's figures for Prometheus at /metrics: PORT (on "
        "127.0.0.1) or HOST:PORT, the same series as metrics_folder's textfile; none: no endpoint "
        "(provisioner_client.metrics)",
    )
    shutdown_timeout: Duration = Field(
        default=timedelta(seconds=10),
        ge=timedelta(0),
        description="how long the reconcile in progress may take to finish after SIGTERM or SIGINT",
    )
    rollout_budget: Annotated[str | None, CommandLine(metavar="N|P%")] = Field(
        default=None,
        description="the rollout budget of every module whose manifest gives none: at most N nodes change it at "
        "once (N), or P percent of the nodes holding a claim of it (P%); none: no budget "
        "(provisioner_client.rollout)",
    )
    rollout_claim_ttl: Duration = Field(
        default=timedelta(seconds=30),
        gt=timedelta(0),
        le=timedelta(hours=24),
        description="how long a rollout claim stands without being written again (renewed every third of it)",
    )
    rollout_wait_limit: Duration = Field(
        default=timedelta(seconds=60),
        ge=timedelta(0),
        description="how long a change waits for an unreachable rollout coordination (the fleet bucket) before "
        "rollout_unreachable decides",
    )
    rollout_unreachable: Annotated[Literal["proceed", "hold"], CommandLine(choices=True)] = Field(
        default="proceed",
        description="after rollout_wait_limit without the coordination: proceed (apply without a slot, said in the "
        "applied record and the log) or hold (stay pending until it is back)",
    )

    @field_validator("rollout_budget", mode="before")
    @classmethod
    def _a_budget(cls, value: object) -> object:
        if value is None or value == "":
            return None
        problem = budget_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return str(value)
