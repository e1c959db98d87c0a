"""The fault test: a power failure under a converged mesh. Six watching node clients (their module
`app` rolled out under a budget of 2) and a seat on one nats-server (on one account; and, in two
variants, each party on the account `grants` writes for it, the seat scoping by the grants and the
vault on its own key); the mesh converged; the server's JetStream store copied; more changes made (a
config value, each node's manifest adding a collection item and reading one more config value, so
registering one more need; a registry kind written again as it stands) and converged; then the
server killed and its store replaced by the copy, so that every write it acknowledged since is lost,
and everything else left running (or, in one variant, the clients restarted; in another, the config
value put once more after the rollback so that its stream returns to the sequence the clients
remember, with other content; in a fourth, both, the value put while the clients are stopped, so
that the memory on disk is all they start from).

Judged by the data, within `BOUND` seconds of the server being back: each env file holds what the
recovered bus and the manifests imply, every change action ran once for each change of its file's
content (the action appends the file's digest: no digest twice in a row, the last one the file's),
each node's lease is held again, a second client for node n0 is refused throughout (in the restart
variant: from its clients' return on), each node's applied record, collection items and need of the
added value are back in the bus, and the registry is compiled. Meanwhile, from the server's return
to the recovery, the seat's answers (`what=registry` and `what=needs`, asked over and over) list no
entry, by key, revision and value, that the buckets do not hold in the read that follows the answer
or a later one: the registry kind and the needs written after the copy were held by the lost tail
alone. No node is let through a rollout slot (its claim turned from waiting to running, as the
fleet's stream stores the writes) while the budget's other nodes stand running. Where the clients
run on through the fault (a client stopped in its health check fails its change), node n5 makes one
more change after the others', held in its health check across the fault: the bus loses its running
claim, which is written back for the same change before the check is let go. After the recovery
every claim is freed. Judged elsewhere: the line a node says when it restores a claim, and a claim
lost waiting (`tests/faults/test_claims_rollback.py`).
Last, one node whose client is never told of the reconnect: its periodic rollback check alone finds
its collection item lost and has it written back.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from mesh_dev.standins import (
    ASSIGNMENT,
    StandIns,
    Vault,
    dev_bound,
    dev_plans,
    stand_ins,
    vault_serving,
)
from provisioner_client.errors import NodeHeld
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.resolving.memory import remembered_stamps
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.rollout import RolloutPlan
from provisioner_client.watch import watching
from provisioner_client.watch.holding import holding
from provisioner_client.watch.watching import WatchTiming, watch
from registry.access import Grants, Kind, MeshParties, Party, issue_grants, seed_path
from registry.contract import KINDS, NeedsRow, RegistryRow, buckets, fleet
from registry.errors import BusError
from registry.wire import (
    SKEW,
    Bus,
    BusOptions,
    Holder,
    Message,
    answer_of,
    connect,
    current_snapshot,
    get_direct,
    get_last_many,
    node_key,
    put,
    snapshot,
    stream_last_sequence,
)
from tests.helpers import EXAMPLES, restartable_nats, serving, until

NODES = [f"n{index}" for index in range(6)]
TIMING = WatchTiming(debounce=timedelta(seconds=0.1), poll=timedelta(seconds=0.2), waiting_retry=timedelta(seconds=0.2))
LEASE_TTL = timedelta(seconds=3)
BOUND = 30.0
"""Seconds from the server back to every part recovered: the leases' renewal (a third of 3 s), the
seat's rollback check (0.5 s), a compile and the clients' reconciles after it, on a loaded machine."""
BEFORE, AFTER, OTHER = "info", "after-copy", "re-put-after-rollback"
BUDGET = 2  # the app module's rollout: at most this many nodes change it at once
HELD = "n5"  # the node whose health check waits while the test's hold file exists
CLAIM_TTL = timedelta(seconds=3)  # renewed every second: a lost running claim is soon written back
NOTE = "plugin-note"  # a config key the manifests read only from their change after the copy on
REWRITTEN = "secret"  # the registry kind written again, unchanged, after the copy


ONE_ACCOUNT, ACCOUNTS = "one account", "static accounts"
PROVIDERS = ("postgres",)  # the stand-ins' bound bucket is the postgres provider's


@dataclass(frozen=True)
class Parties:
    """How each party connects: every one on the server's one account, or each on its own account
    of the grants (`keys` holds the seeds, `grants_file` the grants the seat scopes by)."""

    url: str
    grants: Grants | None = None
    keys: Path | None = None
    seat_settings: dict[str, object] = field(default_factory=dict)

    def options(self, who: Party) -> BusOptions:
        seed = seed_path(self.keys, who) if self.keys is not None else None
        return BusOptions(servers=(self.url,), name=who.label, reconnect_wait=timedelta(seconds=0.1), nkey_seed=seed)

    def node(self, node: str) -> BusOptions:
        return self.options(Party(kind=Kind.NODE, name=node))


SEAT_PARTY, VAULT_PARTY = Party(kind=Kind.SEAT, name=buckets.SEAT), Party(kind=Kind.VAULT, name="vault")


def accounts_config(root: Path, mode: str) -> tuple[str, Grants | None]:
    """The server's extra configuration for `mode`, and the grants it holds (None: one account)."""
    if mode == ONE_ACCOUNT:
        return "", None
    out = root / "grants"
    grants = issue_grants(out, MeshParties(nodes=tuple(NODES), providers=PROVIDERS, operators=()))
    (root / "nats").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "accounts.conf", root / "nats" / "accounts.conf")
    return "include ./accounts.conf", grants


