"""The demo: the other domains' stand-ins, a client over `deploy/examples/`, and a summary.

`run_demo(nats_url, state_dir)` expects the provisioner server on that bus (it writes the
registry); `mesh-provisioner-dev` starts both and hands it the URL. It starts the stand-ins
(`mesh_dev.standins`), seeds `<state_dir>/manifests` with the example manifests (`seed_examples`:
each example once, so edits and deletions survive a restart), reconciles node `node-1` into
`<state_dir>/env`, prints what was needed and applied, then keeps
watching until cancelled: edit a manifest there, or a value in `mesh-config_values`, and watch
the env file follow. The placements (`${port:...}`, `${dir:...}`, ...) come from
`<state_dir>/placement.json` (`mesh_dev.placement`): add a module of one's own there to place it.

When the machine has PostgreSQL, the provider side is real (`mesh_dev.database`): a PostgreSQL
under `<state_dir>/postgres`, `postgres_bound` written by the provider helper from the needs, and
the postgres provisioner watching `postgres.env`, so module `app`'s `DATABASE_URL` logs in; the
summary says whether it does. Without PostgreSQL the stand-in's fixed `postgres_bound` is used,
and the summary says what to install.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from mesh_dev.database import PROVIDER, Database, ProviderLoop, binding, connects, local_database, provisioner_watching
from mesh_dev.placement import PLACEMENT_FILE, PlacementRefused, follow_placement, place, seed_placement
from mesh_dev.shell import new_terminal
from mesh_dev.standins import Vault, stand_ins
from provisioner_client.materializing.action import pending
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import buckets
from registry.errors import BusError
from registry.wire import Bus, BusOptions, bucket_config, connect, snapshot

log = logging.getLogger(__name__)

NODE = "node-1"
CONSUMER, URL_VARIABLE = "app", "DATABASE_URL"  # deploy/examples/app.json
PROVIDER_MODULE = "postgres"  # deploy/examples/postgres.json: ${consumers:db} in PG_CONSUMERS
EXAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "examples"
SEEDED = "seeded"  # under the demo's state folder: the examples already copied once, a name a line
CLIENT_SETTINGS = "client.toml"  # under the demo's state folder: `mesh-provisioner-client status --config` it
_TIMING = WatchTiming(refresh=timedelta(seconds=30), poll=timedelta(seconds=1))


async def run_demo(
    nats_url: str, state_dir: Path, *, postgres: bool = True, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Starts the stand-ins (and PostgreSQL, when the machine has it and `postgres`), reconciles the
    examples, prints a summary, then watches until cancelled. Ready (for `TaskGroup.start`) once the
    summary is printed."""
    plan = ClientPlan(node=NODE, manifests=state_dir / "manifests", materialize=state_dir / "env")
    seed_examples(plan.manifests, state_dir / SEEDED)
    write_client_settings(state_dir / CLIENT_SETTINGS, plan, nats_url)
    async with connect(BusOptions(servers=(nats_url,), name="mesh-provisioner demo")) as bus:
        await _wait_for_registry(bus)
        async with (
            # Absolute: PostgreSQL's user may not reach the folder the way this process does (a
            # repository under root's 0700 home): the check must see the whole path, initdb too.
            local_database((state_dir / "postgres").absolute(), wanted=postgres) as database,
            stand_ins(bus, NODE, fixed_bound=database.server is None, plans={}) as parts,
        ):
            await _placed(bus, state_dir / PLACEMENT_FILE)
            async with provider_side(bus, plan, database, parts.vault) as side, anyio.create_task_group() as tg:
                print(await describe(bus, plan, side.report), side.summary, sep="\n", flush=True)
                task_status.started()
                tg.start_soon(follow_placement, bus, NODE, state_dir / PLACEMENT_FILE)
                await watch(bus, plan, _TIMING, on_report=side.after_report)


