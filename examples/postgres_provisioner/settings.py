"""What `mesh-postgres-provisioner` can be told, on the conventions of every program
(`registry.edge`): flags over `MESH_POSTGRES_PROVISIONER_<SETTING>` variables over the `--config`
TOML file over defaults, durations with their unit (`2s`, `5m`), a misspelt variable or key
refused. PostgreSQL itself is reached with libpq's own settings: `dsn`, then the `PG*` variables.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import ClassVar

from pydantic import ConfigDict, Field

from registry.edge import Duration, LogSettings

ENV_PREFIX = "MESH_POSTGRES_PROVISIONER_"
_A_DAY = timedelta(days=1)


class PostgresProvisionerSettings(LogSettings):
    """The delivery it reads, the PostgreSQL it changes, and how often it looks again."""

    model_config = ConfigDict(frozen=True)
    env_prefix: ClassVar[str] = ENV_PREFIX

    env_file: Path = Field(description="the provider module's env file the node client writes; required")
    variable: str = Field(default="PG_CONSUMERS", min_length=1, description="the variable holding the consumers")
    dsn: str = Field(
        default="",
        description="libpq connection string (default: the PG* variables); never a password: flags show in ps",
        json_schema_extra={"shown_default": "the PG* variables"},
    )
    watch: bool = Field(default=False, description="poll the file and apply every change, until SIGTERM")
    poll: Duration = Field(
        default=timedelta(seconds=2), gt=timedelta(0), lt=_A_DAY, description="how often to poll the file"
    )
    resync: Duration = Field(
        default=timedelta(minutes=5),
        gt=timedelta(0),
        lt=_A_DAY,
        description="how often to apply an unchanged file again (a change made by hand is put back)",
    )