def parties_of(root: Path, url: str, grants: Grants | None) -> Parties:
    if grants is None:
        return Parties(url)
    out = root / "grants"
    return Parties(url, grants, out, {"grants_file": out / "grants.json", "providers": list(PROVIDERS)})


def plan_of(root: Path, node: str, *, budgeted: bool = False) -> ClientPlan:
    """The node's plan; `budgeted`, its app module rolls out under `BUDGET`, and on `HELD` each
    change's health check waits while `root`'s hold file exists."""
    manifests = root / node / "manifests"
    shutil.copytree(EXAMPLES, manifests, ignore=shutil.ignore_patterns("*.md"))
    env = root / node / "env"
    app = json.loads((manifests / "app.json").read_text())
    digest = f"sha256sum < '{env / 'app.env'}' >> '{root / node / 'actions'}'"
    app["on_change"] = {"command": ["sh", "-c", digest], "timeout_seconds": 30}
    if budgeted:
        app["rollout"] = {"budget": BUDGET}
    if budgeted and node == HELD:
        waits = f"while [ -e '{hold_file(root)}' ]; do sleep 0.05; done"
        app["on_change"]["health"] = {"command": ["sh", "-c", waits], "timeout_seconds": 60}
    (manifests / "app.json").write_text(json.dumps(app))
    rollout = RolloutPlan(claim_ttl=CLAIM_TTL)
    return ClientPlan(node, manifests, env, timedelta(seconds=2), lease_ttl=LEASE_TTL, rollout=rollout)


def hold_file(root: Path) -> Path:
    return root / "hold-health"


def add_plugin(plan: ClientPlan, *, noted: bool = False) -> None:
    """The node's manifest contributes one more item to the `app-plugins` collection; `noted`, it
    also reads the config value `NOTE`: one more need the node registers."""
    path = plan.manifests / "app.json"
    app = json.loads(path.read_text())
    app["contributes"]["app-plugins"].append(f"plugin-{plan.node}")
    if noted:
        app["env"]["PLUGIN_NOTE"] = f"${{config:{NOTE}}}"
    path.write_text(json.dumps(app))


