"""registry.provider.sdk on a real multi-account nats-server: the postgres provider, on its own account,
reads who needs it from the verb and converges its own `postgres_bound`, then a consumer node's
client resolves what it wrote."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from provisioner_client.reconcile import ClientPlan, reconcile
from registry.access import Kind, bound_bucket
from registry.contract import buckets
from registry.provider import Bind, BoundNeed, bound_needs, provide
from registry.wire import Bus, delete, get_direct, get_last_many, put
from tests.helpers import in_own_task, sh_env
from tests.isolation import Mesh, mesh_server, party

BOUND = bound_bucket("postgres")


def binding(host: str) -> Bind:
    """What the test provider binds: the host and port of provision `db`; nothing else."""
    bindings: dict[str, object] = {"host": host, "port": 5432}

    def bind(need: BoundNeed) -> object:
        if need.provision != "db":
            return None
        return bindings.get(need.local) if need.local else bindings

    return bind


bind = binding("db-1.internal")


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[Mesh]:
    async with in_own_task(mesh_server(tmp_path / "mesh")) as running:
        yield running


@pytest.fixture
async def provider(mesh: Mesh) -> AsyncIterator[Bus]:
    async with in_own_task(mesh.connect(party(Kind.PROVIDER, "postgres"))) as connected:
        yield connected


async def need(seat: Bus, node: str, module: str, name: str, kind: str = "bound") -> str:
    """Registers a need as a node's client would (written here by the seat, which owns the bucket)."""
    key = buckets.NEEDS.shape.build(node=node, module=module, kind=kind, name=name)
    value = {"placeholder": f"${{{kind}:{name}}}", "used_in": ["X"]}
    await put(seat, buckets.NEEDS, key, json.dumps(value).encode())
    return key


async def bound_content(bus: Bus) -> dict[str, object]:
    return {item.key: json.loads(item.value) for item in await get_last_many(bus, BOUND, ">") if not item.deleted}


async def test_the_provider_reads_only_the_bound_needs_naming_it(seat: Bus, provider: Bus) -> None:
    await need(seat, "n1", "app", "postgres:db:host")
    await need(seat, "n1", "app", "postgres:db")
    await need(seat, "n2", "web", "postgres:db:port")
    await need(seat, "n1", "app", "redis:cache:host")
    await need(seat, "n1", "app", "postgres:db:host", kind="config")
    assert await bound_needs(provider, "postgres") == [
        BoundNeed("n1", "app", "db"),
        BoundNeed("n1", "app", "db", "host"),
        BoundNeed("n2", "web", "db", "port"),
    ]


async def test_the_provider_writes_each_consumers_keys_then_nothing_when_nothing_changed(
    seat: Bus, provider: Bus
) -> None:
    await need(seat, "n1", "app", "postgres:db:host")
    await need(seat, "n1", "app", "postgres:db:port")
    await need(seat, "n1", "app", "postgres:db")
    await need(seat, "n2", "a.b", "postgres:db:host")
    await need(seat, "n2", "web", "postgres:other:host")

    first = await provide(provider, "postgres", bind)

    assert await bound_content(seat) == {
        "n1.app.db.host": "db-1.internal",
        "n1.app.db.port": 5432,
        "n1.app.db": {"host": "db-1.internal", "port": 5432},
        "n2.a=2Eb.db.host": "db-1.internal",
    }
    assert sorted(first.written) == sorted(await bound_content(seat))
    second = await provide(provider, "postgres", bind)
    assert not second, second.summary()


async def test_a_need_removed_deletes_its_key_and_a_changed_binding_is_rewritten(seat: Bus, provider: Bus) -> None:
    await need(seat, "n1", "app", "postgres:db:host")
    gone = await need(seat, "n1", "app", "postgres:db:port")
    await provide(provider, "postgres", bind)
    port_key = await get_direct(seat, BOUND, "n1.app.db.port")
    assert port_key is not None
    item = await get_direct(seat, buckets.NEEDS, gone)
    assert item is not None
    await delete(seat, buckets.NEEDS, gone, last=item.revision)
    changes = await provide(provider, "postgres", binding("db-2.internal"))

    assert changes.written == ["n1.app.db.host"] and changes.deleted == ["n1.app.db.port"]
    assert await bound_content(seat) == {"n1.app.db.host": "db-2.internal"}


async def test_every_key_of_its_own_bucket_is_its_footprint(seat: Bus, provider: Bus) -> None:
    await put(seat, BOUND, "n9.gone.db.host", b'"old"')
    await put(seat, BOUND, "out-of-shape", b'"old"')
    await need(seat, "n1", "app", "postgres:db:host")

    changes = await provide(provider, "postgres", bind)

    assert sorted(changes.deleted) == ["n9.gone.db.host", "out-of-shape"]
    assert await bound_content(seat) == {"n1.app.db.host": "db-1.internal"}
    assert provider.recent_denial(0) is None


async def test_a_consumer_node_resolves_what_the_provider_bound(mesh: Mesh, provider: Bus, tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    manifest = {
        "module": "app",
        "env": {"DB_HOST": "${bound:postgres:db:host}", "DB_PORT": "${bound:postgres:db:port}"},
    }
    (manifests / "app.json").write_text(json.dumps(manifest))
    plan = ClientPlan("n1", manifests, tmp_path / "env", timedelta(seconds=2))
    async with mesh.connect(party(Kind.NODE, "n1")) as node:
        before = await reconcile(node, plan)
        assert not before.ok, "nothing is bound yet"
        await provide(provider, "postgres", bind)
        after = await reconcile(node, plan)
    assert after.ok, after.summary()
    assert sh_env(plan.materialize / "app.env") == {"DB_HOST": "db-1.internal", "DB_PORT": "5432"}
