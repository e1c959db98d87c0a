"""Adding and removing a node as deploy/README.md says, in both account modes, on a real nats-server.

The mesh starts from `grants` for n1 and n2, their clients watching; n3 is added as documented
(static accounts: `grants` again, the files copied in place and `nats-server --signal reload=PID`
twice; decentralized: `grants --jwt` again and n3's account pushed) and reconciles, while n1 and
n2 are not disturbed (no reconnect, no key of theirs written, their clients' leases kept). Then
n2 is removed: `remove-node` refuses while its client holds its lease, naming it; once the client
is stopped (static) or with `--jwt --force` (its account deleted first), its keys, its lease and
(JWT) its account are gone, its credential is refused and `query nodes` no longer lists it.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Literal

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

from mesh_dev import standins
from mesh_dev.local_nats import LocalNats, local_nats, nats_server_binary
from mesh_dev.standins import (
    ASSIGNMENT,
    ASSIGNMENTS,
    BOUND_BUCKET,
    CONFIG,
    StandIns,
    Vault,
    dev_bound,
    dev_plans,
    stand_ins,
)
from provisioner.verb.nodes import REMOVED_LEASE
from provisioner_client.reconcile import ClientPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.access import (
    DATA_ACCOUNT,
    SERVER_AUTH,
    SYSTEM_USER,
    GrantsFile,
    Kind,
    MeshParties,
    Party,
    account_jwt_path,
    creds_path,
    issue_grants,
    load_jwt_auth,
    push_account,
    render_server_auth,
    seed_path,
)
from registry.contract import buckets, under
from registry.errors import BusError, ConnectionClosed, NoResponders
from registry.wire import (
    Bus,
    BusOptions,
    Message,
    ask,
    connect,
    connect_within,
    current_snapshot,
    get_direct,
    node_key,
    put,
)
from tests.helpers import EXAMPLES, Reports, clean_environment, logged, serving, sh_env
from tests.isolation import OPERATORS, PROVIDERS

Mode = Literal["static", "jwt"]
SEAT = Party(kind=Kind.SEAT, name=buckets.SEAT)
VAULT = Party(kind=Kind.VAULT, name="vault")
OPS = Party(kind=Kind.OPERATOR, name=OPERATORS[0])
TIMING = WatchTiming(debounce=timedelta(seconds=0.1), poll=timedelta(seconds=0.5))
LEASE_TTL = timedelta(seconds=1.5)
RELOADED = "Reloaded server configuration"


def node(name: str) -> Party:
    return Party(kind=Kind.NODE, name=name)


@dataclass(frozen=True)
class Deployment:
    """The folders of deploy/README.md: what `grants` writes (`out`), the seeds (`keys`),
    nats-server's configuration folder and the seat's grants file."""

    mode: Mode
    root: Path

    @property
    def out(self) -> Path:
        return self.root / "mesh"

    @property
    def keys(self) -> Path:
        return self.root / "mesh-keys"

    @property
    def nats_dir(self) -> Path:
        return self.root / "nats"

    @property
    def seat_grants(self) -> Path:
        return self.root / "seat" / "grants.json"

    def grants(self, *nodes: str) -> None:
        """`mesh-provisioner grants --out mesh --keys mesh-keys --node ... [--jwt]`."""
        parties = MeshParties(nodes=nodes, providers=PROVIDERS, operators=OPERATORS)
        issue_grants(self.out, parties, keys=self.keys, jwt=self.mode == "jwt")

    def install(self) -> None:
        """The new files copied in place: nats-server's accounts (static) and the seat's grants."""
        self.seat_grants.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.out / "grants.json", self.seat_grants)
        self.nats_dir.mkdir(parents=True, exist_ok=True)
        if self.mode == "static":
            shutil.copyfile(self.out / "accounts.conf", self.nats_dir / "accounts.conf")
        elif not (self.nats_dir / SERVER_AUTH).exists():
            auth = render_server_auth(load_jwt_auth(self.out), self.nats_dir / "resolver")
            (self.nats_dir / SERVER_AUTH).write_text(auth)

    @property
    def include(self) -> str:
        return f"include ./{'accounts.conf' if self.mode == 'static' else SERVER_AUTH}"

    def options(self, server: LocalNats, who: Party | str) -> BusOptions:
        label = who if isinstance(who, str) else who.label
        if self.mode == "static":
            return BusOptions(servers=(server.url,), name=label, nkey_seed=self.keys / f"{label}.nk")
        return BusOptions(servers=(server.url,), name=label, creds=creds_path(self.keys, label))

    def seat_flags(self) -> list[str]:
        """How `remove-node` connects as the seat, and (JWT) deletes the account."""
        if self.mode == "static":
            return ["--nats-nkey", str(seed_path(self.keys, SEAT))]
        return ["--nats-creds", str(creds_path(self.keys, SEAT.label)), "--jwt", "--keys", str(self.keys)]


@dataclass
class Client:
    """A node's client watching, on its own account, until stopped (or its connection closed)."""

    plan: ClientPlan
    reports: Reports = field(default_factory=Reports)
    stop: anyio.Event = field(default_factory=anyio.Event)
    ended: anyio.Event = field(default_factory=anyio.Event)
    closed: ConnectionClosed | None = None
    bus: Bus | None = None

    async def run(self, options: BusOptions, *, task_status: TaskStatus[None]) -> None:
        try:
            async with connect(options) as bus:
                self.bus = bus
                await watch(bus, self.plan, TIMING, stop=self.stop, on_report=self.reports, task_status=task_status)
        except ConnectionClosed as err:
            self.closed = err
        finally:
            self.ended.set()

    @property
    def reconnects(self) -> int:
        assert self.bus is not None, "started"
        return self.bus.reconnects

    async def applied(self) -> None:
        await self.reports.until(lambda: any(r.ok for r in self.reports.all), f"{self.plan.node} applies")

    async def stopped(self) -> None:
        self.stop.set()
        with anyio.fail_after(10):
            await self.ended.wait()