def add_constant(plan: ClientPlan) -> None:
    """The node's manifest gives its env file one more line, a constant: a change of its own."""
    path = plan.manifests / "app.json"
    app = json.loads(path.read_text())
    app["env"]["HELD"] = "yes"
    path.write_text(json.dumps(app))


def env_of(plan: ClientPlan) -> str:
    try:
        return (plan.materialize / "app.env").read_text()
    except OSError:
        return ""


def converged(plans: list[ClientPlan], log_level: str, *, plugins: bool) -> bool:
    for plan in plans:
        text = env_of(plan)
        if f'LOG_LEVEL="{log_level}"' not in text:
            return False
        if plugins != (f"plugin-{plan.node}" in text):
            return False
    return True


def actions_once_per_change(plan: ClientPlan) -> bool:
    """The change action's digests: none twice in a row, the last the file's own."""
    digests = (plan.materialize.parent / "actions").read_text().split()[::2]
    own = hashlib.sha256((plan.materialize / "app.env").read_bytes()).hexdigest()
    return all(a != b for a, b in itertools.pairwise(digests)) and digests[-1] == own


async def placed(bus: Bus, parts: StandIns, node: str) -> None:
    for key, value in dev_bound(node).items():
        await put(bus, parts.bound, key, json.dumps(value).encode())
    for module, plan in dev_plans(node).items():
        await put(
            bus, parts.assignments, ASSIGNMENT.build(node=node, module=module), json.dumps({"plan": plan}).encode()
        )


async def client(
    parties: Parties, plan: ClientPlan, on_report: Callable[[Report], None], *, task_status: TaskStatus[None]
) -> None:
    async with connect(parties.node(plan.node)) as bus:
        await watch(bus, plan, TIMING, on_report=on_report, task_status=task_status)


async def seat(parties: Parties, *, task_status: TaskStatus[None]) -> None:
    async with serving(
        parties.url,
        bus_options=parties.options(SEAT_PARTY),
        shutdown_timeout=timedelta(seconds=1),
        compile_lease_ttl=timedelta(seconds=1.5),
        rollback_check=timedelta(seconds=0.5),
        **parties.seat_settings,
    ):
        task_status.started()
        await anyio.sleep_forever()


async def stand_ins_task(parties: Parties, bus: Bus, node: str, *, task_status: TaskStatus[StandIns]) -> None:
    """The stand-ins of `node` written on `bus`; the vault served there on one account, else on its own key."""
    grants = parties.grants
    vault = nullcontext() if grants is None else vault_on_its_key(parties, grants)
    async with stand_ins(bus, node, with_vault=grants is None) as parts, vault:
        task_status.started(parts)
        await anyio.sleep_forever()


@asynccontextmanager
async def vault_on_its_key(parties: Parties, grants: Grants) -> AsyncIterator[None]:
    async with connect(parties.options(VAULT_PARTY)) as bus, vault_serving(bus, Vault(parties=grants.party_map())):
        yield


async def until_true(check: Callable[[], Awaitable[bool] | bool], what: str, plans: list[ClientPlan]) -> None:
    """Waits for `check` within `BOUND` (a bus error, the server restarting, is "not yet"); fails
    saying `what` and each node's LOG_LEVEL and PLUGINS lines."""

    async def holds() -> bool:
        try:
            answer = check()
            return answer if isinstance(answer, bool) else await answer
        except BusError:
            return False

    if not await until(holds, BOUND, every=0.05):
        pytest.fail(f"not within {BOUND} s: {what}; {states(plans)}")


def states(plans: list[ClientPlan]) -> str:
    said = ("LOG_LEVEL=", "PLUGINS=", "plugin-")
    return "; ".join(
        f"{plan.node}: " + " ".join(line for line in env_of(plan).splitlines() if line.startswith(said))
        for plan in plans
    )


