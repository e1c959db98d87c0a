"""The seat and the vault answer by who asks: the party comes from `Nats-Request-Info`,
set by nats-server on a `share: true` import, never from the request body.

Each test runs a real multi-account nats-server: the data and the seat in account `MESH`
(connections without credentials land there as the seat), and nodes, an operator and a stranger
in accounts of their own, each importing the verb and the vault's secret verb with `share: true`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import SECRET_SUBJECT, Vault
from registry.access import REQUEST_INFO, AccountGrant, Grants
from registry.contract import buckets
from registry.errors import ServiceError
from registry.serving import EndpointSpec, serve
from registry.wire import BusOptions, ask, connect, get_latest
from tests.helpers import fire, in_own_task, logged, put_many
from tests.provisioner.scoped_mesh import (
    N1,
    N2,
    NEED,
    NEEDS,
    OPS,
    PARTIES,
    STRANGER,
    accounts_config,
    as_account,
    asked_by,
    keys_of,
    mesh,
    one_page,
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(mesh(tmp_path / "nats")) as running:
        yield running


@pytest.mark.parametrize("what", ["needs", "applied", "collect"])
async def test_a_node_is_answered_about_its_own_keys_only(server: LocalNats, what: str) -> None:
    answer = await asked_by(server, N1.account, {"what": what})
    assert keys_of(answer)
    assert all(key.startswith("n1.") for key in keys_of(answer)), keys_of(answer)


async def test_a_node_sees_its_malformed_keys_too(server: LocalNats) -> None:
    answer = await asked_by(server, N1.account, {"what": "needs"})
    assert [m["key"] for m in answer["malformed"]] == ["n1.bad"]


@pytest.mark.parametrize("what", ["needs", "applied", "collect"])
async def test_a_node_asking_for_another_node_is_refused_403(server: LocalNats, what: str) -> None:
    with pytest.raises(ServiceError) as refused:
        await asked_by(server, N1.account, {"what": what, "node": "n2"})
    assert refused.value.code == "403"
    assert "asked by node n1 for node n2" in refused.value.description


async def test_a_node_is_answered_the_whole_registry(server: LocalNats) -> None:
    seen_by_node = await asked_by(server, N1.account, {})
    async with connect(BusOptions(servers=(server.url,), name="seat")) as seat:
        assert seen_by_node["entries"] == (await ask(seat, {}))["entries"]


@pytest.mark.parametrize("account", [OPS.account, None], ids=["an operator", "the data account itself"])
async def test_operators_and_the_data_account_see_the_mesh(server: LocalNats, account: str | None) -> None:
    if account is None:
        async with connect(BusOptions(servers=(server.url,), name="seat")) as seat:
            answer = await ask(seat, {"what": "needs"})
    else:
        answer = await asked_by(server, account, {"what": "needs"})
    assert sorted(keys_of(answer)) == sorted(NEEDS)
    narrowed = await asked_by(server, OPS.account, {"what": "needs", "node": "n2"})
    assert sorted(keys_of(narrowed)) == ["n2.web.config.a", "n2.web.secret.b"]


async def test_an_account_no_grant_names_is_refused_403(server: LocalNats) -> None:
    with pytest.raises(ServiceError) as refused:
        await asked_by(server, STRANGER, {})
    assert refused.value.code == "403"
    assert "stranger" in refused.value.description


async def test_a_forged_request_info_header_is_replaced_by_the_bus(server: LocalNats) -> None:
    """The attack: node n1 claims to be the operator in the very header the seat trusts."""
    forged = json.dumps({"acc": OPS.account, "user": OPS.account})
    async with as_account(server, N1.account) as bus:
        msg = await bus.request(buckets.VERB_SUBJECT, b'{"what":"needs"}', headers={REQUEST_INFO: forged})
    assert "Nats-Service-Error-Code" not in msg.headers
    assert all(key.startswith("n1.") for key in keys_of(json.loads(msg.data)))


@pytest.mark.parametrize(
    "body",
    [b'{"what":"needs","node":"n2"}', b'{"what":"needs","acc":"operator-ops"}', b'{"what":"needs","node":""}'],
    ids=["another node", "an account in the body", "an empty node"],
)
async def test_a_body_claiming_more_changes_nothing(server: LocalNats, body: bytes) -> None:
    async with as_account(server, N1.account) as bus:
        msg = await bus.request(buckets.VERB_SUBJECT, body)
    assert msg.headers.get("Nats-Service-Error-Code") in ("400", "403")
    assert b"n2.web" not in msg.data
    async with connect(BusOptions(servers=(server.url,), name="seat")) as seat:
        for key, value in NEEDS.items():
            item = await get_latest(seat, buckets.NEEDS, key)
            assert item is not None
            assert item.value == value


@asynccontextmanager
async def paged_mesh(state: Path, **settings: Any) -> AsyncIterator[LocalNats]:
    """A small max_payload and many n1 keys: n1's listing takes several pages."""
    async with mesh(state, "max_payload: 16384\n", bucket_max_value_size=8192, **settings) as server:
        async with connect(BusOptions(servers=(server.url,), name="seat")) as seat:
            await put_many(seat, buckets.NEEDS, {f"n1.m{i:04d}.config.x": NEED for i in range(400)})
        yield server