@dataclass
class Mesh:
    deployment: Deployment
    server: LocalNats
    seat: Bus
    tasks: TaskGroup
    clients: dict[str, Client] = field(default_factory=dict)

    async def start_client(self, name: str) -> Client:
        manifests = self.deployment.root / name / "manifests"
        shutil.copytree(EXAMPLES, manifests, ignore=shutil.ignore_patterns("*.md"))
        plan = ClientPlan(name, manifests, self.deployment.root / name / "env", timedelta(seconds=2), LEASE_TTL)
        client = self.clients[name] = Client(plan)
        try:
            with anyio.fail_after(client.reports.bound):
                await self.tasks.start(client.run, self.deployment.options(self.server, node(name)))
        except TimeoutError:
            pytest.fail(f"{name}'s client did not reach the bus within {client.reports.bound} s")
        await client.applied()
        return client

    async def keys_of(self, name: str) -> dict[str, int]:
        """Every key of the node in needs, applied and collect, with its revision."""
        found: dict[str, int] = {}
        for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT):
            items = await current_snapshot(self.seat, bucket, [under(name)])
            found |= {f"{bucket.name} {item.key}": item.revision for item in items}
        return found

    async def lease_holder(self, name: str) -> str | None:
        """The id of the client holding the node's lease (None: no live record)."""
        found = await get_direct(self.seat, buckets.LEASES, node_key(name))
        return None if found is None or found.deleted else json.loads(found.value)["id"]

    async def listed_nodes(self, expected: list[str]) -> list[str]:
        """`query nodes` as the operator: the nodes the seat lists, once they are `expected` (its
        view follows the buckets by a watch, a little behind a write), else as they are after 10 s."""
        listed: list[str] = []
        async with connect(self.deployment.options(self.server, OPS)) as ops:
            with anyio.move_on_after(10):
                while (listed := sorted(e["node"] for e in (await ask(ops, {"what": "nodes"}))["entries"])) != expected:
                    await anyio.sleep(0.05)
        return listed

    async def remove_node(self, name: str, *flags: str) -> tuple[int, str, str]:
        """`mesh-provisioner remove-node NAME` as an operator types it, with the seat's credentials."""
        command = [sys.executable, "-m", "provisioner.commands.cli", "remove-node", name, "--nats-url"]
        command += [self.server.url, *self.deployment.seat_flags(), *flags]
        result = await anyio.run_process(command, check=False, env=clean_environment())
        return result.returncode, result.stdout.decode(), result.stderr.decode()


