"""`grants --jwt --push` deletes only the accounts the grants issued (a seed of each in the keys
folder) and no longer name: an account the operator signed for something else, pushed to the same
resolver, is left alone and said, on a real nats-server in JWT mode."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import nkeys
import pytest

from provisioner.commands.cli import main
from provisioner.commands.grants_push import held_accounts
from registry.access import Nkey, encode_jwt, operator_key, push_account
from tests.helpers import in_own_task
from tests.isolation import OPERATORS, PROVIDERS, JwtMesh, jwt_mesh_server


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[JwtMesh]:
    async with in_own_task(jwt_mesh_server(tmp_path / "mesh", nodes=("n1", "n2"))) as running:
        yield running


async def foreign_account(mesh: JwtMesh) -> str:
    """An account the operator signs by hand (no seed in the keys folder), pushed; its key."""
    account = Nkey(bytes(nkeys.encode_seed(bytes(32), nkeys.PREFIX_BYTE_ACCOUNT)))
    operator = operator_key(mesh.keys)
    token = encode_jwt(operator, subject=account.public_key, name="monitoring", body={"type": "account"})
    async with mesh.system() as system:
        await push_account(system, token, operator=operator.public_key)
    return account.public_key


async def test_a_push_deletes_a_removed_node_and_leaves_an_account_it_never_issued(
    mesh: JwtMesh, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = await foreign_account(mesh)
    providers = "".join(f"[providers.{p}]\n" for p in PROVIDERS)
    mesh_file = tmp_path / "mesh.toml"
    mesh_file.write_text(f'nodes = ["n1"]\noperators = {list(OPERATORS)!r}\n{providers}'.replace("'", '"'))
    argv = ["grants", "--jwt", "--push", "--out", str(mesh.out), "--keys", str(mesh.keys), "--mesh", str(mesh_file)]
    code = await anyio.to_thread.run_sync(main, [*argv, "--nats-url", mesh.server.url])
    assert code == 0, capsys.readouterr().err
    said = capsys.readouterr().out.splitlines()[-1]
    assert said == f"resolver: pushed none; deleted node-n2; left alone 1 accounts the grants never issued ({foreign})"
    async with mesh.system() as system:
        held = await held_accounts(system, ())
    assert foreign in held
