"""`mesh-provisioner grants --jwt --push` on a real nats-server in JWT mode: a node the mesh file
adds is pushed and at once connects and asks the seat, a node it removes is deleted and its
credential refused, the nodes left alone are not disturbed, and a push compares against what the
resolver holds, so an issue that was never pushed is pushed by the next run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import anyio
import anyio.to_thread
import nats
import pytest

from provisioner.commands.cli import main
from registry.access import Kind, creds_path
from registry.contract import buckets
from registry.errors import BusError
from registry.wire import ask, connect_within, get_latest, put
from tests.helpers import in_own_task
from tests.isolation import OPERATORS, PROVIDERS, JwtMesh, jwt_mesh_server, party

A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[JwtMesh]:
    async with in_own_task(jwt_mesh_server(tmp_path / "mesh", nodes=("n1", "n2"))) as running:
        yield running


def mesh_toml(folder: Path, nodes: Sequence[str]) -> Path:
    """The mesh file of the test mesh's providers and operators, with `nodes`."""
    path = folder / "mesh.toml"
    providers = "".join(f"[providers.{p}]\n" for p in PROVIDERS)
    path.write_text(f"nodes = {list(nodes)!r}\noperators = {list(OPERATORS)!r}\n{providers}".replace("'", '"'))
    return path


async def grants(mesh: JwtMesh, nodes: Sequence[str], *more: str) -> int:
    """The command, as a controller runs it, on the test mesh's folders; in a thread of its own
    (it runs its own event loop), with no variable of this shell."""
    argv = ["grants", "--jwt", "--out", str(mesh.out), "--keys", str(mesh.keys)]
    argv += ["--mesh", str(mesh_toml(mesh.out.parent, nodes)), *more]
    argv += ["--nats-url", mesh.server.url] if "--push" in more else []
    return await anyio.to_thread.run_sync(main, argv)


async def refused(mesh: JwtMesh, label: str) -> str:
    """Why nats-server refuses a connection on `label`'s credential (fails if it accepts it). An
    account it does not hold takes its resolver's fetch timeout (about 2 s) to refuse."""
    try:
        async with connect_within(mesh.options(label), timedelta(seconds=10)):
            pass
    except BusError as err:
        return str(err).lower()
    pytest.fail(f"{label} was let in")


async def test_a_node_the_mesh_file_adds_is_pushed_and_one_it_removes_is_deleted(
    mesh: JwtMesh, capsys: pytest.CaptureFixture[str]
) -> None:
    disturbed = anyio.Event()

    async def on_disconnect() -> None:
        disturbed.set()

    n1 = await nats.connect(
        mesh.server.url, user_credentials=str(creds_path(mesh.keys, "node-n1")), disconnected_cb=on_disconnect
    )
    try:
        assert await grants(mesh, ["n1", "n2", "n3"], "--push") == 0
        assert capsys.readouterr().out.splitlines()[-1] == "resolver: pushed node-n3; deleted none"
        async with mesh.connect(party(Kind.NODE, "n3")) as n3:
            await put(n3, buckets.NEEDS, "n3.web.config.x", A_NEED)
            listed = await ask(n3, {"what": "needs"})  # the seat reads the new grants.json
        assert [entry["key"] for entry in listed["entries"]] == ["n3.web.config.x"]

        assert await grants(mesh, ["n1", "n3"], "--push") == 0
        assert capsys.readouterr().out.splitlines()[-1] == "resolver: pushed none; deleted node-n2"
        reason = await refused(mesh, "node-n2")
        assert "authorization" in reason or "expired" in reason, reason

        assert await grants(mesh, ["n1", "n3"], "--push") == 0  # the resolver holds it all now
        assert (
            capsys.readouterr().out.splitlines()[-1] == "resolver: it holds exactly the issued accounts; nothing pushed"
        )

        await n1.flush(timeout=5)  # n1 was never cut off, and is served as before
        assert not disturbed.is_set()
        async with mesh.connect(party(Kind.NODE, "n1")) as again:
            await put(again, buckets.NEEDS, "n1.web.config.x", A_NEED)
            assert await get_latest(again, buckets.NEEDS, "n1.web.config.x") is not None
    finally:
        await n1.close()


async def test_grants_issued_without_a_push_are_pushed_by_the_next_one(
    mesh: JwtMesh, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await grants(mesh, ["n1", "n2", "n4"]) == 0  # written, the resolver not told
    assert "authorization" in await refused(mesh, "node-n4")
    assert await grants(mesh, ["n1", "n2", "n4"], "--push") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "resolver: pushed node-n4; deleted none"
    async with mesh.connect(party(Kind.NODE, "n4")) as n4:
        assert (await ask(n4, {"what": "needs"}))["entries"] == []


async def test_a_push_to_a_server_that_takes_none_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server without JWT auth (here: none at all) answers no list of accounts."""
    from mesh_dev.local_nats import local_nats  # noqa: PLC0415

    async with local_nats(tmp_path / "nats") as server:
        argv = ["grants", "--jwt", "--push", "--out", str(tmp_path / "out"), "--node", "n1"]
        code = await anyio.to_thread.run_sync(main, [*argv, "--nats-url", server.url])
    assert code == 4
    said = capsys.readouterr().err
    assert "list the resolver's accounts" in said and "full resolver" in said, said
