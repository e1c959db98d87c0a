"""Decentralized auth (JWT mode) on a real nats-server: the same grants as operator, account and
user JWTs, with accounts pushed and deleted at run time, without a reload or a restart.

The seat serves with its `.creds`; `Nats-Request-Info.acc` is then an account's public key, which
grants.json maps back to its party.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import nats
import pytest
from nats.errors import NoServersError

from provisioner.commands.removal import remove_node
from registry.access import (
    CLAIMS_UPDATE,
    DATA_ACCOUNT,
    AccountPushError,
    Kind,
    account_jwt_path,
    account_key,
    claims_of,
    delete_accounts,
    encode_jwt,
    load_jwt_auth,
    operator_key,
    push_account,
)
from registry.contract import buckets
from registry.errors import BusError, NoResponders, ServiceError
from registry.wire import Bus, ask, get_latest, put, snapshot, update
from tests.helpers import in_own_task
from tests.isolation import JwtMesh, jwt_mesh_server, party

N1, N2, N3 = party(Kind.NODE, "n1"), party(Kind.NODE, "n2"), party(Kind.NODE, "n3")
OPS, SEAT = party(Kind.OPERATOR, "ops"), party(Kind.SEAT)
A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[JwtMesh]:
    async with in_own_task(jwt_mesh_server(tmp_path)) as running:
        yield running


@pytest.fixture
async def seat(mesh: JwtMesh) -> AsyncIterator[Bus]:
    async with in_own_task(mesh.connect(SEAT)) as bus:
        for node in ("n1", "n2"):
            await put(bus, buckets.NEEDS, f"{node}.web.config.x", A_NEED)
            await put(bus, buckets.APPLIED, f"{node}.web", b'{"state":"applied"}')
        yield bus


async def keys_of(seat: Bus, node: str) -> list[tuple[str, str, bytes, int]]:
    """Every live key of `node` in the node-written buckets, as the seat sees them."""
    found = []
    for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT):
        found += [(bucket.name, i.key, i.value, i.revision) for i in await snapshot(seat, bucket)]
    return sorted(k for k in found if k[1].startswith(f"{node}."))


async def refused(mesh: JwtMesh, who: str) -> str:
    """Why nats-server refuses a connection on `who`'s credential (fails if it accepts it)."""
    reasons: list[str] = []

    async def on_error(err: Exception) -> None:
        reasons.append(str(err).lower())

    # Two attempts, then "no servers" (nats-py closes what it opened only when it may reconnect,
    # and 0 attempts means forever).
    try:
        client = await nats.connect(
            mesh.server.url,
            user_credentials=str(mesh.keys / f"{who}.creds"),
            error_cb=on_error,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.05,
            connect_timeout=2,
        )
    except NoServersError:
        return " ".join(reasons)
    await client.close()
    pytest.fail(f"{who} was let in")


async def test_the_seat_serves_and_a_node_writes_and_reads_its_own_keys(mesh: JwtMesh, seat: Bus) -> None:
    async with mesh.connect(N1) as n1:
        current = await get_latest(n1, buckets.NEEDS, "n1.web.config.x")
        assert current is not None
        await update(n1, buckets.NEEDS, "n1.web.config.x", b'{"placeholder":"${config:y}"}', last=current.revision)
        await put(n1, buckets.COLLECT, "n1.shell=3Azsh.web", b'{"items":["a"]}')
        mine = await get_latest(n1, buckets.COLLECT, "n1.shell=3Azsh.web")
    stored = await get_latest(seat, buckets.NEEDS, "n1.web.config.x")
    assert stored is not None and b"config:y" in stored.value
    assert mine is not None and mine.value == b'{"items":["a"]}'


@pytest.mark.parametrize(
    ("bucket", "key"),
    [(buckets.NEEDS, "n2.web.config.x"), (buckets.APPLIED, "n2.web"), (buckets.REGISTRY, "secret")],
    ids=["another node's need", "another node's applied record", "the registry"],
)
async def test_a_node_cannot_write_outside_its_own_keys(
    mesh: JwtMesh, seat: Bus, bucket: buckets.Bucket, key: str
) -> None:
    before = await keys_of(seat, "n2")
    registry_before = await get_latest(seat, buckets.REGISTRY, "secret")
    async with mesh.connect(N1) as n1:
        with pytest.raises(BusError):
            await put(n1, bucket, key, b'{"evil":true}')
        with pytest.raises(BusError):
            await get_latest(n1, buckets.NEEDS, "n2.web.config.x")
    assert await keys_of(seat, "n2") == before
    assert await get_latest(seat, buckets.REGISTRY, "secret") == registry_before


async def test_a_direct_get_answered_into_another_nodes_key_lands_nowhere(mesh: JwtMesh, seat: Bus) -> None:
    before = await keys_of(seat, "n2")
    own_get = f"$JS.API.DIRECT.GET.{buckets.NEEDS.stream}.{buckets.NEEDS.subject('n1.web.config.x')}"
    attacker = await mesh.raw(N1)
    try:
        await attacker.publish(own_get, b"", reply=buckets.NEEDS.subject("n2.web.config.x"))
        # A later request on the same path answered: the one before it has been handled too.
        assert (await attacker.request(own_get, b"", timeout=5)).data == A_NEED
    finally:
        await attacker.close()
    assert await keys_of(seat, "n2") == before


