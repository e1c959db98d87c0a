"""A reconcile end to end against a real nats-server, the registry and the stand-ins."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.standins import StandIns
from registry import buckets
from registry.bus import Bus
from registry.kv import snapshot

from .conftest import NODE


def sh_env(path: Path) -> dict[str, str]:
    """The variables of an env file as POSIX sh reads it."""
    script = f'set -a; . "{path}"; env -0'
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True, env={}).stdout
    pairs = (entry.split("=", 1) for entry in out.decode().split("\0") if entry)
    return {k: v for k, v in pairs if k not in {"PWD", "SHLVL", "_", "OLDPWD"}}


async def test_every_kind_resolves_into_an_env_file_of_mode_0600(domains: StandIns, bus: Bus, plan: ClientPlan) -> None:
    report = await reconcile(bus, plan)
    assert report.ok, report
    app = plan.materialize / "app.env"
    assert stat.S_IMODE(app.stat().st_mode) == 0o600
    assert sh_env(app) == {
        "DATABASE_URL": "postgres://app:dev-only-s3cret-password@127.0.0.1:5432/app",
        "LOG_LEVEL": "info",
        "GREETING": 'Hello, "world" $HOME #1\nsecond line: café',
        "STATE_DIR": "/var/lib/app",
        "HTTP_PORT": "8080",
        "DB_ACCESS": "read-write",
        "SEAT": "web-1",
        "MACHINE": NODE,
        "PLUGINS": "metrics\npg-stats",
        "ZSH_SNIPPETS": "alias app-logs='journalctl -u app'\nexport EDITOR=vi\nsetopt autocd",
        "EXTRA_ENV": "PGAPPNAME=app",
        "MOTD": "postgres serves db on this node",
        "PRICE": "costs $5",
    }
    assert sh_env(plan.materialize / "postgres.env") == {
        "PG_CONSUMERS": "app:dev-only-s3cret-password",
        "PG_DATA": "/var/lib/postgresql",
        "PG_PORT": "5432",
    }
    applied = {i.key: json.loads(i.value) for i in await snapshot(bus, buckets.APPLIED.name)}
    assert {k: v["state"] for k, v in applied.items()} == {
        "node-1.app": "applied", "node-1.postgres": "applied", "node-1.tools": "applied"
    }  # fmt: skip
    assert applied["node-1.app"]["action"]["outcome"] == "succeeded"
    needs = {i.key for i in await snapshot(bus, buckets.NEEDS.name)}
    assert "node-1.app.secret.db-password" in needs
    assert "node-1.app.bound.postgres=3Adb=3Ahost" in needs
    assert "node-1.app.shell.zsh=3Anormal" in needs
    collect = {i.key for i in await snapshot(bus, buckets.COLLECT.name)}
    assert collect == {
        "node-1.app-plugins.app", "node-1.app-plugins.postgres", "node-1.shell=3Azsh=3Anormal.app",
        "node-1.shell=3Azsh=3Anormal.tools", "node-1.environment=3Aapp.postgres",
        "node-1.contribution=3Amotd.postgres",
    }  # fmt: skip
