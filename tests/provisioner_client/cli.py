"""The node client's command line run as a process of its own, for the tests that run it so."""

from __future__ import annotations

import json
import os
import sys

import anyio

from provisioner_client.reconcile import ClientPlan
from tests.helpers import NODE

CLIENT = [sys.executable, "-c", "import sys; from provisioner_client.cli import main; sys.exit(main())"]


def client_env(nats_url: str, plan: ClientPlan, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "NATS_URL": nats_url,
        "NATS_TIMEOUT": "2",
        "MESH_PROVISIONER_CLIENT_NODE": NODE,
        "MESH_PROVISIONER_CLIENT_MANIFESTS": str(plan.manifests),
        "MESH_PROVISIONER_CLIENT_MATERIALIZE": str(plan.materialize),
        "MESH_PROVISIONER_CLIENT_VERB_TIMEOUT": "1",
        "MESH_PROVISIONER_CLIENT_CONFIG": "",  # never the machine's own /etc/mesh-provisioner/client.toml
        **extra,
    }


async def client(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = await anyio.run_process([*CLIENT, *args], env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def slow_action(plan: ClientPlan, command: list[str]) -> None:
    """The plan's only module: no placeholder, and a change action `command`."""
    for path in plan.manifests.glob("*.json"):
        path.unlink()
    manifest = {"module": "slow", "env": {"GREETING": "hello"}, "on_change": {"command": command}}
    (plan.manifests / "slow.json").write_text(json.dumps(manifest))