async def _placed(bus: Bus, path: Path) -> None:
    """The placements of `path` (the examples' when it is new) in the controller's mirror; a file
    that cannot be used is said, and the mirror keeps what it held."""
    seed_placement(path, NODE)
    try:
        await place(bus, NODE, path)
    except PlacementRefused as err:
        log.warning("%s; the placements stay as they were", err)


@dataclass
class ProviderSide:
    """The node's first report once the provider side settled, what to say about it, and what to
    do after each report while watching."""

    report: Report
    summary: str
    provider: ProviderLoop | None = None

    def after_report(self, report: Report) -> None:
        """Prints what changed; the provider binds again (a module may have come or gone)."""
        _print_changes(report)
        if self.provider is not None:
            self.provider.wake()


@asynccontextmanager
async def provider_side(bus: Bus, plan: ClientPlan, database: Database, vault: Vault) -> AsyncIterator[ProviderSide]:
    """Reconciles the node; with PostgreSQL, the provider then binds what the needs ask, the node
    reconciles again, and the postgres provisioner applies the consumers until the block ends."""
    with _waiting_for_the_provider(bound_by_provider=database.server is not None):
        report = await reconcile(bus, plan)
    server = database.server
    if server is None:
        yield ProviderSide(report, _without_postgres(database))
        return
    if any(m.applied.state == "pending" for m in report.modules.values()):
        log.info("the provider writes postgres_bound for the needs just registered; the node reconciles again")
    provider = ProviderLoop(bus, binding(server, vault))
    bound = await provider.converge()
    report = _settled(report, await reconcile(bus, plan))
    async with (
        provisioner_watching(plan.materialize / f"{PROVIDER_MODULE}.env", server) as provisioner,
        anyio.create_task_group() as tg,
    ):
        outcome = await provisioner.wait_first_outcome()
        connected = await anyio.to_thread.run_sync(connects, plan.materialize / f"{CONSUMER}.env", URL_VARIABLE)
        summary = "\n".join(
            [
                "",
                "provider side: a real PostgreSQL",
                f"  PostgreSQL on 127.0.0.1:{server.port}, data in {server.data}"
                + (" (a temporary folder, removed at stop)" if database.temporary else ""),
                f"  postgres_bound written by the provider helper from the needs: {bound.summary()}",
                f"  the postgres provisioner watches {plan.materialize / PROVIDER_MODULE}.env: {outcome}",
                f"  module {CONSUMER}'s {URL_VARIABLE} {connected}",
                f'  try it: (set -a; . {plan.materialize / CONSUMER}.env; psql "${URL_VARIABLE}")',
            ]
        )
        tg.start_soon(provider.follow)
        yield ProviderSide(report, summary, provider)
        tg.cancel_scope.cancel()


@contextmanager
def _waiting_for_the_provider(*, bound_by_provider: bool) -> Iterator[None]:
    """The first reconcile registers the needs the provider binds from: a module waiting for its
    postgres_bound values then is the handshake's first step, logged at INFO rather than WARNING."""
    if not bound_by_provider:
        yield
        return
    logger = logging.getLogger(pending.__module__)  # the logger of the line "module ... is pending"
    logger.addFilter(_first_step)
    try:
        yield
    finally:
        logger.removeFilter(_first_step)


def _first_step(record: logging.LogRecord) -> bool:
    """Lowers a module's "is pending" to INFO when it waits for postgres_bound values alone."""
    if record.levelno == logging.WARNING and record.msg == _PENDING and isinstance(record.args, tuple):
        reasons = str(record.args[-1]).split("; ")
        if all(_UNBOUND.match(reason) for reason in reasons):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
    return True


_PENDING = "module %s is pending: %s"  # provisioner_client.reconcile's line
_UNBOUND = re.compile(rf"\$\{{bound:{PROVIDER}:[^}}]*\}}: no value at {PROVIDER}_bound key ")


def _without_postgres(database: Database) -> str:
    return (
        f"\nprovider side: PostgreSQL {database.why_not}\n"
        "  postgres_bound holds the stand-in's fixed values (127.0.0.1:5432) and no database answers there"
    )