@pytest.fixture
async def paged(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(paged_mesh(tmp_path / "nats")) as running:
        yield running


@pytest.mark.parametrize("other", [N2.account, OPS.account], ids=["another node", "an operator"])
async def test_a_cursor_continues_only_for_the_party_that_started_it(paged: LocalNats, other: str) -> None:
    _, first = await one_page(paged, N1.account, {"what": "needs"})
    assert first["next"] is not None
    code, refused = await one_page(paged, other, {"cursor": first["next"]})
    assert (code, "entries" in refused) == ("410", False)
    code, following = await one_page(paged, N1.account, {"cursor": first["next"]})
    assert (code, following["page"]) == (None, 2)
    assert all(key.startswith("n1.") for key in keys_of(following))


async def test_a_node_asking_without_end_leaves_an_operators_listing_alone(paged: LocalNats) -> None:
    """The attack: ops starts a paged listing, n1 starts 40 of its own; ops's cursor still answers
    (it was dropped, 410, when the seat kept 32 listings for everyone together)."""
    _, first = await one_page(paged, OPS.account, {"what": "needs"})
    assert first["next"] is not None
    async with as_account(paged, N1.account) as n1:
        for _ in range(40):
            started = json.loads((await n1.request(buckets.VERB_SUBJECT, b'{"what":"needs"}')).data)
            assert started["next"] is not None
        last = started["next"]
    code, following = await one_page(paged, OPS.account, {"cursor": first["next"]})
    assert (code, following["page"]) == (None, 2)
    code, _ = await one_page(paged, N1.account, {"cursor": last})
    assert code is None  # n1 keeps its newest listings


async def test_a_node_follows_its_pages_to_its_whole_listing(paged: LocalNats) -> None:
    answer = await asked_by(paged, N1.account, {"what": "needs"})
    assert answer["total"]["entries"] == 401
    assert len(keys_of(answer)) == 402


async def test_the_grants_file_decides_the_scope(tmp_path: Path) -> None:
    grants = tmp_path / "grants.json"
    parties = [AccountGrant(party=p, account=p.account, user_key="U" + "A" * 55) for p in (N1, N2, OPS)]
    grants.write_text(Grants(data=(), parties=tuple(parties)).to_json())
    async with mesh(tmp_path / "nats", grants_file=grants, parties=None) as server:
        answer = await asked_by(server, N1.account, {"what": "applied"})
        assert keys_of(answer) == ["n1.web"]
        with pytest.raises(ServiceError) as refused:
            await asked_by(server, STRANGER, {"what": "applied"})
        assert refused.value.code == "403"


async def test_a_seat_without_grants_answers_its_own_account_only(tmp_path: Path) -> None:
    """Fail closed: with no grants file every account the bus names is refused, each node alike,
    saying which setting is missing; inside the seat's own account (the development bus) it answers."""
    with logged("no grants file (--grants-file, MESH_PROVISIONER_GRANTS_FILE)") as said:
        async with mesh(tmp_path / "nats", parties=None) as server:
            for account in (N1.account, OPS.account, STRANGER):
                with pytest.raises(ServiceError) as refused:
                    await asked_by(server, account, {"what": "needs"})
                assert refused.value.code == "403"
                assert "started without a grants file (--grants-file" in refused.value.description
            async with connect(BusOptions(servers=(server.url,), name="seat")) as seat:
                assert sorted(keys_of(await ask(seat, {"what": "needs"}))) == sorted(NEEDS)
    assert said.seen.is_set()


async def test_a_node_flooding_the_verb_leaves_room_for_everyone_else(tmp_path: Path) -> None:
    """The attack: n1 fires 200 listings at once at a seat reading 4 at a time with 16 waiting.
    n1 is answered 503 beyond its own share (2 read, 4 waiting); the operator asking meanwhile is
    answered (before, the flood filled the seat's queue and the operator was answered 503)."""
    limits = {
        "max_concurrent_requests": 4,
        "max_waiting_requests": 16,
        "max_concurrent_per_party": 2,
        "max_waiting_per_party": 4,
    }
    async with (
        paged_mesh(tmp_path / "nats", **limits) as server,
        as_account(server, N1.account) as n1,
        as_account(server, OPS.account) as ops,
    ):
        fired = await fire(n1, [b'{"what":"needs"}'] * 200)
        msg = await ops.request(buckets.VERB_SUBJECT, b'{"what":"needs","node":"n2"}')
        assert msg.headers.get("Nats-Service-Error") is None
        assert sorted(keys_of(json.loads(msg.data))) == ["n2.web.config.a", "n2.web.secret.b"]
        replies = await fired.replies(within=30)
    refused = [r for r in replies if r.headers.get("Nats-Service-Error-Code") == "503"]
    assert refused
    assert {r.headers["Nats-Service-Error"] for r in refused} == {"too many of your requests waiting; retry shortly"}


async def test_a_node_listing_its_heavy_keys_at_once_keeps_the_seats_connection(tmp_path: Path) -> None:
    """The attack: n1 holds values of 60 KB and starts four listings of them at once. Each was one
    batch read of all its values to the seat's connection, which nats-server closed as a slow
    consumer past `max_pending` (every request in flight lost); now a listing past one page of
    values is streamed, a bounded pull at a time, and the seat's connection stays."""
    # One read at a time against 2 MB pending: the seat's design is 32 reads of a page against 64 MiB.
    extra = "max_pending: 2MB\n"
    async with mesh(tmp_path / "nats", extra, bucket_max_value_size=65536, max_concurrent_requests=1) as server:
        async with connect(BusOptions(servers=(server.url,), name="seat")) as seat:
            await put_many(
                seat, buckets.NEEDS, {f"n1.m{i:03d}.config.x": b'"' + b"x" * 60_000 + b'"' for i in range(100)}
            )
        with logged("nats connection lost") as lost:
            async with as_account(server, N1.account) as n1:
                fired = await fire(n1, [b'{"what":"needs"}'] * 4)
                replies = await fired.replies(within=30)
                assert all("Nats-Service-Error-Code" not in reply.headers for reply in replies)
                answer = await ask(n1, {"what": "needs"})
        assert len(answer["entries"]) == 101  # and the one the mesh is seeded with
        assert not lost.seen.is_set()


# -- the development vault ---------------------------------------------------------------------


@asynccontextmanager
async def vault_mesh(state: Path) -> AsyncIterator[LocalNats]:
    config = accounts_config([N1.account, N2.account, OPS.account, STRANGER])
    async with local_nats(state, config) as server, connect(BusOptions(servers=(server.url,), name="vault")) as bus:
        endpoint = EndpointSpec("secret", SECRET_SUBJECT, Vault(parties=PARTIES).answer_secret)
        async with serve(bus, name="mesh-vault", version="0.1.0", description="vault", endpoints=[endpoint]):
            yield server


@pytest.fixture
async def vault(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(vault_mesh(tmp_path / "nats")) as running:
        yield running


async def ask_secret(server: LocalNats, account: str, body: dict[str, str]) -> tuple[str | None, dict[str, Any]]:
    async with as_account(server, account) as bus:
        msg = await bus.request(SECRET_SUBJECT, json.dumps(body).encode())
    return msg.headers.get("Nats-Service-Error-Code"), json.loads(msg.data)


SECRET = {"module": "app", "kind": "secret", "name": "db-password"}


async def test_the_vault_answers_a_node_about_its_own_secret(vault: LocalNats) -> None:
    code, answer = await ask_secret(vault, N1.account, {"node": "n1", **SECRET})
    assert (code, answer) == (None, {"value": "dev-only-s3cret-password"})


@pytest.mark.parametrize("node", [{"node": "n2"}, {}], ids=["another node", "no node"])
async def test_the_vault_refuses_a_node_asking_for_another_nodes_secret(vault: LocalNats, node: dict[str, str]) -> None:
    code, answer = await ask_secret(vault, N1.account, {**node, **SECRET})
    assert code == "403"
    assert "value" not in answer
    assert "asked by node n1" in answer["error"]


async def test_the_vault_refuses_an_account_no_grant_names(vault: LocalNats) -> None:
    code, answer = await ask_secret(vault, STRANGER, {"node": "n1", **SECRET})
    assert (code, "value" in answer) == ("403", False)


async def test_the_vault_refuses_an_operator_any_secret(vault: LocalNats) -> None:
    """The vault's contract: a secret goes to a node whose module declares it, never to an operator."""
    code, answer = await ask_secret(vault, OPS.account, {"node": "n2", **SECRET})
    assert (code, "value" in answer) == ("403", False)
