"""A party's account is bounded alike in both configurations `mesh-provisioner grants`
writes. On a real nats-server, static accounts and JWT accounts: a node's next connection past its
limit is refused, a connection's next subscription past its limit is refused, a message over its
payload limit closes the connection and lands nowhere; an honest client, watching, stays well under.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoServersError

from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.watch.watching import WatchTiming, watch
from registry.access import Kind, Party, creds_path, seed_path
from registry.access.limits import PARTY_LIMITS
from registry.contract import buckets
from registry.wire import Bus, ask, get_latest, nats_client
from tests.helpers import put_many
from tests.isolation import Domains, JwtMesh, Mesh, party

N1, SEAT = party(Kind.NODE, "n1"), party(Kind.SEAT)
LIMITS = PARTY_LIMITS[Kind.NODE]


def credentials(mesh: Mesh, who: Party) -> dict[str, str]:
    if isinstance(mesh, JwtMesh):
        return {"user_credentials": str(creds_path(mesh.keys, who.label))}
    return {"nkeys_seed": str(seed_path(mesh.keys, who))}


async def connected(mesh: Mesh, who: Party, **options: Any) -> Client:
    """nats-py itself on `who`'s credential, trying once: an attacker is not bound to our library."""
    return await nats.connect(
        mesh.server.url,
        **credentials(mesh, who),
        max_reconnect_attempts=1,
        reconnect_time_wait=0.05,
        connect_timeout=2,
        **options,
    )


async def refused(mesh: Mesh, who: Party) -> str:
    """Why nats-server refuses one more connection on `who`'s credential (fails if it takes it)."""
    reasons: list[str] = []

    async def on_error(err: Exception) -> None:
        reasons.append(str(err).lower())

    try:
        client = await connected(mesh, who, error_cb=on_error)
    except NoServersError:
        return " ".join(reasons)
    await client.close()
    pytest.fail(f"{who.label} was let in past its limit")


async def test_a_nodes_connection_past_its_limit_is_refused_and_one_freed_is_taken_again(mesh: Mesh) -> None:
    clients = [await connected(mesh, N1) for _ in range(LIMITS.connections)]
    try:
        assert all(c.is_connected for c in clients)
        assert "maximum account active connections exceeded" in await refused(mesh, N1)
        await clients.pop().close()
        with anyio.fail_after(5):
            while True:  # the server forgets a closed connection a moment after the client did
                try:
                    clients.append(await connected(mesh, N1))
                    break
                except NoServersError:
                    await anyio.sleep(0.05)
    finally:
        for client in clients:
            await client.close()


async def test_a_connections_subscription_past_its_limit_is_refused(mesh: Mesh) -> None:
    client = await connected(mesh, N1)
    delivered: list[str] = []

    async def on_message(msg: Msg) -> None:
        delivered.append(msg.subject)

    try:
        for number in range(LIMITS.subscriptions):
            await client.subscribe(f"limit.{number}", cb=on_message)
        last = f"limit.{LIMITS.subscriptions - 1}"
        await client.publish(last, b"")
        await client.flush(timeout=5)
        with anyio.fail_after(5):
            while last not in delivered:
                await anyio.sleep(0.01)
        await client.subscribe("limit.one-more", cb=on_message)
        with anyio.fail_after(5):
            while not client.is_closed:  # nats-py closes the connection on the server's -ERR
                await anyio.sleep(0.01)
    finally:
        await client.close()
    assert "maximum subscriptions exceeded" in str(client.last_error).lower()


@pytest.mark.parametrize("where", ["its own account", "its own key of needs"])
@pytest.mark.parametrize("by", ["its value", "its headers"])
async def test_a_message_over_the_payload_limit_closes_the_connection_and_lands_nowhere(
    mesh: Mesh, seat: Bus, where: str, by: str
) -> None:
    """The limit counts a message's headers with its value: a `{}` under headers past it is refused alike."""
    assert LIMITS.payload is not None
    subject = "limit.big" if where == "its own account" else buckets.NEEDS.subject("n1.big.config.x")
    value, headers = (
        (b"x" * (LIMITS.payload + 1), None) if by == "its value" else (b"{}", {"X-Pad": "p" * LIMITS.payload})
    )
    client = await connected(mesh, N1)
    try:
        await client.publish(subject, value, headers=headers)
        with anyio.fail_after(5):
            while not client.is_closed:
                await anyio.sleep(0.01)
    finally:
        await client.close()
    assert "maximum payload violation" in str(client.last_error).lower()
    assert await get_latest(seat, buckets.NEEDS, "n1.big.config.x") is None


async def test_a_page_larger_than_the_nodes_payload_limit_still_reaches_it(mesh: Mesh, seat: Bus) -> None:
    """The limit bounds what a node sends, never what it receives: the seat's pages are sized by its
    own connection's `max_payload`."""
    assert LIMITS.payload is not None
    need = json.dumps({"placeholder": "${config:x}", "used_in": ["X" * 400]}).encode()
    await put_many(seat, buckets.NEEDS, {f"n1.web.config.k{number:04}": need for number in range(1500)})
    async with mesh.connect(N1) as n1:
        first = await n1.request(buckets.VERB_SUBJECT, b'{"what": "needs"}')
        answer = await ask(n1, {"what": "needs"})
    assert len(first.data) > LIMITS.payload
    assert answer["total"]["entries"] == 1500


async def test_an_honest_client_watching_stays_well_under_its_limits(
    mesh: Mesh, domains: Domains, node_plan: ClientPlan
) -> None:
    async with mesh.connect(party(Kind.NODE, "n1")) as node:
        assert (await reconcile(node, node_plan)).ok
        held = await _watching_subscriptions(mesh, node, node_plan)
    assert 0 < held <= LIMITS.subscriptions // 10, held


async def _watching_subscriptions(mesh: Mesh, node: Bus, plan: ClientPlan) -> int:
    """How many subscriptions the client's connection holds once its watch runs (as nats-server
    counts them, in JWT mode; as nats-py does, in static mode, where no system user exists)."""
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(node, plan, WatchTiming(), task_status=task_status))
        held = await _server_count(mesh) if isinstance(mesh, JwtMesh) else _client_count(node)
        tg.cancel_scope.cancel()
    return held


async def _server_count(mesh: JwtMesh) -> int:
    account = next(g.account_key for g in mesh.grants.parties if g.party == N1)
    async with mesh.system() as system:
        reply = await system.request(f"$SYS.REQ.ACCOUNT.{account}.CONNZ", b'{"subscriptions": true}')
    connections = json.loads(reply.data)["data"]["connections"]
    assert len(connections) == 1, connections
    return int(connections[0]["subscriptions"])


def _client_count(bus: Bus) -> int:
    return len(nats_client(bus)._subs)  # the count nats-py keeps: no system user in static mode