async def test_the_verb_scopes_a_node_by_its_account_key(mesh: JwtMesh, seat: Bus) -> None:
    async with mesh.connect(N1) as n1:
        mine = await ask(n1, {"what": "needs"})
        with pytest.raises(ServiceError) as denied:
            await ask(n1, {"what": "needs", "node": "n2"})
    async with mesh.connect(OPS) as ops:
        everyone = await ask(ops, {"what": "needs"})
    assert {e["node"] for e in mine["entries"]} == {"n1"}
    assert denied.value.code == "403"
    assert {e["node"] for e in everyone["entries"]} == {"n1", "n2"}


async def test_a_node_added_at_run_time_works_at_once(mesh: JwtMesh, seat: Bus) -> None:
    data_before = account_jwt_path(mesh.out, DATA_ACCOUNT).read_text()
    grants = mesh.issue(("n1", "n2", "n3"))
    assert grants.parties[:2] == mesh.grants.parties[:2]  # the others' keys and grants are kept
    assert account_jwt_path(mesh.out, DATA_ACCOUNT).read_text() == data_before  # exports cover any node
    assert "authorization" in await refused(mesh, N3.label)  # not pushed yet

    async with mesh.system() as system:
        n3_jwt = account_jwt_path(mesh.out, N3.label).read_text().strip()
        answer = await push_account(system, n3_jwt, operator=load_jwt_auth(mesh.out).operator)
    assert answer == "jwt updated"

    async with mesh.connect(N3) as n3:
        await put(n3, buckets.NEEDS, "n3.web.config.x", A_NEED)
        own = await get_latest(n3, buckets.NEEDS, "n3.web.config.x")
        with pytest.raises(BusError):
            await put(n3, buckets.NEEDS, "n1.web.config.x", b'{"evil":true}')
        listed = await ask(n3, {"what": "needs"})  # the seat reads the new grants.json, no restart
    assert own is not None and own.value == A_NEED
    assert [e["key"] for e in listed["entries"]] == ["n3.web.config.x"]
    stored = await get_latest(seat, buckets.NEEDS, "n1.web.config.x")
    assert stored is not None and stored.value == A_NEED


async def test_a_removed_node_loses_its_keys_and_its_credential_is_refused(mesh: JwtMesh, seat: Bus) -> None:
    closed = anyio.Event()
    errors: list[str] = []

    async def on_error(err: Exception) -> None:
        errors.append(str(err).lower())

    async def on_disconnect() -> None:
        closed.set()

    n2 = await nats.connect(
        mesh.server.url,
        user_credentials=str(mesh.keys / f"{N2.label}.creds"),
        error_cb=on_error,
        disconnected_cb=on_disconnect,
        max_reconnect_attempts=1,
        reconnect_time_wait=0.1,
    )
    n2_account = mesh.grants.parties[1].account_key
    assert n2_account is not None and mesh.grants.parties[1].party == N2
    try:
        removed = await remove_node(seat, "n2")
        assert removed and await keys_of(seat, "n2") == []
        async with mesh.system() as system:
            answer = await delete_accounts(system, operator_key(mesh.keys), [n2_account])
        assert "deleted 1" in answer, answer
        with anyio.fail_after(10):
            await closed.wait()  # the server closed the open connection of the deleted account
    finally:
        await n2.close()
    reason = await refused(mesh, N2.label)
    assert "authorization" in reason or "expired" in reason, reason

    mesh.issue(("n1",))
    assert n2_account not in load_jwt_auth(mesh.out).accounts  # a restart does not preload it again
    async with mesh.connect(N1) as n1:
        assert await get_latest(n1, buckets.NEEDS, "n1.web.config.x") is not None


async def test_only_the_system_account_pushes_accounts(mesh: JwtMesh, seat: Bus) -> None:
    mesh.issue(("n1", "n2", "n3"))
    n3_jwt = account_jwt_path(mesh.out, N3.label).read_bytes().strip()
    async with mesh.connect(N1) as n1:
        with pytest.raises(NoResponders):  # $SYS is nobody's but the system account's
            await n1.request(CLAIMS_UPDATE, n3_jwt)
    assert "authorization" in await refused(mesh, N3.label)


async def test_an_account_the_operator_did_not_sign_grants_nothing(mesh: JwtMesh, seat: Bus) -> None:
    """A node signing its own account with a wider import gets nowhere. `push_account` refuses
    it; pushed anyway by the system user, the resolver stores it but the server takes account
    claims from the operator only: the node's users are refused, nothing is widened."""
    n1_key = account_key(mesh.keys, N1.label)
    wider = claims_of(account_jwt_path(mesh.out, N1.label).read_text().strip())["nats"]
    wider["imports"][0]["subject"] = buckets.NEEDS.subject(">")
    forged = encode_jwt(n1_key, subject=n1_key.public_key, name=N1.label, body=wider)
    before = await keys_of(seat, "n2")
    async with mesh.system() as system:
        with pytest.raises(AccountPushError):
            await push_account(system, forged, operator=load_jwt_auth(mesh.out).operator)
        async with mesh.connect(N1) as n1:
            await put(n1, buckets.NEEDS, "n1.web.config.x", A_NEED)  # still served as granted
        await system.request(CLAIMS_UPDATE, forged.encode())
    # The server keeps the account it holds (or refuses its users, when it must load it afresh).
    try:
        n1_again = await nats.connect(
            mesh.server.url,
            user_credentials=str(mesh.keys / f"{N1.label}.creds"),
            max_reconnect_attempts=1,
            reconnect_time_wait=0.05,
            connect_timeout=2,
        )
    except NoServersError:
        pass
    else:
        try:
            with pytest.raises(nats.errors.NoRespondersError):
                await n1_again.request(buckets.NEEDS.subject("n2.web.config.x"), b'{"evil":true}', timeout=2)
        finally:
            await n1_again.close()
    assert await keys_of(seat, "n2") == before