async def bus_recovered(bus: Bus, plans: list[ClientPlan]) -> bool:
    """Each node's lease its own client's, its applied record, its collection item and its need of
    `NOTE` in the bus, and the registry compiled."""
    if {item.key for item in await snapshot(bus, buckets.REGISTRY)} != set(KINDS):
        return False
    collected = b"".join(item.value for item in await snapshot(bus, buckets.COLLECT))
    applied = {item.key for item in await snapshot(bus, buckets.APPLIED)}
    needs = {item.key for item in await snapshot(bus, buckets.NEEDS, [f"*.*.config.{NOTE}"])}
    for plan in plans:
        if not any(key.startswith(f"{plan.node}.") for key in needs):
            return False
        lease = await get_direct(bus, buckets.LEASES, node_key(plan.node))
        if lease is None or lease.deleted or Holder.model_validate_json(lease.value).pid <= 0:
            return False
        if f"plugin-{plan.node}".encode() not in collected:
            return False
        if not any(plan.node in key for key in applied):
            return False
    return True


class SecondClients:
    """A second client for `node`, tried over and over: never admitted."""

    def __init__(self, parties: Parties, node: str) -> None:
        self.parties, self.node = parties, node
        self.refused = 0
        self.scope = anyio.CancelScope()

    async def keep_trying(self) -> None:
        self.scope = anyio.CancelScope()
        with self.scope:
            async with connect(self.parties.node(self.node)) as bus:
                await self._try(bus)

    async def _try(self, bus: Bus) -> None:
        while True:
            try:
                async with holding(bus, self.node, LEASE_TTL):
                    pytest.fail(f"a second client for {self.node} was admitted")
            except NodeHeld:
                self.refused += 1
            except BusError:
                pass
            await anyio.sleep(0.05)


class Clients:
    """The six node clients, started together and stopped together."""

    def __init__(self, parties: Parties, plans: list[ClientPlan]) -> None:
        self.parties, self.plans = parties, plans
        self.scope = anyio.CancelScope()

    async def run(self) -> None:
        self.scope = anyio.CancelScope()
        with self.scope:
            async with anyio.create_task_group() as group:
                async with anyio.create_task_group() as starting:
                    for plan in self.plans:
                        starting.start_soon(group.start, client, self.parties, plan, lambda _: None)
                await anyio.sleep_forever()


async def run_fault(root: Path, variant: str, mode: str) -> tuple[float, SeatAnswers, Admissions]:
    """The fault under `variant`, the parties as `mode` says; the seconds from the server back to
    everything recovered, and the seat's answers and the claims meanwhile."""
    plans = [plan_of(root, node, budgeted=True) for node in NODES]
    reput, restart = "re-put" in variant, variant.startswith("clients restarted")
    held = not restart  # a client stopped in its health check fails the change: held only where they run on
    config, grants = accounts_config(root, mode)
    async with restartable_nats(root / "nats", config) as server:
        parties = parties_of(root, server.url, grants)
        # the writer: the operator's changes, the stand-ins' values, and the judge's reads (the seat's account)
        async with connect(parties.options(SEAT_PARTY)) as writer, anyio.create_task_group() as tg:
            await tg.start(seat, parties)
            parts: StandIns = await tg.start(stand_ins_task, parties, writer, NODES[0])
            for node in NODES[1:]:
                await placed(writer, parts, node)
            clients, second = Clients(parties, plans), SecondClients(parties, NODES[0])
            tg.start_soon(clients.run)
            await until_true(lambda: converged(plans, BEFORE, plugins=False), "the mesh converged", plans)
            await until_true(lambda: recorded(writer, plans), "every lease and applied record stored", plans)
            tg.start_soon(second.keep_trying)
            await put(writer, parts.config, NOTE, json.dumps("noted").encode())
            assert await no_claims(writer), "a claim before any change: the copy would hold it"
            server.copy_store(root / "copy")
            change = await changed_after_the_copy(root, writer, parts, plans, held=held)
            await server.kill_and_roll_back(root / "copy")
            back = time.perf_counter()
            answers, claims = SeatAnswers(writer), Admissions((HELD, change) if change is not None else None)
            tg.start_soon(answers.keep_asking)
            tg.start_soon(claims.follow, writer)
            expected = OTHER if reput else BEFORE
            if restart:  # stopping releases their leases: the second client waits
                second.scope.cancel()
                clients.scope.cancel()
            if reput:  # with the clients stopped, their memory on disk is all they start from
                await until_true(lambda: put_config(writer, parts, OTHER), "the value put again", plans)
            if restart:
                tg.start_soon(clients.run)
            if change is not None:  # the claim the bus lost, written back while its change still runs
                await until_true(lambda: running_change(writer, change), f"the lost claim of {HELD} back", plans)
                hold_file(root).unlink()
            await until_true(
                lambda: converged(plans, expected, plugins=True), "every env file as the bus implies", plans
            )
            if restart:
                await until_true(lambda: recorded(writer, plans), "every lease taken again", plans)
                tg.start_soon(second.keep_trying)
            await until_true(lambda: bus_recovered(writer, plans), "leases, applied, collect and registry back", plans)
            recovered = time.perf_counter() - back
            refused = second.refused
            await until_true(lambda: second.refused > refused, "a second client refused after the recovery", plans)
            await until_true(lambda: no_claims(writer), "every claim freed", plans)
            answers.scope.cancel()
            await until_true(answers.read_after, "the buckets read after the recovery", plans)
            for plan in plans:
                assert actions_once_per_change(plan), (plan.node, (plan.materialize.parent / "actions").read_text())
            tg.cancel_scope.cancel()
    print(
        f"\n{variant}, {mode}: everything recovered {recovered:.1f} s after the server was back; "
        f"the seat answered {answers.asked} times meanwhile; {claims.admitted} nodes let through "
        "a rollout slot"
    )
    return recovered, answers, claims