@asynccontextmanager
async def running_mesh(deployment: Deployment, nodes: Sequence[str]) -> AsyncIterator[Mesh]:
    """nats-server on the installed grants, the seat on its own key reading its grants file, the
    domains' stand-ins for `nodes` and the vault on its own key (reading the grants file too)."""
    deployment.grants(*nodes)
    deployment.install()
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(local_nats(deployment.nats_dir, deployment.include))
        given = {"grants_file": deployment.seat_grants, "providers": list(PROVIDERS)}
        await stack.enter_async_context(serving(server.url, bus_options=deployment.options(server, SEAT), **given))
        seat = await stack.enter_async_context(connect(deployment.options(server, SEAT)))
        await stack.enter_async_context(domains(seat, ("n1", "n2", "n3")))
        vault_bus = await stack.enter_async_context(connect(deployment.options(server, VAULT)))
        await stack.enter_async_context(vault_serving(vault_bus, deployment.seat_grants))
        tasks = await stack.enter_async_context(anyio.create_task_group())
        mesh = Mesh(deployment, server, seat, tasks)
        try:
            yield mesh
        finally:
            for client in mesh.clients.values():
                client.stop.set()


@asynccontextmanager
async def domains(seat: Bus, nodes: Sequence[str]) -> AsyncIterator[StandIns]:
    """The config, bound and placement stand-ins, for each of `nodes` (the controller places a
    node's modules before its client starts)."""
    async with stand_ins(seat, nodes[0], with_vault=False) as parts:
        for name in nodes[1:]:
            for key, value in dev_bound(name).items():
                await put(seat, BOUND_BUCKET, key, json.dumps(value).encode())
            for module, plan in dev_plans(name).items():
                placed = json.dumps({"plan": plan}).encode()
                await put(seat, ASSIGNMENTS, ASSIGNMENT.build(node=name, module=module), placed)
        yield parts


@asynccontextmanager
async def vault_serving(bus: Bus, grants_file: Path) -> AsyncIterator[None]:
    """The vault on its own key, knowing the parties from the grants file it reads again for an
    account it does not know (a node added later)."""
    async with standins.vault_serving(bus, Vault(parties=GrantsFile(grants_file))):
        yield


@contextmanager
def nats_server_log() -> Iterator[None]:
    """nats-server's lines, which `local_nats` logs at debug, seen by `logged` for the block."""
    logger = logging.getLogger("mesh_dev.local_nats")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.setLevel(level)


async def reload_nats(server: LocalNats) -> None:
    """`nats-server --signal reload=PID` (PID: several servers run on this machine), then wait for
    the server to say it reloaded: a second signal sent before that may be merged with the first."""
    with nats_server_log(), logged(RELOADED, "mesh_dev.local_nats") as reloaded:
        await anyio.run_process([nats_server_binary(), "--signal", f"reload={server.process.pid}"])
        await reloaded.wait(10)


async def add_n3(mesh: Mesh) -> None:
    """deploy/README.md's "Add a node", up to starting its client."""
    deployment = mesh.deployment
    data_before = account_jwt_path(deployment.out, DATA_ACCOUNT).read_text() if deployment.mode == "jwt" else None
    deployment.grants("n1", "n2", "n3")
    deployment.install()
    if deployment.mode == "static":
        await reload_nats(mesh.server)
        await reload_nats(mesh.server)  # a new account's service imports answer from the second on
        return
    assert account_jwt_path(deployment.out, DATA_ACCOUNT).read_text() == data_before, "no push of the data account"
    async with connect(deployment.options(mesh.server, SYSTEM_USER)) as system:
        token = account_jwt_path(deployment.out, node("n3").label).read_text().strip()
        await push_account(system, token, operator=load_jwt_auth(deployment.out).operator)


async def credential_refused(mesh: Mesh, who: Party) -> str:
    with pytest.raises(BusError) as refused:
        async with connect_within(mesh.deployment.options(mesh.server, who), timedelta(seconds=5)):
            pass
    return str(refused.value).lower()


async def config_change_reaches(mesh: Mesh, names: Sequence[str]) -> None:
    """A change of the shared config reaches each node's env file: its live updates still come."""
    await put(mesh.seat, CONFIG, "log-level", b'"debug"')

    for name in names:
        client = mesh.clients[name]
        await client.reports.until(partial(debug_logged, client.plan), f"{name} follows the config")


