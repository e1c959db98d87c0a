"""The whole job under exactly the generated grants: the seat in the data account, the vault on its
own key, and node n1's client in its own account reconciling, watching and telling its status.
"""

from __future__ import annotations

import json

import pytest

from mesh_dev.standins import SECRET_SUBJECT
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.status import read_status
from registry.access import Kind
from registry.errors import ServiceError
from registry.wire import ask_service
from tests.helpers import watch_follows_a_config_change
from tests.isolation import NODE, Domains, Mesh, party


async def test_a_node_on_its_own_account_reconciles_watches_and_tells_its_status(
    mesh: Mesh, domains: Domains, node_plan: ClientPlan
) -> None:
    async with mesh.connect(party(Kind.NODE, NODE)) as node:
        report = await reconcile(node, node_plan)
        assert report.ok, report.summary()
        assert sorted(report.modules) == ["app", "postgres", "tools"]
        assert "dev-only-s3cret-password" in (node_plan.materialize / "app.env").read_text()
        again = await reconcile(node, node_plan)
        assert not any(again.writes.values()), "a second reconcile writes nothing"
        status = await read_status(node, NODE, node_plan.materialize)
        assert status.ok and sorted(status.modules) == ["app", "postgres", "tools"]
        await watch_follows_a_config_change(node, node_plan, domains.seat, domains.parts.config)
        assert node.recent_denial(0) is None


async def test_the_vault_refuses_a_node_asking_for_another_nodes_secret(mesh: Mesh, domains: Domains) -> None:
    body = {"node": "n2", "module": "app", "kind": "secret", "name": "db-password"}
    async with mesh.connect(party(Kind.NODE, NODE)) as node:
        with pytest.raises(ServiceError) as refused:
            await ask_service(node, SECRET_SUBJECT, json.dumps(body).encode())
        mine = await ask_service(node, SECRET_SUBJECT, json.dumps({**body, "node": NODE}).encode())
    assert refused.value.code == "403"
    assert json.loads(mine.data) == {"value": "dev-only-s3cret-password"}


async def test_the_vault_refuses_a_deep_body_with_400_and_keeps_answering(mesh: Mesh, domains: Domains) -> None:
    async with mesh.connect(party(Kind.NODE, NODE)) as node:
        with pytest.raises(ServiceError) as refused:
            await ask_service(node, SECRET_SUBJECT, b"[" * 50_000 + b"]" * 50_000)
        body = {"node": NODE, "module": "app", "kind": "secret", "name": "db-password"}
        answer = await ask_service(node, SECRET_SUBJECT, json.dumps(body).encode())
    assert refused.value.code == "400"
    assert json.loads(answer.data) == {"value": "dev-only-s3cret-password"}