async def changed_after_the_copy(
    root: Path, writer: Bus, parts: StandIns, plans: list[ClientPlan], *, held: bool
) -> str | None:
    """The changes the rollback loses, converged and listed by the seat: the config value, each
    manifest's item and need, a registry kind written again; `held`, then one more change of
    `HELD`'s manifest, its health check waiting, its claim running: that claim's change."""
    await put(writer, parts.config, "log-level", json.dumps(AFTER).encode())
    for plan in plans:
        add_plugin(plan, noted=True)
    lost = await rewritten_kind(writer)
    await until_true(lambda: converged(plans, AFTER, plugins=True), "the changes converged", plans)
    await until_true(lambda: seat_lists_the_tail(writer, lost), "the seat listing what will be lost", plans)
    if not held:
        return None
    hold_file(root).touch()
    add_constant(next(plan for plan in plans if plan.node == HELD))
    await until_true(lambda: held_running(writer), f"the claim of {HELD} running, its health waiting", plans)
    [change] = await running_changes(writer)  # stands while the health check waits
    return change


async def rewritten_kind(bus: Bus) -> Listed:
    """A registry kind written again as it stands (as a compile after a hand edit would): a
    registry entry only the lost tail holds."""
    kept = await get_direct(bus, buckets.REGISTRY, REWRITTEN)
    assert kept is not None
    await put(bus, buckets.REGISTRY, REWRITTEN, kept.value)
    again = await get_direct(bus, buckets.REGISTRY, REWRITTEN)
    assert again is not None and again.revision > kept.revision
    return Listed("registry", REWRITTEN, again.revision, canonical(json.loads(again.value)))


async def seat_lists_the_tail(bus: Bus, rewritten: Listed) -> bool:
    """The seat lists the registry kind written after the copy and each node's need of `NOTE`."""
    listed = await listed_by_seat(bus)
    needs = {entry.key for entry in listed if entry.what == "needs" and entry.key.endswith(f".config.{NOTE}")}
    return rewritten in listed and len(needs) == len(NODES)


@dataclass(frozen=True)
class Listed:
    """An entry of the seat's answer, or of a bucket: which listing, its key, revision and value."""

    what: str
    key: str
    revision: int | None
    value: str


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True)


