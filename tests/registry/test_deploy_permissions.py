"""The grants of deploy/accounts.conf, proved against a real nats-server running that very text.

Each user connects with its own inbox prefix, as deploy/ tells it to, and acts through our `Bus`
and the library's calls, as the programs do. Denials surface as `PermissionDenied` naming the
subject: the server reports the violation on the connection's error callback, the call itself
only times out (kept short here).
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
from pydantic import SecretStr

from mesh_dev.local_nats import LocalNats, local_nats
from provisioner.buckets import ensure_buckets
from provisioner.registry_sync import sync_registry
from provisioner.server import run_server
from provisioner.settings import ServerSettings
from registry import buckets, keys
from registry.buckets import Bucket
from registry.bus import Bus, BusOptions, Message, connect
from registry.errors import BusError, PermissionDenied
from registry.kv import BucketConfig, bucket_config, converge, create_bucket, get_latest, put, snapshot
from registry.service import EndpointSpec, ServiceRequest, serve
from registry.verb_client import ERROR_HEADER
from registry.watch import scoped_watch
from tests.helpers import in_own_task

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PASSWORDS = {
    "sys": "PASSWORD_SYS",
    "mesh-provisioner": "PASSWORD_MESH_PROVISIONER",
    "n1": "PASSWORD_N1",
    "n2": "PASSWORD_N2",
    "operator": "PASSWORD_OPERATOR",
    "postgres": "PASSWORD_POSTGRES",
}
NEEDS = buckets.NEEDS
REGISTRY = buckets.REGISTRY
BOUND = Bucket("postgres_bound", keys.BOUND)
A_NEED = b'{"placeholder":"${config:x}"}'
VERB_REQUESTS: tuple[dict[str, str], ...] = (
    {},
    {"what": "needs", "node": "n1"},
    {"what": "needs", "module": "web"},
    {"what": "applied"},
    {"what": "collect", "node": "n1", "collection": "shell"},
)

Connect = Callable[[str], AbstractAsyncContextManager[Bus]]


async def _denied(subject: str, call: Awaitable[object]) -> None:
    """`call` fails as `PermissionDenied`, naming the publish `subject` (the server lower-cases it)."""
    with pytest.raises(PermissionDenied) as caught:
        await call
    assert caught.value.subject.startswith(subject.lower()), caught.value.subject
    assert f'permissions violation for publish to "{subject.lower()}' in caught.value.reason


def _password(user: str) -> str:
    return f"test-{user}-password"


def _server_config() -> str:
    variables = "".join(f'{variable}: "{_password(user)}"\n' for user, variable in PASSWORDS.items())
    return variables + (DEPLOY / "accounts.conf").read_text()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LocalNats]:
    async with in_own_task(local_nats(tmp_path / "nats", _server_config())) as started:
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
        await ensure_buckets(bus, BucketConfig())
        await sync_registry(bus, domains_file=None)
        assert bus.recent_denial(0) is None


async def test_the_deploy_config_is_the_tested_text() -> None:
    assert "include ./accounts.conf" in (DEPLOY / "nats-server.conf").read_text()


async def test_the_provisioner_creates_its_buckets_and_writes_the_registry(as_user: Connect, provisioned: None) -> None:
    async with as_user("mesh-provisioner") as bus:
        kinds = {item.key for item in await snapshot(bus, REGISTRY)}
        assert len(kinds) == 13
        for bucket in buckets.OWN:
            config = await bucket_config(bus, bucket)
            assert config is not None and config["allow_direct"], bucket.name
        assert bus.recent_denial(0) is None


async def test_a_node_reads_the_whole_registry(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        assert len(await snapshot(bus, REGISTRY)) == 13
        entry = await get_latest(bus, REGISTRY, "secret")
        assert entry is not None
        assert json.loads(entry.value)["answer"]["via"] == "verb"


async def test_a_node_writes_lists_and_gets_its_own_keys(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        assert await bucket_config(bus, NEEDS) is not None
        assert await snapshot(bus, NEEDS, ["n1.>"]) == []
        desired = {"n1.web.config.x": A_NEED, "n1.web.secret.db": A_NEED}
        changes = await converge(bus, NEEDS, [], desired)
        assert sorted(changes.written) == sorted(desired)
        listed = await snapshot(bus, NEEDS, ["n1.>"], include_deleted=True)
        assert {item.key: item.value for item in listed} == desired
        assert not await converge(bus, NEEDS, listed, desired)
        del desired["n1.web.secret.db"]
        assert (await converge(bus, NEEDS, listed, desired)).deleted == ["n1.web.secret.db"]
        got = await get_latest(bus, NEEDS, "n1.web.config.x")
        assert got is not None and got.value == A_NEED
        await put(bus, buckets.APPLIED, "n1.web", b"{}")
        assert [item.key for item in await snapshot(bus, buckets.APPLIED, ["n1.>"])] == ["n1.web"]
        contribution = keys.COLLECT.build(node="n1", collection="shell:zsh", contributor="web")
        await put(bus, buckets.COLLECT, contribution, b'{"items":["x"]}')
        one_collection = contribution.rsplit(".", 1)[0] + ".*"  # a wildcard inside the granted n1.>
        assert [item.key for item in await snapshot(bus, buckets.COLLECT, [one_collection])] == [contribution]
        assert bus.recent_denial(0) is None


async def test_a_node_watches_the_registry_and_its_own_keys(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        async with scoped_watch(bus, REGISTRY, ">") as registry_watch:
            seen = [(await anext(registry_watch)).key for _ in range(13)]
        assert len(set(seen)) == 13
        async with scoped_watch(bus, buckets.COLLECT, "n1.>") as own:
            await put(bus, buckets.COLLECT, "n1.shell.web", b'{"items":[]}')
            assert (await anext(own)).key == "n1.shell.web"
        assert bus.recent_denial(0) is None


async def test_a_node_cannot_write_another_nodes_key(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        await _denied(f"$KV.{NEEDS.name}.n2.web.config.x", put(bus, NEEDS, "n2.web.config.x", A_NEED))
        with pytest.raises(BusError, match="permissions violation"):
            await converge(bus, NEEDS, [], {"n2.web.config.x": A_NEED})


async def test_a_node_cannot_write_the_registry(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        await _denied(f"$KV.{REGISTRY.name}.secret", put(bus, REGISTRY, "secret", b"{}"))


async def test_a_node_cannot_list_or_get_another_nodes_keys(as_user: Connect, provisioned: None) -> None:
    async with as_user("n2") as bus:
        await put(bus, NEEDS, "n2.web.config.x", A_NEED)
    async with as_user("n1") as bus:
        await _denied(f"$JS.API.CONSUMER.CREATE.{NEEDS.stream}.", snapshot(bus, NEEDS, ["n2.>"]))
        await _denied(f"$JS.API.CONSUMER.CREATE.{NEEDS.stream}.", snapshot(bus, NEEDS))
        await _denied(NEEDS.direct_get_subject("n2.web.config.x"), get_latest(bus, NEEDS, "n2.web.config.x"))


async def test_a_node_lists_its_keys_with_one_filter_only(as_user: Connect, provisioned: None) -> None:
    """Two filters (`n1`, `n1.>`) leave the filter out of the create subject: not grantable."""
    async with as_user("n1") as bus:
        await _denied(f"$JS.API.CONSUMER.CREATE.{NEEDS.stream}.", snapshot(bus, NEEDS, ["n1", "n1.>"]))


async def _ignore(msg: Message) -> None:
    pass


async def test_a_node_cannot_subscribe_to_writes_or_other_inboxes(as_user: Connect, provisioned: None) -> None:
    """A denied subscribe never raises: the violation reaches only the error callback."""
    async with as_user("n1") as bus:
        for subject in (NEEDS.subject(">"), "_INBOX_n2.>", "_INBOX.>"):
            await bus.subscribe(subject, _ignore)
            await bus.flush()
            with anyio.fail_after(2):
                while (denial := bus.recent_denial(0)) is None or denial[0] != subject.lower():
                    await anyio.sleep(0.01)


async def test_the_operator_asks_the_verb_and_nothing_else(as_user: Connect, provisioned: None) -> None:
    async def answer(request: ServiceRequest) -> None:
        await request.respond(b'{"entries":[]}')

    endpoint = EndpointSpec("provisioning", buckets.VERB_SUBJECT, answer)
    async with (
        as_user("mesh-provisioner") as seat,
        serve(seat, name=buckets.SEAT, version="0.1.0", description="a stand-in verb", endpoints=[endpoint]),
    ):
        async with as_user("operator") as bus:
            reply = await bus.request(buckets.VERB_SUBJECT, b"{}", reply_wait=timedelta(seconds=1))
            assert reply.data == b'{"entries":[]}'
            for subject in ("mesh-vault.secret", "$SRV.PING", f"$JS.API.{REGISTRY.info_api}"):
                await _denied(subject, bus.request(subject, b"{}", reply_wait=timedelta(seconds=1)))
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
                await put(node, NEEDS, "n1.web.config.x", A_NEED)
            async with as_user("operator") as bus:
                for request in VERB_REQUESTS:
                    reply = await bus.request(
                        buckets.VERB_SUBJECT, json.dumps(request).encode(), reply_wait=timedelta(seconds=2)
                    )
                    assert ERROR_HEADER not in reply.headers, (request, reply.headers, reply.data)
                    assert isinstance(json.loads(reply.data), dict)
        finally:
            stop.set()
    assert not [r for r in caplog.records if "permissions violation" in r.getMessage()]


async def test_a_provider_reads_needs_and_writes_only_its_bound_bucket(as_user: Connect, provisioned: None) -> None:
    async with as_user("n1") as bus:
        await put(bus, NEEDS, "n1.web.bound.postgres=3Adb", A_NEED)
    async with as_user("postgres") as bus:
        assert [item.key for item in await snapshot(bus, NEEDS)] == ["n1.web.bound.postgres=3Adb"]
        await create_bucket(bus, BOUND, BucketConfig())
        await converge(bus, BOUND, [], {"n1.web.db.host": b'"db1"', "n2.web.db.host": b'"db2"'})
        await _denied(f"$KV.{NEEDS.name}.n1.web", put(bus, NEEDS, "n1.web.bound.postgres=3Adb", b"{}"))
    async with as_user("n1") as bus:
        assert await bucket_config(bus, BOUND) is not None
        bound = await get_latest(bus, BOUND, "n1.web.db.host")
        assert bound is not None and bound.value == b'"db1"'
        assert [item.key for item in await snapshot(bus, BOUND, ["n1.>"])] == ["n1.web.db.host"]
        await _denied(
            f"$JS.API.DIRECT.GET.{BOUND.stream}.$KV.{BOUND.name}.n2.", get_latest(bus, BOUND, "n2.web.db.host")
        )