def _settled(first: Report, second: Report) -> Report:
    """`second`, each module marked written when either reconcile wrote its file."""
    for name, module in second.modules.items():
        if not module.written and name in first.modules and first.modules[name].written:
            second.modules[name] = replace(module, written=True)
    return second


def seed_examples(folder: Path, record: Path, examples: Path = EXAMPLES) -> list[str]:
    """Copies into `folder` each example manifest never copied before, and returns their names.

    `record` remembers what was seeded, so a manifest edited in `folder` is never overwritten and
    one deleted there stays deleted; a file of the same name the user made is left alone too.
    Deleting the state folder (`./scripts/run --reset`) starts over."""
    folder.mkdir(parents=True, exist_ok=True)
    seeded = set(record.read_text().split()) if record.exists() else set()
    copied = []
    for example in sorted(examples.glob("*.json")):
        if example.name in seeded:
            continue
        if not (folder / example.name).exists():
            shutil.copyfile(example, folder / example.name)
            copied.append(example.name)
        seeded.add(example.name)
    record.write_text("".join(f"{name}\n" for name in sorted(seeded)))
    return copied


def write_client_settings(path: Path, plan: ClientPlan, nats_url: str) -> None:
    """A settings file of the demo's client (node, folders, this start's NATS URL), for the client's
    commands in another shell: `mesh-provisioner-client status --config <path>`."""
    values = {"node": plan.node, "manifests": plan.manifests.resolve(), "materialize": plan.materialize.resolve()}
    lines = [f"# Written by the demo at each start: mesh-provisioner-client status --config {path}"]
    lines += [f"{name} = {json.dumps(str(value))}" for name, value in values.items()]
    lines += ["", "[nats]", f"url = {json.dumps(nats_url)}"]
    path.write_text("\n".join(lines) + "\n")


async def _wait_for_registry(bus: Bus) -> None:
    """The server writes the registry at start; wait for it rather than fail."""
    warned = False
    while True:
        try:
            existing = [await bucket_config(bus, bucket) for bucket in buckets.OWN]
            if all(existing) and await snapshot(bus, buckets.REGISTRY):
                return
        except BusError as err:  # the server may still be creating its buckets
            log.debug("registry not ready: %s", err)
        if not warned:
            log.info("waiting for the provisioner server to write %s", buckets.REGISTRY.name)
            warned = True
        await anyio.sleep(0.5)


async def describe(bus: Bus, plan: ClientPlan, report: Report) -> str:
    needs = await snapshot(bus, buckets.NEEDS, buckets.NEEDS.shape.filters(node=plan.node))
    lines = [f"== node {plan.node}: manifests in {plan.manifests}", "", "needed (mesh-provisioner_needs):"]
    lines.extend(f"  {item.key}  {json.loads(item.value)['placeholder']}" for item in needs)
    lines += ["", "applied (mesh-provisioner_applied) and env files:", report.summary(), ""]
    lines.append(f"env files are in {plan.materialize} (mode 0600); watching for changes, Ctrl-C stops")
    lines.append(f"edit a manifest in {plan.manifests} and the env files follow; a module of your own is placed")
    lines.append(
        f"(its ${{port:...}}, ${{dir:...}}, ${{access:...}}, ${{seat:...}}, ${{machine:...}}) by adding it to "
        f'{plan.manifests.parent / PLACEMENT_FILE}, e.g. "web": {{"port": {{"http": 8081}}}}; from another terminal:'
    )
    lines.append(f"  {new_terminal()}")
    settings = shlex.quote(str(plan.manifests.parent / CLIENT_SETTINGS))
    lines.append(f"  mesh-provisioner-client status --config {settings}")
    return "\n".join(lines)


def _print_changes(report: Report) -> None:
    written = sorted(m for m, r in report.modules.items() if r.written)
    if written or report.removed or any(r.applied.state == "pending" for r in report.modules.values()):
        print(report.summary(), flush=True)
