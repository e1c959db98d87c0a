"""The vault's contract, on a real nats-server running the accounts `mesh-provisioner grants`
writes (static and JWT). A secret is answered only to a node running a module that declares it (a
need `<node>.<module>.secret.<name>` in the needs bucket, read by the vault; the node told by the
bus, never the body); consumers' credentials only to the provider's machine, for its own module's
consumers; and the grants give each party only the vault verbs it may ask.

The three leaks found, each refused: n1 asking as itself for a secret only n2's module
declares; n1, running no postgres module, asking for postgres's consumers; the provider asking for
a secret. The honest paths still work, through the node client itself.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from mesh_dev.local_nats import local_nats
from mesh_dev.standins import CONSUMERS_SUBJECT, SECRET_SUBJECT, Vault, stand_ins, vault_serving
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.access import (
    SERVER_AUTH,
    Grants,
    Kind,
    MeshParties,
    Party,
    issue_grants,
    load_jwt_auth,
    render_server_auth,
)
from registry.contract import buckets
from registry.errors import NoResponders, ServiceError
from registry.serving import EndpointSpec, serve
from registry.wire import Bus, ask_service, delete, get_latest, put
from tests.helpers import EXAMPLES, in_own_task, sh_env
from tests.isolation import OPERATORS, JwtMesh, Mesh, granting, jwt_mesh_server, mesh_server, party, seat_serving

N1, N2 = party(Kind.NODE, "n1"), party(Kind.NODE, "n2")
POSTGRES, OPS, SEAT, VAULT = (
    party(Kind.PROVIDER, "postgres"),
    party(Kind.OPERATOR, "ops"),
    party(Kind.SEAT),
    party(Kind.VAULT),
)
NODES, PROVIDERS = ("n1", "n2"), ("postgres",)
PARTIES = MeshParties(nodes=NODES, providers=PROVIDERS, operators=OPERATORS, machines={"postgres": ["n2"]})

DB_PASSWORD = "dev-only-s3cret-password"  # the development vault's value
BILLING_KEY = "n2-billing-only"
NEEDS = {
    "n1.app.secret.db-password": b'{"placeholder":"${secret:db-password}","used_in":["DB_PASSWORD"]}',
    "n2.billing.secret.billing-key": b'{"placeholder":"${secret:billing-key}","used_in":["KEY"]}',
    "n2.postgres.consumers.db": b'{"placeholder":"${consumers:db}","used_in":["PG_CONSUMERS"]}',
}


@asynccontextmanager
async def contract_mesh(state: Path, *, jwt: bool) -> AsyncIterator[Mesh]:
    """The grants of n1, n2, provider postgres running on n2 and operator ops, on nats-server."""
    keys, out, config_dir = state / "keys", state / "grants", state / "nats"
    grants = issue_grants(out, PARTIES, keys=keys, jwt=jwt)
    config_dir.mkdir(parents=True, exist_ok=True)
    if jwt:
        (config_dir / SERVER_AUTH).write_text(render_server_auth(load_jwt_auth(out), config_dir / "resolver"))
        config = f"include ./{SERVER_AUTH}"
    else:
        shutil.copyfile(out / "accounts.conf", config_dir / "accounts.conf")
        config = "include ./accounts.conf"
    async with local_nats(config_dir, config) as server:
        mesh = JwtMesh(server, keys, grants, out) if jwt else Mesh(server, keys, grants)
        async with seat_serving(mesh, out / "grants.json", PROVIDERS):
            yield mesh


@asynccontextmanager
async def contract_vault(mesh: Mesh) -> AsyncIterator[Vault]:
    """The development vault on the vault's own key, holding the contract: told the parties by the
    grants and reading the needs; n2's billing module's key among its secrets."""
    async with mesh.connect(VAULT) as bus:
        vault = Vault(parties=mesh.grants.party_map(), needs=bus)
        vault.secrets["billing-key"] = BILLING_KEY
        async with vault_serving(bus, vault):
            yield vault


@asynccontextmanager
async def seeded(mesh: Mesh, nodes: Sequence[str] = ()) -> AsyncIterator[Bus]:
    """The seat's connection, the needs of `NEEDS` written, the stand-ins of `nodes`, the vault serving."""
    async with AsyncExitStack() as stack:
        seat = await stack.enter_async_context(mesh.connect(SEAT))
        for key, value in NEEDS.items():
            await put(seat, buckets.NEEDS, key, value)
        for node in nodes:
            await stack.enter_async_context(stand_ins(seat, node, with_vault=False))
        await stack.enter_async_context(contract_vault(mesh))
        yield seat


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    async with in_own_task(contract_mesh(tmp_path / "mesh", jwt=request.param == "jwt")) as running:
        yield running


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    async with in_own_task(seeded(mesh)) as bus:
        yield bus


