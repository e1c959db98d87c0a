"""The grants of deploy/accounts.conf, proved against a real nats-server running that very text.

Each user connects with its own inbox prefix, as deploy/ tells it to. Denials surface as
`PermissionDenied` through `Bus.translate_errors`: the server reports the violation on the
connection's error callback, the call itself only times out (kept short here).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest
from nats import micro
from nats.micro.request import Request
from pydantic import SecretStr

from provisioner.server import run_server
from provisioner.settings import ServerSettings
from registry import buckets, keys
from registry.bus import Bus, BusError, BusOptions, PermissionDenied, connect
from registry.catalogue import load_catalogue
from registry.compile import registry_values
from registry.kv import converge, snapshot
from registry.local_nats import LocalNats, local_nats
from registry.watch import scoped_watch

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PASSWORDS = {
    "sys": "PASSWORD_SYS",
    "mesh-provisioner": "PASSWORD_MESH_PROVISIONER",
    "n1": "PASSWORD_N1",
    "n2": "PASSWORD_N2",
    "operator": "PASSWORD_OPERATOR",
    "postgres": "PASSWORD_POSTGRES",
}
NEEDS = buckets.NEEDS.name
REGISTRY = buckets.REGISTRY.name
BOUND = buckets.bound_bucket("postgres").name
A_NEED = b'{"placeholder":"${config:x}"}'
VERB_REQUESTS: tuple[dict[str, str], ...] = (
    {},
    {"what": "needs", "node": "n1"},
    {"what": "needs", "module": "web"},
    {"what": "applied"},
    {"what": "collect", "node": "n1", "collection": "shell"},
)

Connect = Callable[[str], AbstractAsyncContextManager[Bus]]


async def _denied(bus: Bus, subject: str, call: Awaitable[object]) -> None:
    """`call` fails as `PermissionDenied`, naming the publish `subject` (the server lower-cases it)."""
    with pytest.raises(PermissionDenied) as caught, bus.translate_errors(f"publish to {subject}"):
        await call
    assert f'permissions violation for publish to "{subject.lower()}' in caught.value.reason


def _password(user: str) -> str:
    return f"test-{user}-password"


def _server_config() -> str:
    variables = "".join(f'{variable}: "{_password(user)}"\n' for user, variable in PASSWORDS.items())
    return variables + (DEPLOY / "accounts.conf").read_text()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with local_nats(tmp_path / "nats", _server_config()) as started:
        yield started


@pytest.fixture
def as_user(server: LocalNats) -> Connect:
    def connect_as(user: str) -> AbstractAsyncContextManager[Bus]:
        return connect(
            BusOptions(
                servers=(server.url,),
                name=f"test-{user}",
                user=user,
                password=SecretStr(_password(user)),
                inbox_prefix=f"_INBOX_{user}",
                request_timeout=timedelta(seconds=1),
            )
        )

    return connect_as


@pytest.fixture
async def provisioned(as_user: Connect) -> None:
    """The provisioner's start: the four buckets, created for direct get, and the registry written."""
    async with as_user("mesh-provisioner") as bus:
        for bucket in buckets.OWN:
            await bus.js.create_key_value(bucket=bucket.name, direct=True)
        registry = await bus.js.key_value(REGISTRY)
        current = await snapshot(bus, REGISTRY, include_deleted=True)
        await converge(bus, registry, REGISTRY, current, registry_values(load_catalogue()))
        assert bus.recent_denial(0) is None


async def test_the_deploy_config_is_the_tested_text() -> None:
    assert "include ./accounts.conf" in (DEPLOY / "nats-server.conf").read_text()


async def test_the_provisioner_creates_its_buckets_and_writes_the_registry(as_user: Connect, provisioned: None) -> None:
    async with as_user("mesh-provisioner") as bus:
        kinds = {item.key for item in await snapshot(bus, REGISTRY)}
        assert len(kinds) == 13
        for bucket in buckets.OWN:
            status = await (await bus.js.key_value(bucket.name)).status()
            assert status.stream_info.config.allow_direct
        assert bus.recent_denial(0) is None


