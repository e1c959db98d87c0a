"""Why nobody answers, said by the error, on a real nats-server with the accounts `grants` issues,
static and JWT (`registry.wire.no_responders`).

nats-server answers "no responders" alike, at once and with the same headers, to a request its
account has no import for and to one it imports from an account where nothing serves it; its
trace of the request (2.11+, delivered to nobody) tells them apart. The cases: a node
asking under a name its key does not cover, a node asking what it is not granted, a seat that is
down; and the other side of an import: a granted bucket that does not exist.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import local_nats
from registry.access import (
    SERVER_AUTH,
    Kind,
    MeshParties,
    Party,
    creds_path,
    issue_grants,
    load_jwt_auth,
    render_server_auth,
    seed_path,
)
from registry.contract import Bucket, KeyShape, buckets
from registry.errors import NobodyBehindImport, NoResponders, NoRoute, NotFound
from registry.wire import Bus, get_direct, put, snapshot
from registry.wire.no_responders import TRACE_WAIT, trace_route
from tests.helpers import clean_environment
from tests.isolation import NODES, OPERATORS, PROVIDERS, JwtMesh, Mesh, party, seat_serving

BIN = Path(sys.executable).parent
N1, OPS, SEAT = party(Kind.NODE, "n1"), party(Kind.OPERATOR, "ops"), party(Kind.SEAT)
VAULT = party(Kind.VAULT)
BOUND = Bucket("postgres_bound", KeyShape("<node>.<module>.<provision>"))
JWT_KEY = r" \(A[A-Z2-7]{55}\)"  # a JWT account is named by the server as its public key
TRACED = "(nats-server's trace of the request)"
NOT_GRANTED = (
    f"neither imports it nor serves it {TRACED}: the grants do not give it to this party "
    "(a node name its key does not cover, or grants not yet loaded)"
)


@asynccontextmanager
async def seatless(state: Path, mode: str) -> AsyncIterator[tuple[Mesh, Path]]:
    """nats-server on the issued grants (`mode`: static or JWT accounts) with no seat running,
    and the grants file a seat would read."""
    keys, out, config = state / "keys", state / "grants", state / "nats"
    jwt = mode == "jwt"
    grants = issue_grants(out, MeshParties(nodes=NODES, providers=PROVIDERS, operators=OPERATORS), keys=keys, jwt=jwt)
    config.mkdir(parents=True)
    if jwt:
        (config / SERVER_AUTH).write_text(render_server_auth(load_jwt_auth(out), config / "resolver"))
    else:
        (config / "accounts.conf").write_text((out / "accounts.conf").read_text())
    async with local_nats(config, f"include ./{SERVER_AUTH if jwt else 'accounts.conf'}") as server:
        yield (JwtMesh(server, keys, grants, out) if jwt else Mesh(server, keys, grants)), out / "grants.json"


@asynccontextmanager
async def once_seated(state: Path, mode: str) -> AsyncIterator[Mesh]:
    """`seatless`, once a seat has run (its buckets made) and stopped."""
    async with seatless(state, mode) as (mesh, grants_file):
        async with seat_serving(mesh, grants_file, PROVIDERS):
            pass
        yield mesh


MODES = pytest.mark.parametrize("mode", ["static", "jwt"], ids=["static accounts", "JWT accounts"])


def account(name: str, mesh: Mesh) -> str:
    """How a message names a party's account: by name, and in JWT mode its key too."""
    return re.escape(name) + (JWT_KEY if isinstance(mesh, JwtMesh) else "")


def credential(mesh: Mesh, who: Party) -> list[str]:
    if isinstance(mesh, JwtMesh):
        return ["--creds", str(creds_path(mesh.keys, who.label))]
    return ["--nkey", str(seed_path(mesh.keys, who))]


async def run(argv: list[str]) -> tuple[int, str]:
    done = await anyio.run_process([str(BIN / argv[0]), *argv[1:]], env=clean_environment(), check=False)
    return done.returncode, done.stderr.decode()


@MODES
async def test_a_node_name_its_key_does_not_cover_is_said_to_be_no_import_of_its_account(
    tmp_path: Path, mode: str
) -> None:
    """A node's `n1.x` asked with n1's key: its lease is not n1's, so the client exits 4."""
    async with seatless(tmp_path, mode) as (mesh, grants_file), seat_serving(mesh, grants_file, PROVIDERS):
        argv = ["mesh-provisioner-client", "reconcile", "--node", "n1.x", "--manifests", str(tmp_path)]
        code, stderr = await run(
            [*argv, "--materialize", str(tmp_path / "env"), "-s", mesh.server.url, *credential(mesh, N1)]
        )
    subject = "$JS.API.DIRECT.GET.KV_mesh-provisioner_leases.$KV.mesh-provisioner_leases.node.n1=2Ex"
    said = (
        f"mesh-provisioner-client: get mesh-provisioner_leases node.n1=2Ex: nobody answers {re.escape(subject)}: "
        f"account {account('node-n1', mesh)} {re.escape(NOT_GRANTED)}, or bucket mesh-provisioner_leases does not "
        "exist here, has no direct get, or its stream has no leader yet$"
    )
    assert re.match(said, stderr.strip().splitlines()[-1]), stderr
    assert code == 4


