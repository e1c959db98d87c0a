"""Stand-ins for the other domains of the mesh, as real NATS participants: for the demo and tests.

- config: bucket `mesh-config_values`, key `<name>`, a JSON value.
- bound: the postgres provider's bucket `postgres_bound`, key `<node>.<module>.<provision>.<local>`:
  fixed values (127.0.0.1:5432) unless `fixed_bound=False`, when a real provider writes it
  (`mesh_dev.database`).
- placement: the controller's mirror `mesh-controller_assignments`, key `<node>.<module>`, value
  `{"plan": {"<kind>": {"<name>": value}}}` for the kinds dir, access, port, seat, machine.
- vault: a `nats.micro` service `mesh-vault` answering `mesh-vault.secret` and
  `mesh-vault.consumers`. Request `{"node", "module", "kind", "name"}`; answer `{"value": "..."}`,
  or service error 404 for an unknown name and 400 for a body that is not such an object. The
  secrets are development values, never for production. A `consumers` value is JSON text,
  `{"consumers": [{"name", "database", "password"}, ...]}` (deploy/examples/README.md); each dev
  consumer's password is one of the secrets, so the consumer module reads the same credential
  through `${secret:...}` and a rotation (`rotate_consumer`) reaches both. Given the grants (`PartyMap`), it does
  what a real vault must: a node is answered about its own node only (the asking account comes
  from `Nats-Request-Info`, never the body), and an account no grant names is refused (403).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from registry.access import Kind, PartyMap, UnknownAccount
from registry.contract import BOUND, Bucket, JsonRefused, KeyShape, read_json
from registry.serving import EndpointSpec, ServiceRequest, capped, serve
from registry.wire import BucketConfig, Bus, create_bucket, put

log = logging.getLogger(__name__)

ASSIGNMENT = KeyShape("<node>.<module>")
CONFIG = Bucket("mesh-config_values", KeyShape("<name>"))
BOUND_BUCKET = Bucket("postgres_bound", BOUND)
ASSIGNMENTS = Bucket("mesh-controller_assignments", ASSIGNMENT)
SECRET_SUBJECT = "mesh-vault.secret"  # noqa: S105 - a subject, not a password
CONSUMERS_SUBJECT = "mesh-vault.consumers"

DEV_CONFIG: Mapping[str, object] = {
    "log-level": "info",
    "greeting": 'Hello, "world" $HOME #1\nsecond line: café',
}
DEV_SECRETS: Mapping[str, str] = {"db-password": "dev-only-s3cret-password"}


@dataclass(frozen=True)
class DevConsumer:
    """A consumer of a provision: its role, its database, and the secret holding its password."""

    name: str
    database: str
    secret: str


DEV_CONSUMERS: Mapping[str, tuple[DevConsumer, ...]] = {"db": (DevConsumer("app", "app", "db-password"),)}


def dev_plans(node: str) -> dict[str, dict[str, dict[str, object]]]:
    """The placement plan of each example module on `node`."""
    return {
        "app": {
            "dir": {"state": "/var/lib/app"},
            "port": {"http": 8080},
            "access": {"db": "read-write"},
            "seat": {"web": "web-1"},
            "machine": {"host": node},
        },
        "postgres": {"dir": {"data": "/var/lib/postgresql"}, "port": {"postgres": 5432}},
    }


def dev_bound(node: str) -> dict[str, object]:
    return {
        BOUND.build(node=node, module="app", provision="db", local="host"): "127.0.0.1",
        BOUND.build(node=node, module="app", provision="db", local="port"): 5432,
    }


@dataclass
class Vault:
    """Development secrets answered on the vault's verbs; `rotate` changes one. With `parties`,
    a node asking about another node (the body's `node` is not its own) is refused 403."""

    secrets: dict[str, str] = field(default_factory=lambda: dict(DEV_SECRETS))
    consumers: dict[str, tuple[DevConsumer, ...]] = field(default_factory=lambda: dict(DEV_CONSUMERS))
    parties: PartyMap | None = None

    def rotate(self, name: str, value: str) -> None:
        self.secrets[name] = value

    def rotate_consumer(self, name: str, password: str) -> None:
        """Gives consumer `name` a new password (the secret its module reads, too)."""
        secrets = {c.secret for provision in self.consumers.values() for c in provision if c.name == name}
        if not secrets:
            raise KeyError(f"no development consumer named {name!r}")
        for secret in secrets:
            self.secrets[secret] = password

    def consumers_value(self, provision: str) -> str:
        """The consumers of `provision` as the vault answers them: JSON text."""
        consumers = [
            {"name": c.name, "database": c.database, "password": self.secrets[c.secret]}
            for c in self.consumers[provision]
        ]
        return json.dumps({"consumers": consumers}, ensure_ascii=False)

    async def answer_secret(self, request: ServiceRequest) -> None:
        await self._answer(request, self.secrets, "secret")

    async def answer_consumers(self, request: ServiceRequest) -> None:
        values = {provision: self.consumers_value(provision) for provision in self.consumers}
        await self._answer(request, values, "consumers")

    async def _answer(self, request: ServiceRequest, values: Mapping[str, str], what: str) -> None:
        try:
            body = read_json(request.data or b"{}", max_bytes=4096, max_depth=4)
            name = body["name"] if isinstance(body, dict) else None
        except (JsonRefused, KeyError):
            body, name = None, None
        if not isinstance(name, str):
            await request.respond_error("400", 'expected {"node", "module", "kind", "name"}')
            return
        refusal = self.refusal(request.headers, body.get("node") if isinstance(body, dict) else None)
        if refusal is not None:
            await request.respond_error("403", refusal)
            return
        if name not in values:
            await request.respond_error("404", f"no development {what} named {name!r}")
            return
        await request.respond(json.dumps({"value": values[name]}).encode())

    def refusal(self, headers: Mapping[str, str], node: object) -> str | None:
        """Why the asking party may not have this answer, or None. The party comes from the bus;
        the body's `node` only has to be the asking node's own."""
        if self.parties is None:
            return None
        try:
            party = self.parties.who_asks(headers)
        except UnknownAccount as err:
            return str(err)
        if party is None or party.kind != Kind.NODE or node == party.name:
            return None
        asked_for = f"node {capped(node, 64)}" if isinstance(node, str) else "no node"
        return f"a node is answered about its own secrets; asked by node {capped(party.name, 64)} for {asked_for}"


@dataclass
class StandIns:
    config: Bucket
    bound: Bucket
    assignments: Bucket
    vault: Vault


@asynccontextmanager
async def stand_ins(
    bus: Bus, node: str, *, with_vault: bool = True, fixed_bound: bool = True
) -> AsyncIterator[StandIns]:
    """The config, bound and placement buckets filled for `node` (bound only with `fixed_bound`),
    and the vault serving."""
    for bucket in (CONFIG, BOUND_BUCKET, ASSIGNMENTS):
        await create_bucket(bus, bucket, BucketConfig())
    for name, value in DEV_CONFIG.items():
        await put(bus, CONFIG, name, json.dumps(value).encode())
    for key, value in (dev_bound(node) if fixed_bound else {}).items():
        await put(bus, BOUND_BUCKET, key, json.dumps(value).encode())
    for module, plan in dev_plans(node).items():
        await put(bus, ASSIGNMENTS, ASSIGNMENT.build(node=node, module=module), json.dumps({"plan": plan}).encode())
    vault = Vault()
    parts = StandIns(CONFIG, BOUND_BUCKET, ASSIGNMENTS, vault)
    if not with_vault:
        yield parts
        return
    endpoints = [
        EndpointSpec("secret", SECRET_SUBJECT, vault.answer_secret),
        EndpointSpec("consumers", CONSUMERS_SUBJECT, vault.answer_consumers),
    ]
    async with serve(bus, name="mesh-vault", version="0.1.0", description="development vault", endpoints=endpoints):
        yield parts
