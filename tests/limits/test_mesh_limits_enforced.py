"""The limits a mesh file sets are what nats-server enforces, static accounts and JWT accounts alike:
a node's connections lowered to 3 or raised to 20 (its kind's own is 16) are let in up to exactly
that many, and the next is refused."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoServersError

from mesh_dev.local_nats import LocalNats, local_nats
from registry.access import (
    SERVER_AUTH,
    Kind,
    Party,
    creds_path,
    issue_grants,
    load_jwt_auth,
    read_mesh_file,
    render_server_auth,
    seed_path,
)
from registry.access.limits import PARTY_LIMITS

N1 = Party(kind=Kind.NODE, name="n1")
MODES = pytest.mark.parametrize("jwt", [False, True], ids=["static accounts", "JWT accounts"])


@dataclass(frozen=True)
class Limited:
    server: LocalNats
    keys: Path
    jwt: bool

    async def connect(self, **options: Any) -> Client:
        """n1 through nats-py itself, trying once."""
        credential = (
            {"user_credentials": str(creds_path(self.keys, N1.label))}
            if self.jwt
            else {"nkeys_seed": str(seed_path(self.keys, N1))}
        )
        return await nats.connect(
            self.server.url,
            **credential,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.05,
            connect_timeout=2,
            **options,
        )


def configured(state: Path, connections: int, *, jwt: bool) -> tuple[Path, str]:
    """The grants of a mesh file giving each node `connections`, issued to `state/keys`, and the
    nats-server configuration folder including them, with what it includes."""
    state.mkdir()
    mesh = state / "mesh.toml"
    mesh.write_text(f'nodes = ["n1"]\n[limits.node]\nconnections = {connections}\n')
    keys, config_dir = state / "keys", state / "nats"
    issue_grants(keys, read_mesh_file(mesh).parties(), jwt=jwt)
    config_dir.mkdir()
    if jwt:
        (config_dir / SERVER_AUTH).write_text(render_server_auth(load_jwt_auth(keys), config_dir / "resolver"))
        return config_dir, SERVER_AUTH
    shutil.copyfile(keys / "accounts.conf", config_dir / "accounts.conf")
    return config_dir, "accounts.conf"


@asynccontextmanager
async def limited_mesh(state: Path, connections: int, *, jwt: bool) -> AsyncIterator[Limited]:
    """nats-server on the grants of a mesh file giving each node `connections`."""
    config_dir, include = configured(state, connections, jwt=jwt)
    async with local_nats(config_dir, f"include ./{include}") as server:
        yield Limited(server, state / "keys", jwt)


async def refused(mesh: Limited) -> str:
    """Why nats-server refuses one more connection of n1's (fails if it takes it)."""
    reasons: list[str] = []

    async def on_error(err: Exception) -> None:
        reasons.append(str(err).lower())

    try:
        client = await mesh.connect(error_cb=on_error)
    except NoServersError:
        return " ".join(reasons)
    await client.close()
    pytest.fail("n1 was let in past its limit")


@MODES
@pytest.mark.parametrize("connections", [3, 20], ids=["lowered to 3", "raised to 20"])
async def test_a_node_is_let_in_up_to_the_files_connections_and_refused_past_them(
    tmp_path: Path, jwt: bool, connections: int
) -> None:
    assert connections != PARTY_LIMITS[Kind.NODE].connections
    async with limited_mesh(tmp_path / "mesh", connections, jwt=jwt) as mesh:
        clients = [await mesh.connect() for _ in range(connections)]
        try:
            assert all(client.is_connected for client in clients)
            assert "maximum account active connections exceeded" in await refused(mesh)
        finally:
            for client in clients:
                await client.close()