def debug_logged(plan: ClientPlan) -> bool:
    return sh_env(plan.materialize / "app.env")["LOG_LEVEL"] == "debug"


@pytest.mark.parametrize("mode", ["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def test_a_node_is_added_and_another_removed_as_documented_leaving_the_rest_undisturbed(
    mode: Mode, tmp_path: Path
) -> None:
    deployment = Deployment(mode, tmp_path)
    async with running_mesh(deployment, ("n1", "n2")) as mesh:
        n1, n2 = await mesh.start_client("n1"), await mesh.start_client("n2")
        before = {name: await mesh.keys_of(name) for name in ("n1", "n2")}
        holders = {name: await mesh.lease_holder(name) for name in ("n1", "n2")}
        assert all(before.values()) and all(holders.values())

        await add_n3(mesh)
        await mesh.start_client("n3")  # it applies: the seat and the vault read the new grants file
        assert {name: await mesh.keys_of(name) for name in ("n1", "n2")} == before, "n1 and n2 wrote nothing"
        assert {name: await mesh.lease_holder(name) for name in ("n1", "n2")} == holders
        assert n1.reconnects == n2.reconnects == 0
        assert await mesh.listed_nodes(["n1", "n2", "n3"]) == ["n1", "n2", "n3"]
        await config_change_reaches(mesh, ["n1", "n2", "n3"])

        code, out, err = await mesh.remove_node("n2", "--yes")
        assert code == 6, (out, err)
        assert "held by its client" in err and "pid" in err and "--force" in err
        assert await mesh.keys_of("n2"), "nothing removed"

        if mode == "static":
            await n2.stopped()  # `systemctl disable --now mesh-provisioner-client` on n2
            code, out, err = await mesh.remove_node("n2", "--yes")
        else:
            code, out, err = await mesh.remove_node("n2", "--yes", "--force")
            with anyio.fail_after(10):
                await n2.ended.wait()
            assert n2.closed is not None, "the deleted account's connection was closed"
            assert out.startswith("deleted the account of node 'n2'"), out
        assert code == 0, (out, err)
        assert f"removed {buckets.LEASES.name} node.n2" in out and out.endswith("and its lease\n"), out

        deployment.grants("n1", "n3")  # the controller's part: the grants without n2
        deployment.install()
        if mode == "static":
            await reload_nats(mesh.server)
        assert "authorization" in await credential_refused(mesh, node("n2"))
        assert await mesh.keys_of("n2") == {}
        lease = await get_direct(mesh.seat, buckets.LEASES, node_key("n2"))
        assert lease is not None and lease.deleted and lease.value == REMOVED_LEASE
        assert await mesh.listed_nodes(["n1", "n3"]) == ["n1", "n3"]
        assert n1.reconnects == mesh.seat.reconnects == 0 and await mesh.lease_holder("n1") == holders["n1"]
        if mode == "jwt":
            assert node("n2").label not in {path.stem for path in (deployment.out / "jwt").glob("*.jwt")}


async def test_one_reload_leaves_a_new_static_accounts_service_imports_unanswered(tmp_path: Path) -> None:
    """Why deploy/README.md reloads twice (nats-server 2.15.1, server/server.go configureAccounts:
    an account the reload creates gets no subscriptions for its service imports; the next reload
    adds them). Its stream imports work at once. When this fails, nats-server applies a new
    account's service imports at the first reload: the second can go."""
    deployment = Deployment("static", tmp_path)
    async with running_mesh(deployment, ("n1", "n2")) as mesh:
        deployment.grants("n1", "n2", "n3")
        deployment.install()
        await reload_nats(mesh.server)
        async with connect(deployment.options(mesh.server, node("n3"))) as n3:
            live = anyio.Event()

            async def on_update(_: Message) -> None:
                live.set()

            await n3.subscribe(CONFIG.subject(">"), on_update)
            await n3.flush()
            await put(mesh.seat, CONFIG, "log-level", b'"debug"')
            with anyio.fail_after(5):
                await live.wait()  # a stream import: live updates of the shared config
            with pytest.raises(NoResponders):  # a service import: a get of its own lease
                await get_direct(n3, buckets.LEASES, node_key("n3"))
            await reload_nats(mesh.server)
            assert await get_direct(n3, buckets.LEASES, node_key("n3")) is None  # answered: no record yet
