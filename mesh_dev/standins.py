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
  `{"consumers": [{"name", "database", "password"}, ...]}` (deploy/examples/README.md): the
  consumers of a provision of provider `postgres`; each dev consumer's password is one of the
  secrets, so the consumer module reads the same credential through `${secret:...}` and a
  rotation (`rotate_consumer`) reaches both.

The vault shows the contract a real vault holds (deploy/examples/README.md) when it is given the
grants (`parties`, a `PartyMap`) and the needs (`needs`, a connection that may get them): who asks
comes from the bus (`Nats-Request-Info`), never from the body; an account no grant names, and every
party that is not a node (a provider, an operator), is refused (403), but a site's links at the hub,
answered for a node living at the site (the body names which: the hub's server marks the request as
the site's, whatever a site's server wrote, `registry.access.sites.accounts`); a node is answered a secret
only while one of its modules declares it (its need `<node>.<module>.secret.<name>`, read by direct
get) and a provision's consumers only from its provider's module (`<node>.postgres.consumers.<name>`)
on the machine running it. Given the grants alone it checks who asks, but not what their modules
declare. On a single-account development bus with no grants (`parties=None`: the demo, the
benchmarks) it answers every request, as nothing on such a bus can tell who asks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from provisioner.seat.buckets import ensure_bucket
from registry.access import Kind, Party, PartyMap, UnknownAccount
from registry.contract import BOUND, Bucket, JsonRefused, KeyShape, buckets, read_json
from registry.errors import BusError, KeyShapeError
from registry.serving import EndpointSpec, ServiceRequest, capped, serve
from registry.wire import BucketConfig, Bus, get_direct, put

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
DEV_PROVIDER = "postgres"  # the provider module whose provisions the development consumers are of


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


@dataclass(frozen=True)
class Asked:
    """What a vault request asks, as its body says: for which node, by which module, which name."""

    name: str
    node: object = None
    module: object = None

    @staticmethod
    def of(data: bytes) -> Asked | None:
        try:
            body = read_json(data or b"{}", max_bytes=4096, max_depth=4)
        except JsonRefused:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return None
        return Asked(body["name"], body.get("node"), body.get("module"))