async def listed_by_seat(bus: Bus) -> frozenset[Listed]:
    """Every entry of the seat's `what=registry` and `what=needs` answers."""
    listed: set[Listed] = set()
    for what in LISTED:
        for entry in (await answer_of(bus, {"what": what})).entries:
            assert isinstance(entry, RegistryRow | NeedsRow)
            listed.add(Listed(what, entry.key, entry.revision, canonical(entry.value)))
    return frozenset(listed)


async def held_by_buckets(bus: Bus) -> frozenset[Listed]:
    """Every entry the registry and needs buckets hold."""
    held: set[Listed] = set()
    for what, bucket in LISTED.items():
        held.update(
            Listed(what, item.key, item.revision, canonical(json.loads(item.value)))
            for item in await current_snapshot(bus, bucket)
        )
    return frozenset(held)


LISTED = {"registry": buckets.REGISTRY, "needs": buckets.NEEDS}


class ListedLost(AssertionError):
    """The seat listed an entry the bucket no longer held."""


class SeatAnswers:
    """The seat's answers, asked over and over from the server's return until the recovery, each
    followed by a read of the buckets: an entry listed must stand in the read that follows its
    answer or in a later one (the registry and the needs are each written at most once after the
    fault, so no entry held moves on between an answer and the read that follows it)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.answers: list[frozenset[Listed]] = []
        self.reads: list[frozenset[Listed]] = []  # reads[i]: the read that followed answers[i]; one more last
        self.scope = anyio.CancelScope()

    @property
    def asked(self) -> int:
        return len(self.answers)

    async def keep_asking(self) -> None:
        with self.scope:
            while True:
                try:
                    answer = await listed_by_seat(self.bus)
                    read = await held_by_buckets(self.bus)
                except BusError:  # the server or the seat not back yet: no answer to judge
                    pass
                else:
                    self.answers.append(answer)
                    self.reads.append(read)
                await anyio.sleep(0.01)

    async def read_after(self) -> bool:
        """One more read of the buckets, after the last answer."""
        self.reads.append(await held_by_buckets(self.bus))
        return True

    def judge(self) -> None:
        if lost := self.not_held():
            raise ListedLost(f"the seat listed, of its {self.asked} answers, what no read since holds: {lost}")

    def not_held(self) -> list[tuple[int, Listed]]:
        """Each entry listed (with its answer's index) that no read from its answer's on holds."""
        since: set[Listed] = set(self.reads[-1])
        found = []
        for index in reversed(range(len(self.answers))):
            since |= self.reads[index]
            found += [(index, entry) for entry in self.answers[index] - since]
        return sorted(found, key=lambda found: (found[0], found[1].key))


async def app_claims(bus: Bus) -> list[fleet.LiveClaim]:
    """The app module's live claims as they stood at one sequence of the fleet's stream: a claim
    written again after it is left out, never counted twice (its earlier write is gone)."""
    at = await stream_last_sequence(bus, fleet.FLEET)
    items = await get_last_many(bus, fleet.FLEET, fleet.claims_of("app"), up_to_seq=at) if at else []
    return fleet.live_claims(items, datetime.now(UTC), skew=SKEW)


async def running_changes(bus: Bus) -> list[str]:
    """The changes `HELD` has a running claim for."""
    return [
        claim.claim.change for claim in await app_claims(bus) if claim.node == HELD and claim.claim.state == "running"
    ]


async def held_running(bus: Bus) -> bool:
    return await running_changes(bus) != []


async def running_change(bus: Bus, change: str) -> bool:
    return change in await running_changes(bus)


async def no_claims(bus: Bus) -> bool:
    return await app_claims(bus) == []


class OverBudget(AssertionError):
    """A node was let run a change while the budget's nodes stood running."""


class Admissions:
    """The app module's claims as the fleet's stream stores them (each write where the stream
    republishes it, in its order), from the fleet as the rollback left it (no claim: the copy was
    taken before any): each claim that turns from waiting to running, a node let through, must do
    so while fewer than `BUDGET` other claims stand running. `lost`, the node and change whose
    running claim the bus lost, is not counted among them: written back, its place in the queue
    was given before the rollback, and the stream gives those sequences again, so it cannot be
    ranked against the places given since; it holds its slot outside the count until its change
    ends (docs/running.md, "Durability"). A write stored before the subscription reached the
    server is missed: its claim counts from its next write, so a miss can only hide an admission,
    never make one up."""

    def __init__(self, lost: tuple[str, str] | None = None) -> None:
        self.lost = lost
        self.waiting: set[str] = set()
        self.running: set[str] = set()
        self.admitted = 0
        self.over_budget: list[list[str]] = []

    async def follow(self, bus: Bus) -> None:
        subject = fleet.FLEET.live_subject(fleet.claims_of("app"))
        while True:
            await bus.until_connected(operation="follow the claims")  # not into the reconnect buffer
            try:
                subscription = await bus.subscribe(subject, self.take)
                break
            except BusError:  # the connection lost again meanwhile
                await anyio.sleep(0.05)
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.move_on_after(2, shield=True):
                await subscription.unsubscribe()

    async def take(self, msg: Message) -> None:
        node = fleet.parse_fleet_key(fleet.FLEET.key_of(msg.subject)).node
        assert node is not None
        removed = msg.headers.get("KV-Operation") in ("DEL", "PURGE")
        claim = None if removed else fleet.read_claim(msg.data)
        state = claim.state if claim is not None else None
        if state == "running" and node in self.waiting:
            self.admitted += 1
            if len(self.running - {node}) >= BUDGET:
                self.over_budget.append(sorted(self.running | {node}))
        self.waiting.discard(node)
        self.running.discard(node)
        if state == "waiting":
            self.waiting.add(node)
        elif state == "running" and claim is not None and (node, claim.change) != self.lost:
            self.running.add(node)

    def judge(self) -> None:
        if self.over_budget:
            raise OverBudget(f"of {self.admitted} let through, some while others stood running: {self.over_budget}")


async def recorded(bus: Bus, plans: list[ClientPlan]) -> bool:
    applied = {item.key for item in await snapshot(bus, buckets.APPLIED)}
    leases = [await get_direct(bus, buckets.LEASES, node_key(plan.node)) for plan in plans]
    return all(lease is not None for lease in leases) and all(any(p.node in k for k in applied) for p in plans)


async def put_config(bus: Bus, parts: StandIns, value: str) -> bool:
    await put(bus, parts.config, "log-level", json.dumps(value).encode())
    return True


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("variant", "mode"),
    [
        ("left running", ONE_ACCOUNT),
        ("value re-put", ONE_ACCOUNT),
        ("clients restarted", ONE_ACCOUNT),
        ("clients restarted after a re-put", ONE_ACCOUNT),
        # each party on its own account: the first and the last, whose steps include every other's
        ("left running", ACCOUNTS),
        ("clients restarted after a re-put", ACCOUNTS),
    ],
)
async def test_a_mesh_recovers_what_a_rolled_back_store_lost(tmp_path: Path, variant: str, mode: str) -> None:
    recovered, answers, claims = await run_fault(tmp_path, variant, mode)
    assert recovered < BOUND
    assert claims.admitted > 0, "no node let through while the mesh recovered"
    assert answers.asked > 0, "the seat answered nothing while the mesh recovered"
    claims.judge()
    answers.judge()