async def asked(mesh: Mesh, who: Party, subject: str, body: dict[str, str]) -> tuple[str, str]:
    """What `who` is answered: ("value", the value), (a service error's code, its reason) or
    ("no responders", ""): nats-server found nothing `who` may reach on `subject`."""
    async with mesh.connect(who) as bus:
        try:
            reply = await ask_service(bus, subject, json.dumps(body).encode())
        except ServiceError as err:
            return err.code, err.description
        except NoResponders:
            return "no responders", ""
    return "value", json.loads(reply.data)["value"]


def secret(node: str, module: str, name: str) -> dict[str, str]:
    return {"node": node, "module": module, "kind": "secret", "name": name}


def consumers(node: str, module: str = "postgres") -> dict[str, str]:
    return {"node": node, "module": module, "kind": "consumers", "name": "db"}


# -- the honest paths ---------------------------------------------------------------------------


async def test_a_node_gets_the_secret_its_own_module_declares(mesh: Mesh, seat: Bus) -> None:
    assert await asked(mesh, N1, SECRET_SUBJECT, secret("n1", "app", "db-password")) == ("value", DB_PASSWORD)
    assert await asked(mesh, N2, SECRET_SUBJECT, secret("n2", "billing", "billing-key")) == ("value", BILLING_KEY)


async def test_the_provider_machine_gets_its_own_modules_consumers(mesh: Mesh, seat: Bus) -> None:
    outcome, value = await asked(mesh, N2, CONSUMERS_SUBJECT, consumers("n2"))
    assert outcome == "value"
    assert json.loads(value) == {"consumers": [{"name": "app", "database": "app", "password": DB_PASSWORD}]}


# -- the three leaks ----------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["billing", "app"], ids=["naming n2's module", "naming its own module"])
async def test_a_node_is_refused_a_secret_only_another_nodes_module_declares(
    mesh: Mesh, seat: Bus, module: str
) -> None:
    outcome, reason = await asked(mesh, N1, SECRET_SUBJECT, secret("n1", module, "billing-key"))
    assert outcome == "403", (outcome, reason)
    assert "no module declaring" in reason and BILLING_KEY not in reason


async def test_a_node_running_no_provider_module_is_refused_the_consumers(mesh: Mesh, seat: Bus) -> None:
    """n1 is no machine of postgres: its account does not even reach the verb."""
    assert await asked(mesh, N1, CONSUMERS_SUBJECT, consumers("n1")) == ("no responders", "")


@pytest.mark.parametrize("who", [POSTGRES, OPS], ids=["the provider", "an operator"])
@pytest.mark.parametrize("subject", [SECRET_SUBJECT, CONSUMERS_SUBJECT], ids=["secret", "consumers"])
async def test_a_party_running_no_module_reaches_no_vault_verb(mesh: Mesh, seat: Bus, who: Party, subject: str) -> None:
    body = secret("n1", "app", "db-password") if subject == SECRET_SUBJECT else consumers("n2")
    assert await asked(mesh, who, subject, body) == ("no responders", "")


async def test_a_secret_is_refused_once_no_module_declares_it_any_more(mesh: Mesh, seat: Bus) -> None:
    body = secret("n1", "app", "db-password")
    assert (await asked(mesh, N1, SECRET_SUBJECT, body))[0] == "value"
    current = await get_latest(seat, buckets.NEEDS, "n1.app.secret.db-password")
    assert current is not None
    await delete(seat, buckets.NEEDS, "n1.app.secret.db-password", last=current.revision)
    assert (await asked(mesh, N1, SECRET_SUBJECT, body))[0] == "403"


# -- the vault alone, behind grants as wide as before --------------------------------------------

# The grants of before, on purpose: every node may ask for consumers (no machine named), and the
# provider and the operator import the secret verb. The vault alone must hold the contract.
AS_WIDE_AS_BEFORE = [
    granting(who, {"kind": "service", "subject": SECRET_SUBJECT, "account": "vault", "share": True, "why": "widened"})
    for who in (POSTGRES, OPS)
]