@MODES
async def test_a_seat_that_is_down_is_named_behind_the_import(tmp_path: Path, mode: str) -> None:
    async with once_seated(tmp_path, mode) as mesh:
        status = ["mesh-provisioner-client", "status", "--node", "n1", "-s", mesh.server.url]
        code, stderr = await run([*status, *credential(mesh, N1)])
        assert code == 4
        said = f"mesh-provisioner-client: ask mesh-provisioner.provisioning: {seat_down(account('node-n1', mesh))}$"
        assert re.match(said, stderr.strip().splitlines()[-1]), stderr
        query = ["mesh-provisioner", "query", "--wait", "1", "-s", mesh.server.url]
        code, stderr = await run([*query, *credential(mesh, OPS)])
    assert code == 4
    said = (
        r"mesh-provisioner query: ask mesh-provisioner.provisioning: no answer from the seat within 1 s "
        rf"\(last: {seat_down(account('operator-ops', mesh))}\)$"
    )
    assert re.match(said, stderr.strip().splitlines()[-1]), stderr


def seat_down(who: str) -> str:
    """What a party whose account is `who` (a pattern) is told when the seat is down, as a pattern."""
    return (
        f"nobody answers mesh-provisioner.provisioning: account {who} imports it from account "
        rf"(MESH|A[A-Z2-7]{{55}}), where nothing serves it {re.escape(TRACED)}: "
        r"the seat \(mesh-provisioner serve\) is not running"
    )


@MODES
async def test_what_a_node_is_not_granted_is_no_import_of_its_account(tmp_path: Path, mode: str) -> None:
    """Another node's needs, read and written: n1's account imports n1's keys alone."""
    async with once_seated(tmp_path, mode) as mesh, mesh.connect(N1) as n1:
        with pytest.raises(NoRoute) as read:
            await get_direct(n1, buckets.NEEDS, "n2.web.config.x")
        with pytest.raises(NoRoute) as written:
            await put(n1, buckets.NEEDS, "n2.web.config.x", b"{}")
        assert (await get_direct(n1, buckets.NEEDS, "n1.web.config.x")) is None, "its own keys it may read"
    for refused in (read.value, written.value):
        assert re.fullmatch(account("node-n1", mesh), refused.account)
        assert NOT_GRANTED in refused.reason
    assert (
        read.value.subject == "$JS.API.DIRECT.GET.KV_mesh-provisioner_needs.$KV.mesh-provisioner_needs.n2.web.config.x"
    )
    assert written.value.reason.endswith(
        "or bucket mesh-provisioner_needs does not exist here, or its stream has no leader yet (retry)"
    )


@MODES
async def test_a_granted_bucket_that_does_not_exist_is_named_behind_the_import(tmp_path: Path, mode: str) -> None:
    """n1 may read its keys of postgres_bound, which no provider has made (or which is gone)."""
    async with once_seated(tmp_path, mode) as mesh, mesh.connect(N1) as n1, mesh.connect(SEAT) as seat:
        with contextlib.suppress(NotFound):
            await seat.jetstream(f"STREAM.DELETE.{BOUND.stream}", operation="delete postgres_bound")
        with pytest.raises(NobodyBehindImport) as raised:
            await get_direct(n1, BOUND, "n1.app.db")
    assert raised.value.reason.endswith(
        f"where nothing serves it {TRACED}: bucket postgres_bound does not exist there, has no direct get, or its "
        "stream has no leader yet"
    )
    assert re.fullmatch(r"MESH|A[A-Z2-7]{55}", raised.value.exporter)


@MODES
async def test_a_party_that_may_not_publish_to_its_inbox_is_traced_once_and_no_call_is_said_denied_it(
    tmp_path: Path, mode: str
) -> None:
    """The vault's user publishes its gets of the needs alone, so the server refuses a trace sent
    to its inbox: said, never taken for the denial of another call, and not tried again."""
    async with once_seated(tmp_path, mode) as mesh, mesh.connect(VAULT) as vault, mesh.connect(SEAT) as seat:
        await seat.jetstream(f"STREAM.DELETE.{buckets.NEEDS.stream}", operation="delete the needs")
        started = time.monotonic()
        with pytest.raises(NoResponders) as first:
            await get_direct(vault, buckets.NEEDS, "n1.web.config.x")
        denied = vault.recent_denial(started)
        again = time.monotonic()
        with pytest.raises(NoResponders) as second:
            await get_direct(vault, buckets.NEEDS, "n1.web.config.x")
        asked_again_in = time.monotonic() - again
    assert denied is None, "the trace's refused inbox would be named as the denial of a call failing meanwhile"
    for raised in (first.value, second.value):
        assert raised.reason.endswith(
            "traces nothing to this connection (it may not publish to its own inbox) to tell which"
        )
    assert asked_again_in < TRACE_WAIT, "no trace waited for a second time"  # a trace waits this long


async def test_a_trace_delivers_nothing_and_follows_the_import(tmp_path: Path) -> None:
    """The premise of asking the server: a traced put of n1's own key is not stored."""
    async with once_seated(tmp_path, "static") as mesh, mesh.connect(N1) as n1, mesh.connect(SEAT) as seat:
        route = await trace_route(n1, buckets.NEEDS.subject("n1.web.config.x"))
        stored = await snapshot(seat, buckets.NEEDS)
        unrouted = await trace_route(n1, buckets.NEEDS.subject("n2.web.config.x"))
    assert route is not None and (route.account, route.imported_from, route.delivered) == ("node-n1", "MESH", False)
    assert stored == []
    assert unrouted is not None and (unrouted.imported_from, unrouted.delivered) == (None, False)


async def test_a_server_that_cannot_trace_is_said_to_leave_both_causes_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Bus, "server_version", property(lambda bus: (2, 10)))
    async with seatless(tmp_path, "static") as (mesh, _), mesh.connect(N1) as n1:
        with pytest.raises(NoResponders) as raised:
            await get_direct(n1, buckets.LEASES, "node.n2")
    assert type(raised.value) is NoResponders
    assert raised.value.reason.endswith(
        ": either this account has no import of it (the grants do not give it to this party), or whatever serves "
        "it is not running; nats-server 2.10 cannot trace a request (it can since 2.11) to tell which"
    )