async def quiet_seat(url: str, *, task_status: TaskStatus[None]) -> None:
    """A seat that neither checks for a rollback nor compiles again within a test: nothing it
    writes wakes the client after the fault."""
    options = BusOptions(servers=(url,), name=buckets.SEAT, reconnect_wait=timedelta(seconds=0.1))
    async with serving(
        url, bus_options=options, shutdown_timeout=timedelta(seconds=1), rollback_check=timedelta(hours=1)
    ):
        task_status.started()
        await anyio.sleep_forever()


async def never_told(bus: Bus, trigger: object) -> None:
    """The client's resync on a reconnect, as if the connection were never seen to drop."""
    await anyio.sleep_forever()


CHECK = timedelta(seconds=0.5)


@pytest.mark.timeout(90)
async def test_a_rollback_no_reconnect_told_of_is_repaired_by_the_check_within_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the check (its interval an hour) the item is not back within `BOUND`: nothing else
    wakes the loop."""
    monkeypatch.setattr(watching, "_resync_on_reconnect", never_told)
    running = Running()
    monkeypatch.setattr(watching, "reconcile", running.reconcile)
    plan = plan_of(tmp_path, NODES[0])
    timing = replace(TIMING, rollback_check=CHECK)
    async with restartable_nats(tmp_path / "nats") as server:
        options = BusOptions(servers=(server.url,), name="writer", reconnect_wait=timedelta(seconds=0.1))
        async with connect(options) as writer, anyio.create_task_group() as tg:
            await tg.start(quiet_seat, server.url)
            await tg.start(stand_ins_task, Parties(server.url), writer, NODES[0])
            client_options = BusOptions(servers=(server.url,), name="client", reconnect_wait=timedelta(seconds=0.1))
            bus = await tg.start(connected, client_options)
            tg.start_soon(partial(watch, bus, plan, timing))
            await until_true(lambda: converged([plan], BEFORE, plugins=False), "the node converged", [plan])
            server.copy_store(tmp_path / "copy")
            add_plugin(plan)
            await until_true(lambda: idle(running, writer, plan), "the reconcile of the item done", [plan])
            await server.kill_and_roll_back(tmp_path / "copy")
            back = time.perf_counter()
            await until_true(lambda: collected(writer, plan), "the lost item written back", [plan])
            recovered = time.perf_counter() - back
            tg.cancel_scope.cancel()
    print(f"\nno reconnect told of: the lost item back {recovered:.1f} s after the server was back")
    assert recovered < BOUND


async def connected(options: BusOptions, *, task_status: TaskStatus[Bus]) -> None:
    async with connect(options) as bus:
        task_status.started(bus)
        await anyio.sleep_forever()


class Running:
    """The client's reconciles, counted while they run: the fault must not cut one short (its
    retry, not the check, would then find what was lost)."""

    def __init__(self) -> None:
        self.now = 0
        self.last: Report | None = None

    async def reconcile(self, bus: Bus, plan: ClientPlan, **kwargs: Any) -> Report:
        self.now += 1
        try:
            self.last = await reconcile(bus, plan, **kwargs)
            return self.last
        finally:
            self.now -= 1


async def idle(running: Running, bus: Bus, plan: ClientPlan) -> bool:
    """No reconcile running, the last one wrote nothing (so nothing of its own wakes another), and
    the item remembered."""
    last = running.last
    quiet = running.now == 0 and last is not None and not any(last.writes.values()) and not last.actions_run
    return quiet and await remembered(bus, plan) and running.now == 0


async def remembered(bus: Bus, plan: ClientPlan) -> bool:
    """The item written and the reconcile that wrote it done: the node's memory on disk holds the
    stamps its collect and applied keys stand at in the bus."""
    if not converged([plan], BEFORE, plugins=True):
        return False
    stamps = remembered_stamps(plan.materialize, plan.node)
    scope = NodeScope(plan.node)
    for bucket in (buckets.COLLECT, buckets.APPLIED):
        if stamps.get(bucket.name) != await scope.stamp(bus, bucket):
            return False
    return True


async def collected(bus: Bus, plan: ClientPlan) -> bool:
    return any(f"plugin-{plan.node}".encode() in item.value for item in await snapshot(bus, buckets.COLLECT))
