"""What the one-shot commands say when they cannot connect, against a real nats-server: a URL
whose scheme nats-py does not connect with is refused at once (it waited the connect timeout,
then said a DNS error); credentials the server refuses are named (never a secret), with where
they came from and how credentials are given."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats, local_nats
from registry.access import Kind, MeshParties, creds_path, issue_grants, seed_path
from registry.edge import BusSettings, load_settings
from registry.wire import connect
from tests.helpers import clean_environment, logged, serving
from tests.isolation import jwt_mesh_server, mesh_server, party

BIN = Path(sys.executable).parent

ONE_SHOT = {
    "query": ["mesh-provisioner", "query"],
    "top --once": ["mesh-provisioner", "top", "--once"],
    "remove-node": ["mesh-provisioner", "remove-node", "n1", "--yes"],
    "client status": ["mesh-provisioner-client", "status", "--node", "n1"],
    "client reconcile": ["mesh-provisioner-client", "reconcile", "--node", "n1"],
}


async def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """A console script of this environment: its exit status, its stderr and how long it took."""
    started = time.monotonic()
    done = await anyio.run_process([str(BIN / argv[0]), *argv[1:]], env=env or clean_environment(), check=False)
    return done.returncode, done.stderr.decode(), time.monotonic() - started


@pytest.mark.parametrize("argv", ONE_SHOT.values(), ids=ONE_SHOT.keys())
async def test_a_scheme_nats_py_does_not_take_is_a_usage_error_at_once(nats_server: LocalNats, argv: list[str]) -> None:
    # With a 30 s connect timeout, a URL tried before it is refused would take 30 s.
    code, stderr, took = await run([*argv, "--server", f"nat://127.0.0.1:{nats_server.port}", "--nats-timeout", "30"])
    assert "the scheme nat:// is not one nats-py connects with: nats://, tls://, ws:// or wss://" in stderr
    assert "NATS server URL (from the command line)" in stderr
    assert code == 2
    assert took < 10, "refused before any connection is tried (it waited the connect timeout)"


async def test_the_same_url_with_its_scheme_right_connects(nats_server: LocalNats) -> None:
    """The premise: the server above is there, only the scheme was wrong."""
    async with serving(nats_server.url):
        code, stderr, _ = await run(["mesh-provisioner-client", "status", "--node", "n1", "-s", nats_server.url])
    assert code in (0, 1), stderr  # 1: nothing applied on this empty bus; never 2 or 3


HINT = (
    "credentials are given by --creds or NATS_CREDS (a .creds file: JWT accounts), --nkey or NATS_NKEY (an nkey "
    "seed file: static accounts), --user or NATS_USER (a user name, with --password or NATS_PASSWORD), "
    "--nats-token or NATS_TOKEN (a token), a nats context holding them (--context or NATS_CONTEXT), "
    "or the [nats] table of the --config file"
)


def refused(url: str, credentials: str) -> str:
    server = f"no NATS server at {url} (from the command line)"
    return f"connect: {server} accepted {credentials}: nats: 'Authorization Violation'; {HINT}"


async def test_static_accounts_refusing_an_nkey_name_the_seed_and_where_it_came_from(tmp_path: Path) -> None:
    stranger = issue_grants(tmp_path / "other", MeshParties(nodes=["n1"]))  # keys this server never heard of
    assert stranger.parties
    seed = seed_path(tmp_path / "other", party(Kind.NODE, "n1"))
    async with mesh_server(tmp_path / "mesh") as mesh:
        code, stderr, _ = await run(["mesh-provisioner", "query", "-s", mesh.server.url, "--nkey", str(seed)])
        assert (
            stderr.strip()
            == f"mesh-provisioner query: {refused(mesh.server.url, f'the nkey seed {seed} (from the command line)')}"
        )
        assert code == 4
        code, stderr, _ = await run(["mesh-provisioner-client", "status", "--node", "n1", "-s", mesh.server.url])
        assert f"accepted a connection without credentials: nats: 'Authorization Violation'; {HINT}" in stderr
        assert code == 4


async def test_a_context_s_credentials_refused_name_the_context(tmp_path: Path) -> None:
    seed = tmp_path / "stranger.nk"
    issue_grants(tmp_path / "other", MeshParties(nodes=["n1"]))
    seed.write_bytes(seed_path(tmp_path / "other", party(Kind.NODE, "n1")).read_bytes())
    contexts = tmp_path / "config" / "nats" / "context"
    async with mesh_server(tmp_path / "mesh") as mesh:
        contexts.mkdir(parents=True)
        (contexts / "lab.json").write_text(json.dumps({"url": mesh.server.url, "nkey": str(seed)}))
        environ = clean_environment() | {"XDG_CONFIG_HOME": str(tmp_path / "config")}
        code, stderr, _ = await run(["mesh-provisioner", "query", "--context", "lab"], environ)
    assert f"accepted the nkey seed {seed} (from nats context 'lab' at {contexts / 'lab.json'})" in stderr
    assert code == 4


async def test_a_user_and_password_refused_name_the_user_never_the_password(tmp_path: Path) -> None:
    config = 'authorization { user: ops, password: "the-right-one" }'
    async with local_nats(tmp_path / "nats", config) as server:
        environ = clean_environment() | {"NATS_USER": "ops", "NATS_PASSWORD": "hunter2-wrong"}
        code, stderr, _ = await run(["mesh-provisioner", "top", "--once", "-s", server.url], environ)
    assert (
        "accepted user 'ops' with a password (from NATS_PASSWORD and NATS_USER): nats: 'Authorization Violation'"
        in stderr
    )
    assert "hunter2" not in stderr and "the-right-one" not in stderr
    assert code == 4


async def test_jwt_accounts_refusing_a_creds_file_name_it(tmp_path: Path) -> None:
    """A `.creds` file of another operator's mesh: its account is none this server trusts."""
    issue_grants(tmp_path / "other", MeshParties(nodes=["n1"]), jwt=True)
    creds = creds_path(tmp_path / "other", party(Kind.NODE, "n1").label)
    async with jwt_mesh_server(tmp_path / "mesh") as mesh:
        environ = clean_environment() | {"NATS_CREDS": str(creds)}
        code, stderr, _ = await run(
            ["mesh-provisioner-client", "status", "--node", "n1", "-s", mesh.server.url], environ
        )
    assert f"accepted the credentials file {creds} (from NATS_CREDS): nats: 'Authorization Violation'; {HINT}" in stderr
    assert code == 4


async def test_a_daemon_refused_says_the_same_while_it_keeps_trying(tmp_path: Path) -> None:
    """`serve` and `reconcile --watch` never give up: their 'still connecting' warning names the
    credentials refused and how others are given."""
    issue_grants(tmp_path / "other", MeshParties(nodes=["n1"]))
    seed = seed_path(tmp_path / "other", party(Kind.NODE, "n1"))
    async with mesh_server(tmp_path / "mesh") as mesh:
        flags = {"url": mesh.server.url, "nkey": str(seed)}
        options = load_settings(BusSettings, flags, None, {}).options("a daemon")
        told = (
            f"(last: nats: 'Authorization Violation'); it refused the nkey seed {seed} (from the command line); {HINT}"
        )
        with logged(told, "registry.wire.bus") as waiter:
            async with anyio.create_task_group() as tg:

                async def connecting() -> None:
                    async with connect(options):
                        pytest.fail("connected on a seed the server does not know")

                tg.start_soon(connecting)
                await waiter.wait(within=30)
                tg.cancel_scope.cancel()
