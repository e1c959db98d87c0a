"""Stand-ins for the other domains of the mesh, as real NATS participants: for the demo and tests.

- config: bucket `mesh-config_values`, key `<name>`, a JSON value.
- bound: the postgres provider's bucket `postgres_bound`, key `<node>.<module>.<provision>.<local>`.
- placement: the controller's mirror `mesh-controller_assignments`, key `<node>.<module>`, value
  `{"plan": {"<kind>": {"<name>": value}}}` for the kinds dir, access, port, seat, machine.
- vault: a `nats.micro` service `mesh-vault` answering `mesh-vault.secret` and
  `mesh-vault.consumers`. Request `{"node", "module", "kind", "name"}`; answer `{"value": "..."}`,
  or service error 404 for an unknown name and 400 for a body that is not such an object. The
  secrets are development values, never for production.

`provision_own_buckets` does what the provisioner server does at start (the four
`mesh-provisioner_*` buckets with `direct=True`, the built-in registry): for a demo without the
server and for tests.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from nats import micro
from nats.js.kv import KeyValue
from nats.micro.request import Request

from registry import buckets
from registry.bus import Bus
from registry.catalogue import load_catalogue
from registry.compile import registry_values
from registry.keys import BOUND, KeyShape
from registry.kv import converge, snapshot

log = logging.getLogger(__name__)

CONFIG_BUCKET = "mesh-config_values"
BOUND_BUCKET = "postgres_bound"
ASSIGNMENTS_BUCKET = "mesh-controller_assignments"
SECRET_SUBJECT = "mesh-vault.secret"  # noqa: S105 - a subject, not a password
CONSUMERS_SUBJECT = "mesh-vault.consumers"
ASSIGNMENT = KeyShape("<node>.<module>")

DEV_CONFIG: Mapping[str, object] = {
    "log-level": "info",
    "greeting": 'Hello, "world" $HOME #1\nsecond line: café',
}
DEV_SECRETS: Mapping[str, str] = {"db-password": "dev-only-s3cret-password"}
DEV_CONSUMERS: Mapping[str, str] = {"db": "app:dev-only-s3cret-password"}


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


async def provision_own_buckets(bus: Bus) -> None:
    """Creates the provisioner's buckets and writes the built-in registry, as the server does."""
    for bucket in buckets.OWN:
        await bus.js.create_key_value(bucket=bucket.name, direct=True)
    kv = await bus.js.key_value(buckets.REGISTRY.name)
    current = await snapshot(bus, buckets.REGISTRY.name, include_deleted=True)
    await converge(bus, kv, buckets.REGISTRY.name, current, registry_values(load_catalogue()))


@dataclass
class Vault:
    """Development secrets answered on the vault's verbs; `rotate` changes one."""

    secrets: dict[str, str] = field(default_factory=lambda: dict(DEV_SECRETS))
    consumers: dict[str, str] = field(default_factory=lambda: dict(DEV_CONSUMERS))

    def rotate(self, name: str, value: str) -> None:
        self.secrets[name] = value

    async def answer_secret(self, request: Request) -> None:
        await self._answer(request, self.secrets, "secret")

    async def answer_consumers(self, request: Request) -> None:
        await self._answer(request, self.consumers, "consumers")

    async def _answer(self, request: Request, values: Mapping[str, str], what: str) -> None:
        try:
            body = json.loads(request.data or b"{}")
            name = body["name"] if isinstance(body, dict) else None
        except (ValueError, KeyError):
            name = None
        if not isinstance(name, str):
            await request.respond_error("400", 'expected {"node", "module", "kind", "name"}')
            return
        if name not in values:
            await request.respond_error("404", f"no development {what} named {name!r}")
            return
        await request.respond(json.dumps({"value": values[name]}).encode())


@dataclass
class StandIns:
    config: KeyValue
    bound: KeyValue
    assignments: KeyValue
    vault: Vault


@asynccontextmanager
async def stand_ins(bus: Bus, node: str, *, with_vault: bool = True) -> AsyncIterator[StandIns]:
    """The config, bound and placement buckets filled for `node`, and the vault serving."""
    config = await bus.js.create_key_value(bucket=CONFIG_BUCKET, direct=True)
    bound = await bus.js.create_key_value(bucket=BOUND_BUCKET, direct=True)
    assignments = await bus.js.create_key_value(bucket=ASSIGNMENTS_BUCKET, direct=True)
    for name, value in DEV_CONFIG.items():
        await config.put(name, json.dumps(value).encode())
    for key, value in dev_bound(node).items():
        await bound.put(key, json.dumps(value).encode())
    for module, plan in dev_plans(node).items():
        await assignments.put(ASSIGNMENT.build(node=node, module=module), json.dumps({"plan": plan}).encode())
    vault = Vault()
    parts = StandIns(config, bound, assignments, vault)
    if not with_vault:
        yield parts
        return
    service = await micro.add_service(bus.nc, name="mesh-vault", version="0.1.0", description="development vault")
    try:
        await service.add_endpoint(name="secret", subject=SECRET_SUBJECT, handler=vault.answer_secret)
        await service.add_endpoint(name="consumers", subject=CONSUMERS_SUBJECT, handler=vault.answer_consumers)
        await bus.nc.flush()
        yield parts
    finally:
        with anyio.move_on_after(2, shield=True):  # a stop cut short leaves a drain the connection waits on
            await service.stop()