async def test_a_node_reads_the_whole_registry(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        assert len(await snapshot(bus, REGISTRY)) == 13
        registry = await bus.js.key_value(REGISTRY)
        entry = await registry.get("secret")
        assert json.loads(entry.value or b"")["answer"]["via"] == "verb"


async def test_a_node_writes_lists_and_gets_its_own_keys(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        kv = await bus.js.key_value(NEEDS)
        assert await snapshot(bus, NEEDS, ["n1.>"]) == []
        desired = {"n1.web.config.x": A_NEED, "n1.web.secret.db": A_NEED}
        changes = await converge(bus, kv, NEEDS, [], desired)
        assert sorted(changes.written) == sorted(desired)
        listed = await snapshot(bus, NEEDS, ["n1.>"], include_deleted=True)
        assert {item.key: item.value for item in listed} == desired
        assert not await converge(bus, kv, NEEDS, listed, desired)
        del desired["n1.web.secret.db"]
        assert (await converge(bus, kv, NEEDS, listed, desired)).deleted == ["n1.web.secret.db"]
        assert (await kv.get("n1.web.config.x")).value == A_NEED
        applied = await bus.js.key_value(buckets.APPLIED.name)
        await applied.put("n1.web", b"{}")
        assert [item.key for item in await snapshot(bus, buckets.APPLIED.name, ["n1.>"])] == ["n1.web"]
        collect = await bus.js.key_value(buckets.COLLECT.name)
        contribution = keys.COLLECT.build(node="n1", collection="shell:zsh", contributor="web")
        await collect.put(contribution, b'{"items":["x"]}')
        one_collection = contribution.rsplit(".", 1)[0] + ".*"  # a wildcard inside the granted n1.>
        assert [item.key for item in await snapshot(bus, buckets.COLLECT.name, [one_collection])] == [contribution]
        assert bus.recent_denial(0) is None


async def test_a_node_watches_the_registry_and_its_own_keys(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        async with scoped_watch(bus, REGISTRY, ">") as registry_watch:
            seen = [(await anext(registry_watch)).key for _ in range(13)]
        assert len(set(seen)) == 13
        collect = await bus.js.key_value(buckets.COLLECT.name)
        async with scoped_watch(bus, buckets.COLLECT.name, "n1.>") as own:
            await collect.put("n1.shell.web", b'{"items":[]}')
            assert (await anext(own)).key == "n1.shell.web"
        assert bus.recent_denial(0) is None


async def test_a_node_cannot_write_another_nodes_key(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        kv = await bus.js.key_value(NEEDS)
        await _denied(bus, f"$KV.{NEEDS}.n2.web.config.x", kv.put("n2.web.config.x", A_NEED))
        with pytest.raises(BusError, match="permissions violation"):
            await converge(bus, kv, NEEDS, [], {"n2.web.config.x": A_NEED})


async def test_a_node_cannot_write_the_registry(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        registry = await bus.js.key_value(REGISTRY)
        await _denied(bus, f"$KV.{REGISTRY}.secret", registry.put("secret", b"{}"))


async def test_a_node_cannot_list_or_get_another_nodes_keys(as_user: Connect, provisioned: None) -> None:
    async with as_user("n2") as bus:
        kv = await bus.js.key_value(NEEDS)
        await kv.put("n2.web.config.x", A_NEED)
    async with as_user("n1") as bus:
        await _denied(bus, f"$JS.API.CONSUMER.CREATE.KV_{NEEDS}.", snapshot(bus, NEEDS, ["n2.>"]))
        await _denied(bus, f"$JS.API.CONSUMER.CREATE.KV_{NEEDS}.", snapshot(bus, NEEDS))
        kv = await bus.js.key_value(NEEDS)
        direct_get = f"$JS.API.DIRECT.GET.KV_{NEEDS}.$KV.{NEEDS}.n2.web.config.x"
        await _denied(bus, direct_get, kv.get("n2.web.config.x"))


async def test_a_node_lists_its_keys_with_one_filter_only(as_user: Connect, provisioned: None) -> None:
    """Two filters (`n1`, `n1.>`) leave the filter out of the create subject: not grantable."""
    async with as_user("n1") as bus:
        await _denied(bus, f"$JS.API.CONSUMER.CREATE.KV_{NEEDS}.", snapshot(bus, NEEDS, ["n1", "n1.>"]))


async def test_a_node_cannot_subscribe_to_writes_or_other_inboxes(as_user: Connect, provisioned: None) -> None:
    """A denied subscribe never raises: the violation reaches only the error callback."""
    async with as_user("n1") as bus:
        for subject in (f"$KV.{NEEDS}.>", "_INBOX_n2.>", "_INBOX.>"):
            await bus.nc.subscribe(subject)
            await bus.nc.flush()
            with anyio.fail_after(2):
                while subject.lower() not in (bus.recent_denial(0) or ""):
                    await anyio.sleep(0.01)


async def test_the_operator_asks_the_verb_and_nothing_else(as_user: Connect, provisioned: None) -> None:
    async def answer(request: Request) -> None:
        await request.respond(b'{"entries":[]}')

    async with as_user("mesh-provisioner") as seat:
        service = await micro.add_service(seat.nc, name=buckets.SEAT, version="0.1.0")
        await service.add_endpoint(name="provisioning", subject=buckets.VERB_SUBJECT, handler=answer)
        try:
            async with as_user("operator") as bus:
                with bus.translate_errors("ask the verb"):
                    reply = await bus.nc.request(buckets.VERB_SUBJECT, b"{}", timeout=1)
                assert reply.data == b'{"entries":[]}'
                for subject in ("mesh-vault.secret", "$SRV.PING", f"$JS.API.STREAM.INFO.KV_{REGISTRY}"):
                    await _denied(bus, subject, bus.nc.request(subject, b"{}", timeout=1))
        finally:
            await service.stop()
        assert seat.recent_denial(0) is None


async def test_the_provisioner_server_runs_on_its_grants_alone(
    as_user: Connect, server: LocalNats, caplog: pytest.LogCaptureFixture
) -> None:
    stop = anyio.Event()
    options = BusOptions(
        servers=(server.url,),
        name=buckets.SEAT,
        user="mesh-provisioner",
        password=SecretStr(_password("mesh-provisioner")),
        inbox_prefix="_INBOX_mesh-provisioner",
        request_timeout=timedelta(seconds=1),
    )
    run = partial(run_server, bus_options=options, settings=ServerSettings(), stop=stop)
    async with anyio.create_task_group() as tasks:
        await tasks.start(run)
        try:
            async with as_user("n1") as node:
                await (await node.js.key_value(NEEDS)).put("n1.web.config.x", A_NEED)
            async with as_user("operator") as bus:
                for request in VERB_REQUESTS:
                    with bus.translate_errors(f"ask {request}"):
                        reply = await bus.nc.request(buckets.VERB_SUBJECT, json.dumps(request).encode(), timeout=2)
                    assert "Nats-Service-Error" not in (reply.headers or {}), (request, reply.headers, reply.data)
                    assert isinstance(json.loads(reply.data), dict)
        finally:
            stop.set()
    assert not [r for r in caplog.records if "permissions violation" in r.getMessage()]


async def test_a_provider_reads_needs_and_writes_only_its_bound_bucket(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        await (await bus.js.key_value(NEEDS)).put("n1.web.bound.postgres=3Adb", A_NEED)
    async with as_user("postgres") as bus:
        assert [item.key for item in await snapshot(bus, NEEDS)] == ["n1.web.bound.postgres=3Adb"]
        bound = await bus.js.create_key_value(bucket=BOUND, direct=True)
        await converge(bus, bound, BOUND, [], {"n1.web.db.host": b'"db1"', "n2.web.db.host": b'"db2"'})
        needs = await bus.js.key_value(NEEDS)
        await _denied(bus, f"$KV.{NEEDS}.n1.web", needs.put("n1.web.bound.postgres=3Adb", b"{}"))
    async with as_user("n1") as bus:
        bound = await bus.js.key_value(BOUND)
        assert (await bound.get("n1.web.db.host")).value == b'"db1"'
        assert [item.key for item in await snapshot(bus, BOUND, ["n1.>"])] == ["n1.web.db.host"]
        await _denied(bus, f"$JS.API.DIRECT.GET.KV_{BOUND}.$KV.{BOUND}.n2.", bound.get("n2.web.db.host"))