class Refused(Exception):
    """Why a vault request is not answered: a service error's code and reason."""

    def __init__(self, code: str, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(reason)


@dataclass
class Vault:
    """Development secrets answered on the vault's verbs; `rotate` changes one. With `parties`
    (and `needs`) it holds the vault's contract: see the module's docstring."""

    secrets: dict[str, str] = field(default_factory=lambda: dict(DEV_SECRETS))
    consumers: dict[str, tuple[DevConsumer, ...]] = field(default_factory=lambda: dict(DEV_CONSUMERS))
    parties: PartyMap | None = None
    needs: Bus | None = None
    provider: str = DEV_PROVIDER

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

    async def _answer(self, request: ServiceRequest, values: Mapping[str, str], kind: str) -> None:
        asked = Asked.of(request.data)
        if asked is None:
            await request.respond_error("400", 'expected {"node", "module", "kind", "name"}')
            return
        try:
            await self.judge(request.headers, asked, kind)
        except Refused as refused:
            await request.respond_error(refused.code, refused.reason)
            return
        if asked.name not in values:
            await request.respond_error("404", f"no development {kind} named {asked.name!r}")
            return
        await request.respond(json.dumps({"value": values[asked.name]}).encode())

    async def judge(self, headers: Mapping[str, str], asked: Asked, kind: str) -> None:
        """Raises `Refused` unless the asking party may have this `kind` of value. The party comes
        from the bus; the body only says which of its own modules asks."""
        if self.parties is None:
            return
        try:
            party = self.parties.who_asks(headers)
        except UnknownAccount as err:
            raise Refused("403", str(err)) from None
        if party is None:  # from the vault's own account
            return
        node = _asking_node(party, asked, kind, self.parties.speaks_for(party))
        if kind == "consumers" and asked.module != self.provider:
            raise Refused(
                "403",
                f"consumers are answered to the machine of provider {self.provider!r}, to its module "
                f"{self.provider!r} only; asked by node {capped(node, 64)} for module {_named(asked.module)}",
            )
        if self.needs is not None:
            await self._declared(node, asked, kind)

    async def _declared(self, node: str, asked: Asked, kind: str) -> None:
        """Refused unless a module of `node` declares the value: its need, read by direct get."""
        assert self.needs is not None
        module = asked.module if isinstance(asked.module, str) else ""
        try:
            key = buckets.NEEDS.shape.build(node=node, module=module, kind=kind, name=asked.name)
        except KeyShapeError:
            raise Refused("403", f"names no module of node {capped(node, 64)} that could declare it") from None
        try:
            need = await get_direct(self.needs, buckets.NEEDS, key)
        except BusError as err:
            log.warning("the needs cannot be read: %s", err)
            raise Refused("503", "the vault cannot read the needs now; ask again") from None
        if need is None or need.deleted:
            raise Refused(
                "403",
                f"node {capped(node, 64)} runs no module declaring {kind} {capped(asked.name, 64)!r}: "
                f"no need {capped(key, 200)}; a {kind} is answered to a node running a module that declares it",
            )


def _asking_node(party: Party, asked: Asked, kind: str, speaks_for: frozenset[str]) -> str:
    """The asking node's name; refused when a party that runs no module asks, or a node asks in
    another node's name. A site's links (the hub's server names them, never what a site's server
    sent) ask for the node their body names, one living at the site (`speaks_for`)."""
    if party.kind == Kind.SITE:
        if isinstance(asked.node, str) and asked.node in speaks_for:
            return asked.node
        asked_for = f"node {capped(asked.node, 64)}" if isinstance(asked.node, str) else "no node"
        raise Refused(
            "403", f"site {capped(party.name, 64)} is answered for the nodes living there; asked for {asked_for}"
        )
    if party.kind != Kind.NODE:
        raise Refused(
            "403", f"a {kind} is answered to a node running a module that declares it, never to {party.label}"
        )
    if asked.node != party.name:
        asked_for = f"node {capped(asked.node, 64)}" if isinstance(asked.node, str) else "no node"
        raise Refused(
            "403",
            f"a node is answered about its own secrets; asked by node {capped(party.name, 64)} for {asked_for}",
        )
    return party.name


def _named(module: object) -> str:
    return repr(capped(module, 64)) if isinstance(module, str) else "none"


@dataclass
class StandIns:
    config: Bucket
    bound: Bucket
    assignments: Bucket
    vault: Vault


@asynccontextmanager
async def stand_ins(
    bus: Bus,
    node: str,
    *,
    with_vault: bool = True,
    fixed_bound: bool = True,
    plans: Mapping[str, Mapping[str, Mapping[str, object]]] | None = None,
) -> AsyncIterator[StandIns]:
    """The config, bound and placement buckets filled for `node` (bound only with `fixed_bound`;
    placed, `plans`, the examples' by default), and the vault serving. Each bucket as the seat
    makes it, whichever of the two comes first."""
    for bucket in (CONFIG, BOUND_BUCKET, ASSIGNMENTS):
        await ensure_bucket(bus, bucket, BucketConfig())
    for name, value in DEV_CONFIG.items():
        await put(bus, CONFIG, name, json.dumps(value).encode())
    for key, value in (dev_bound(node) if fixed_bound else {}).items():
        await put(bus, BOUND_BUCKET, key, json.dumps(value).encode())
    for module, plan in (dev_plans(node) if plans is None else plans).items():
        await put(bus, ASSIGNMENTS, ASSIGNMENT.build(node=node, module=module), json.dumps({"plan": plan}).encode())
    vault = Vault()
    parts = StandIns(CONFIG, BOUND_BUCKET, ASSIGNMENTS, vault)
    if not with_vault:
        yield parts
        return
    async with vault_serving(bus, vault):
        yield parts


@asynccontextmanager
async def vault_serving(bus: Bus, vault: Vault) -> AsyncIterator[None]:
    """`vault` answering its two verbs on `bus` (the vault's own connection, in a mesh of accounts)."""
    endpoints = [
        EndpointSpec("secret", SECRET_SUBJECT, vault.answer_secret),
        EndpointSpec("consumers", CONSUMERS_SUBJECT, vault.answer_consumers),
    ]
    async with serve(bus, name="mesh-vault", version="0.1.0", description="development vault", endpoints=endpoints):
        yield