def widened(grants: Grants) -> Grants:
    for widen in AS_WIDE_AS_BEFORE:
        grants = widen(grants)
    return grants


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def wide_mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    start = mesh_server if request.param == "static" else jwt_mesh_server
    async with in_own_task(start(tmp_path / "mesh", widen=widened)) as running, in_own_task(seeded(running)):
        yield running


@pytest.mark.parametrize(
    ("who", "subject", "body", "because"),
    [
        (N1, SECRET_SUBJECT, secret("n1", "billing", "billing-key"), "no module declaring"),
        (N1, CONSUMERS_SUBJECT, consumers("n1"), "no module declaring"),
        (N1, CONSUMERS_SUBJECT, consumers("n1", module="app"), "its module 'postgres' only"),
        (N1, SECRET_SUBJECT, secret("n2", "billing", "billing-key"), "asked by node n1 for node n2"),
        (N1, SECRET_SUBJECT, {"node": "n1", "kind": "secret", "name": "db-password"}, "names no module"),
        (POSTGRES, SECRET_SUBJECT, secret("n1", "app", "db-password"), "never to provider-postgres"),
        (OPS, SECRET_SUBJECT, secret("n1", "app", "db-password"), "never to operator-ops"),
    ],
    ids=[
        "n1 for a secret only n2's module declares",
        "n1 running no postgres module for its consumers",
        "n1 for the consumers in another module's name",
        "n1 in n2's name",
        "n1 naming no module",
        "the provider for a secret",
        "an operator for a secret",
    ],
)
async def test_the_vault_alone_refuses_what_wide_grants_let_through(
    wide_mesh: Mesh, who: Party, subject: str, body: dict[str, str], because: str
) -> None:
    outcome, reason = await asked(wide_mesh, who, subject, body)
    assert outcome == "403", (outcome, reason)
    assert because in reason, reason


async def test_the_vault_alone_still_answers_the_honest_askers(wide_mesh: Mesh) -> None:
    assert await asked(wide_mesh, N1, SECRET_SUBJECT, secret("n1", "app", "db-password")) == ("value", DB_PASSWORD)
    assert (await asked(wide_mesh, N2, CONSUMERS_SUBJECT, consumers("n2")))[0] == "value"


async def test_a_vault_that_cannot_read_the_needs_answers_503_and_no_value(mesh: Mesh) -> None:
    async with mesh.connect(SEAT) as seat, mesh.connect(OPS) as blind:
        await put(seat, buckets.NEEDS, "n1.app.secret.db-password", NEEDS["n1.app.secret.db-password"])
        vault = Vault(parties=mesh.grants.party_map(), needs=blind)  # an operator gets no need
        endpoint = EndpointSpec("secret", SECRET_SUBJECT, vault.answer_secret)
        async with (
            mesh.connect(VAULT) as bus,
            serve(bus, name="mesh-vault", version="0.1.0", description="blind vault", endpoints=[endpoint]),
        ):
            outcome, reason = await asked(mesh, N1, SECRET_SUBJECT, secret("n1", "app", "db-password"))
    assert (outcome, DB_PASSWORD in reason) == ("503", False)


# -- the node client itself -----------------------------------------------------------------------


def plan_of(tmp_path: Path, node: str, modules: Sequence[str]) -> ClientPlan:
    manifests = tmp_path / node / "manifests"
    manifests.mkdir(parents=True)
    for module in modules:
        shutil.copyfile(EXAMPLES / f"{module}.json", manifests / f"{module}.json")
    return ClientPlan(node, manifests, tmp_path / node / "env", timedelta(seconds=5))


async def test_the_clients_of_the_provider_machine_and_of_a_consumer_node_apply_and_no_other_gets_consumers(
    mesh: Mesh, tmp_path: Path
) -> None:
    machine = plan_of(tmp_path, "n2", ["app", "postgres", "tools"])
    consumer = plan_of(tmp_path, "n1", ["app", "postgres"])
    async with seeded(mesh, nodes=NODES), mesh.connect(N2) as n2, mesh.connect(N1) as n1:
        on_machine = await reconcile(n2, machine)
        on_consumer = await reconcile(n1, consumer)
    assert on_machine.ok, on_machine.summary()
    assert json.loads(sh_env(machine.materialize / "postgres.env")["PG_CONSUMERS"])["consumers"][0]["name"] == "app"
    assert DB_PASSWORD in sh_env(consumer.materialize / "app.env")["DATABASE_URL"]
    assert not on_consumer.ok and not (consumer.materialize / "postgres.env").exists()
    assert DB_PASSWORD not in "".join(p.read_text() for p in consumer.materialize.glob("*.env") if p.name != "app.env")
