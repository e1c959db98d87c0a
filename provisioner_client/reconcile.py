"""One reconcile: manifests in, needs, collect, env files and applied out.

In order: read the manifests; converge this node's needs (`<node>.<module>.<kind>.<name>`) and
contributions (`<node>.<collection>.<module>`); read the registry; resolve each module's
placeholders and materialize its env file, or leave the module pending with every reason and its
previous file as it was (never a partial file); run the change action of each module whose file
changed; converge `applied` (`<node>.<module>`: state, digest, reasons, action outcome); remove
the env files of modules no longer declared.

Every write goes through `NodeScope.converge` (by `OwnKeys.write`), so nothing changes when nothing differs: a second
reconcile makes zero KV writes and rewrites no file. A module whose manifest cannot be read but
whose name can be told is held: its keys and file stay as they were, its `applied` says why. The
module a file holds is the one it declared when last read (remembered in the materialize folder's
ledger), so corrupting `web.json` that declares `app` holds `app`, never removes it.

An applied record is bounded: at most `MAX_REASONS` reasons (`materializing.action`) of at most
`errors.REASON_CHARS` characters each (then "... and N more"), and never more than
`MAX_VALUE_BYTES` (the buckets' value limit), so a module with thousands of pending placeholders
is still recorded.

A reconcile that changes nothing costs little: one object, the node's `Memory` of the last
reconcile (`provisioner_client.resolving.memory`), says whether the node's own keys need listing
(their stamps moved?) and which modules need resolving (their inputs moved?: the registry, the
stamps of the buckets they read from, the node's collections, the digests of the verbs' answers,
their manifest; their file on disk is still the one recorded?), each with its reason in a debug
line; it is told what was converged and applied, and saved once at the end.
Needs and collect are written (64 in flight) before the values are read, applied after the env files.

The steps, in `reconcile`, read top to bottom: remove the temporary files a killed client left
and load the manifests; load the memory (once: saved once at the end); find the node's own keys
and read the registry; register (converge needs and collect, each write's outcome noted by
`OwnKeys.write`); read the applied records as stored (once: the previous ones, and the ones kept
as they are at the end); read the world; decide what to resolve (and keep the rollout claims left
standing: `RolloutGate.prepare`); resolve; apply each module's change (`materializing.action`:
its env file, change action, health command, rollback); record applied; remember; remove the
files of modules no longer declared.

A module whose env file would change (or whose change action has not run for its content) changes
only once its rollout lets it (`provisioner_client.rollout`): a budget's slot, no hold, its splay
and quiet period over; else it is pending, `rollout: ...`, its file as it was. A change admitted
under a claim runs its action at most once, remembered in the materialize folder, then its
health command; the slot is freed only when both succeeded.

Every line logged during one reconcile, in its tasks too, carries `reconcile=<id>`, a new id each
time (`registry.runtime.log_context`), also in its report: a reconcile's lines join on it.

`reconcile` takes no lease: the CLI and watch mode hold the node's lease around it
(`provisioner_client.watch.holding`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from pydantic import ValidationError

from provisioner_client.concurrently import all_of
from provisioner_client.errors import ManifestError
from provisioner_client.materializing.action import DEFAULT_ENVIRONMENT, Applying, ModuleReport, apply, held, pending
from provisioner_client.materializing.envfile import EnvFolder, FileObserver
from provisioner_client.resolving.manifest import MAX_VALUE_BYTES, Manifests, load_manifests
from provisioner_client.resolving.memory import (
    Memory,
    Verdict,
    World,
    buckets_of,
    stamps_of,
    unknown_world,
    verb_digests,
    world_of,
)
from provisioner_client.resolving.own import Outcomes, OwnKeys, WaitingWrites, record_refusals
from provisioner_client.resolving.resolve import Registry, Resolver, Source, read_registry
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.rollout import RolloutGate, RolloutPlan, RolloutReport
from provisioner_client.rollout.gate import Claims
from registry.contract import (
    SHARE_BYTES,
    AppliedValue,
    BucketAnswer,
    JsonRefused,
    Placeholder,
    buckets,
    read_json,
    to_json,
)
from registry.errors import RegistryError
from registry.runtime import log_context, new_log_id, terminal_safe
from registry.wire import Bus, KvItem

log = logging.getLogger(__name__)

_STAMP_BYTES = 64  # room left for `changed_at` when a record is fitted


@dataclass(frozen=True)
class ClientPlan:
    """What one node's client reconciles: settings passed down from `main()`. `action_env` is
    what a change action inherits (`action.inherited`: PATH and LANG only)."""

    node: str
    manifests: Path
    materialize: Path
    verb_timeout: timedelta = timedelta(seconds=5)
    lease_ttl: timedelta = timedelta(seconds=15)
    action_env: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ENVIRONMENT), compare=False)
    rollout: RolloutPlan = field(default_factory=RolloutPlan)


@dataclass
class Report(Outcomes):
    """What a reconcile found and did; `reconcile_id` is on each of its log lines as `reconcile=`."""

    node: str
    reconcile_id: str = ""
    modules: dict[str, ModuleReport] = field(default_factory=dict)
    manifest_errors: list[ManifestError] = field(default_factory=list)
    ledger_problems: tuple[str, ...] = ()
    removed: list[Path] = field(default_factory=list)
    sources: set[Source] = field(default_factory=set)
    actions_run: list[str] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # each module's: resolved again or not, and why
    key_verdicts: dict[str, Verdict] = field(default_factory=dict)  # each own bucket's: listed or not, and why
    rollout: RolloutReport = field(default_factory=RolloutReport)  # the modules waiting on their rollout, and when

    @property
    def listed(self) -> set[str]:
        """The buckets whose node keys were listed, not known as remembered."""
        return {name for name, verdict in self.key_verdicts.items() if not verdict.as_before}

    @property
    def unchanged(self) -> set[str]:
        """The modules whose inputs were as before: not resolved."""
        return {module for module, verdict in self.verdicts.items() if verdict.as_before}

    @property
    def ok(self) -> bool:
        """Every module applied, every manifest read, every action that ran succeeded."""
        modules_ok = all(m.applied.state == "applied" for m in self.modules.values())
        actions = [self.modules[m].action for m in self.actions_run]
        done = not self.manifest_errors and not self.refused and not self.waiting
        return modules_ok and all(a is None or a.ok for a in actions) and done

    def summary(self) -> str:
        """A few readable lines: each module's state, file, reasons and change action; what another
        party wrote (a hold's reason, a refusal) shows its control and format characters as escapes."""
        lines = [f"manifest error: {error}" for error in self.manifest_errors]
        lines.extend(f"ledger: {problem}" for problem in self.ledger_problems)
        lines.extend(f"refused: {bucket} refused the writes: {why}" for bucket, why in sorted(self.refused.items()))
        lines.extend(f"waiting: {bucket}: {how}" for bucket, how in sorted(self.waiting.items()))
        for name, module in sorted(self.modules.items()):
            applied = module.applied
            where = f" -> {applied.file}" if applied.file else ""
            lines.append(f"{name}: {applied.state}{where}{' (written)' if module.written else ''}")
            lines.extend(f"  reason: {reason}" for reason in applied.reasons)
            action = module.action
            if action is not None and name in self.actions_run:
                lines.append(f"  change action: {action.outcome}")
        lines.extend(f"removed {path}" for path in self.removed)
        return "\n".join(terminal_safe(line) for line in lines)

    def document(self) -> dict[str, object]:
        """What `summary` says, as JSON data (`reconcile --json`)."""
        return {
            "node": self.node,
            "ok": self.ok,
            "reconcile_id": self.reconcile_id,
            "modules": {name: _module_document(name, module, self) for name, module in sorted(self.modules.items())},
            "manifest_errors": [str(error) for error in self.manifest_errors],
            "ledger_problems": list(self.ledger_problems),
            "refused": dict(sorted(self.refused.items())),
            "waiting": dict(sorted(self.waiting.items())),
            "removed": [str(path) for path in self.removed],
        }


def _module_document(name: str, module: ModuleReport, report: Report) -> dict[str, object]:
    applied, action = module.applied, module.action
    ran = action is not None and name in report.actions_run
    return {
        "state": applied.state,
        "file": applied.file or None,
        "written": module.written,
        "reasons": list(applied.reasons),
        "change_action": action.model_dump(mode="json") if ran and action is not None else None,
    }


async def reconcile(
    bus: Bus,
    plan: ClientPlan,
    *,
    observer: FileObserver | None = None,
    distrust: str | None = None,
    waits: WaitingWrites | None = None,
) -> Report:
    """One reconcile of the plan's node, its log lines joined by a new reconcile id; `observer` is
    told of each env file as it is materialized or removed (watch mode's drift watch); with
    `distrust` (why), the memory of the last reconcile vouches for nothing; `waits`, the record of
    the writes waiting for the hub that the lease's renewals share (else read here)."""
    reconcile_id = new_log_id()
    with log_context(reconcile=reconcile_id):
        kept = waits or WaitingWrites(plan.materialize, plan.node)
        return await _reconcile(bus, plan, observer=observer, reconcile_id=reconcile_id, distrust=distrust, waits=kept)


async def _reconcile(
    bus: Bus,
    plan: ClientPlan,
    *,
    observer: FileObserver | None,
    reconcile_id: str,
    distrust: str | None,
    waits: WaitingWrites,
) -> Report:
    folder, manifests, report = _load_manifests(plan, observer, reconcile_id)
    memory = Memory.load(plan.materialize, plan.node)
    if distrust is not None:
        memory.distrust(distrust)
    own = OwnKeys(bus, NodeScope(plan.node), memory)
    wanted = await _find_own_keys(own, manifests, report)
    resolver = _resolver(bus, plan, wanted)
    await _register(own, report, wanted, waits)
    _say_past_shares(plan.node, wanted)
    stored = _as_applied(own, waits)
    previous = _applied_by_module(stored)
    world = await _world(memory, resolver, wanted, folder, _placeholders(manifests))
    to_resolve = _decide(memory, world, manifests=manifests, previous=previous, folder=folder, report=report)
    gate = RolloutGate(Claims(bus, plan.node, plan.rollout.claim_ttl), plan.materialize, plan.rollout)
    to_resolve |= _forced(report, await gate.prepare(manifests.modules))
    await resolver.prefetch(_placeholders(manifests, only=to_resolve))
    applying = Applying(plan.node, folder, plan.action_env, gate, report.actions_run)
    await _materialize(applying, resolver, manifests=manifests, previous=previous, report=report)
    report.rollout = await gate.finish()
    await _record_applied(own, report, plan, waits, stored=stored, previous=previous)
    report.sources = resolver.sources | (memory.sources_read() if report.unchanged else set())
    _remember(memory, world, manifests, folder, report)
    report.removed = folder.remove_except(set(report.modules))
    return report


def _load_manifests(
    plan: ClientPlan, observer: FileObserver | None, reconcile_id: str
) -> tuple[EnvFolder, Manifests, Report]:
    """The manifests, read with the ledger's memory of which module each file declared; the
    env folder remembers what they declare now."""
    if not plan.manifests.is_dir():  # never read a missing folder as "no modules": that would remove them all
        raise ManifestError(plan.manifests, "the manifests folder does not exist")
    folder = EnvFolder(plan.materialize, observer=observer)
    folder.remove_leftovers()
    ledger = folder.read_ledger()
    for problem in ledger.problems:
        log.error("%s: %s", folder.folder, problem, extra={"node": plan.node})
    manifests = load_manifests(plan.manifests, ledger.manifests)
    for error in manifests.errors:
        log.error("%s", error)
    folder.remember(manifests.declared())
    report = Report(
        plan.node, reconcile_id=reconcile_id, manifest_errors=list(manifests.errors), ledger_problems=ledger.problems
    )
    return folder, manifests, report


@dataclass(frozen=True)
class _Wanted:
    """What the node's keys of needs and collect should hold (a held module's as they are), and the
    registry read beside them."""

    registry: Registry
    needs: dict[str, bytes]
    collect: dict[str, bytes]


async def _find_own_keys(own: OwnKeys, manifests: Manifests, report: Report) -> _Wanted:
    """The node's keys of needs, collect and applied (as remembered where nothing moved, else
    listed, each bucket's verdict in the report), and the registry: asked all at once. With modules
    held, needs and collect are listed: their keys are kept as they are."""
    node, held = own.scope.node, set(manifests.held)
    needs = {key: value for loaded in manifests.modules.values() for key, value in loaded.needs(node).items()}
    collect = {k: v for loaded in manifests.modules.values() for k, v in loaded.contributions(node).items()}
    registry = Registry()

    async def read_whole_registry() -> None:
        nonlocal registry
        registry = await read_registry(own.bus)

    await all_of(
        partial(own.find, buckets.NEEDS, None if held else needs),
        partial(own.find, buckets.COLLECT, None if held else collect),
        partial(own.find, buckets.APPLIED, None),
        read_whole_registry,
    )
    needs.update(_kept(own.items(buckets.NEEDS), buckets.NEEDS.shape.parse, "module", held))
    collect.update(_kept(own.items(buckets.COLLECT), buckets.COLLECT.shape.parse, "contributor", held))
    report.key_verdicts = {name: found.verdict for name, found in own.found.items()}
    return _Wanted(registry, needs, collect)


def _as_applied(own: OwnKeys, waits: WaitingWrites) -> list[KvItem]:
    """The node's applied records as last applied: the hub's, with those still waiting to be
    written there (`own.WaitingWrites`) in their place: they say what was applied and when."""
    found = {item.key: item for item in own.items(buckets.APPLIED)}
    current = waits.current()
    for key, value in (current.applied_records(buckets.APPLIED.name) if current is not None else {}).items():
        before = found.get(key)
        found[key] = KvItem(key, value, before.revision if before is not None else 0)
    return list(found.values())


async def _register(own: OwnKeys, report: Report, wanted: _Wanted, waits: WaitingWrites) -> None:
    """Needs and collect converged at once, before any value is read and before applied is; a
    module whose keys a bucket refused is pending, saying why (`own`: refused writes); writes that wait for
    the hub (`own`: writes that wait) leave the modules to be resolved from what the site has."""
    await all_of(
        partial(own.write, buckets.NEEDS, wanted.needs, waits, report, owner="module"),
        partial(own.write, buckets.COLLECT, wanted.collect, waits, report, owner="contributor"),
    )


# An entry's bytes in the seat's listing besides its key, parts and value: the field names, a
# revision of up to 20 digits, a forgotten mark (`provisioner.verb.listing`).
_ENTRY_BYTES = 120


def _say_past_shares(node: str, wanted: _Wanted) -> None:
    """Warns of this node's contributions to a shared collection that pass its share of every
    other node's listing (`registry.contract.SHARE_BYTES`, at most: the seat counts each entry's
    exact bytes, in the listing's order): other nodes read them left out."""
    shared = {
        name
        for entry in wanted.registry.entries.values()
        if isinstance(entry.answer, BucketAnswer)
        for name in entry.answer.shared
    }
    spent: dict[str, int] = {}
    for key, value in sorted(wanted.collect.items()):
        collection = buckets.COLLECT.shape.parse(key)["collection"]
        if collection in shared:
            spent[collection] = spent.get(collection, 0) + 3 * len(key) + len(value) + _ENTRY_BYTES
    for collection, size in sorted(spent.items()):
        if size > SHARE_BYTES:
            log.warning(
                "node %s: its contributions to shared collection %r take about %d bytes, past a node's share "
                "of %d: other nodes read those past it left out",
                node,
                collection,
                size,
                SHARE_BYTES,
                extra={"node": node, "collection": collection},
            )


def _resolver(bus: Bus, plan: ClientPlan, wanted: _Wanted) -> Resolver:
    """Resolves through the registry read, the node's collections from its collect keys as converged."""
    return Resolver(bus, wanted.registry, node=plan.node, verb_timeout=plan.verb_timeout, own_collect=wanted.collect)


def _placeholders(manifests: Manifests, *, only: set[str] | None = None) -> list[tuple[str, Placeholder]]:
    """Each module's placeholders (of the modules `only` names, if given)."""
    modules = manifests.modules.items()
    return [(m, p) for m, loaded in modules if only is None or m in only for p in loaded.manifest.placeholders()]


async def _world(
    memory: Memory, resolver: Resolver, wanted: _Wanted, folder: EnvFolder, placeholders: list[tuple[str, Placeholder]]
) -> World:
    """What every module resolves from this time: the stamps of the buckets read last time (or, the
    first time, of those the registry names), and the digests of the verbs' answers, asked at once."""
    stamped = buckets_of(memory.sources_read()) or resolver.buckets_read(placeholders)
    key = folder.key(create=bool(placeholders))
    stamps: dict[str, int] = {}
    verbs: dict[str, str] = {}

    async def read_stamps() -> None:
        stamps.update(await stamps_of(resolver.bus, resolver.node, stamped))

    async def ask_verbs() -> None:
        verbs.update(await verb_digests(resolver, wanted.registry, placeholders, key or b""))

    await all_of(read_stamps, ask_verbs)
    if key is None:
        return unknown_world(stamps, "no digest key in the env folder yet")
    return world_of(wanted.registry, stamps, wanted.collect, verbs)


def _decide(
    memory: Memory,
    world: World,
    *,
    manifests: Manifests,
    previous: Mapping[str, AppliedValue],
    folder: EnvFolder,
    report: Report,
) -> set[str]:
    """The modules to resolve: each one the memory cannot vouch for, with its verdict (in the
    report, and a debug line); the others keep their file and applied record as they are."""
    for module, loaded in sorted(manifests.modules.items()):
        refused = report.refused_modules.get(module)
        if refused is not None:
            report.verdicts[module] = Verdict(as_before=False, reason=refused)
            continue
        verdict = report.verdicts[module] = memory.verdict(loaded, world, previous.get(module), folder)
        how = "as before" if verdict.as_before else "resolved"
        log.debug("node %s: module %s %s: %s", report.node, module, how, verdict, extra={"node": report.node})
    return set(manifests.modules) - report.unchanged - set(report.refused_modules)


def _forced(report: Report, modules: set[str]) -> set[str]:
    """Modules resolved whatever the memory says: their rollout needs them (a claim, an abort)."""
    for module in modules:
        report.verdicts[module] = Verdict(as_before=False, reason="its rollout needs it looked at")
    return modules


async def _materialize(
    applying: Applying,
    resolver: Resolver,
    *,
    manifests: Manifests,
    previous: Mapping[str, AppliedValue],
    report: Report,
) -> None:
    """Each module resolved, written and its change action run (`materializing.action.apply`), or
    kept as it was; a held module pending with its file as it was."""
    folder, unchanged = applying.folder, report.unchanged
    for module, loaded in sorted(manifests.modules.items()):
        before = previous.get(module)
        if module in report.refused_modules:
            report.modules[module] = pending(folder, module, [report.refused_modules[module]], before)
        elif module in unchanged:
            report.modules[module] = ModuleReport(module, previous[module])
        else:
            report.modules[module] = await apply(applying, resolver, loaded, previous=before)
    for module, error in sorted(manifests.held.items()):
        report.modules[module] = held(folder, module, error, previous.get(module))


async def _record_applied(
    own: OwnKeys,
    report: Report,
    plan: ClientPlan,
    waits: WaitingWrites,
    *,
    stored: Sequence[KvItem],
    previous: Mapping[str, AppliedValue],
) -> None:
    """Each module's applied record converged, after its env file, over the records `stored` as
    the reconcile found them; then what this reconcile found refused, if anything, kept for
    `status` (`own`: refused writes), also when applied refused the records."""
    desired = _applied(own.scope.node, report, previous, stored)
    try:
        await own.write(buckets.APPLIED, desired, waits, report, owner=None)
    finally:
        record_refusals(plan.materialize, plan.node, report.refused)


def _remember(memory: Memory, world: World, manifests: Manifests, folder: EnvFolder, report: Report) -> None:
    """The memory told which modules are applied from what, and saved (only if that changed)."""
    applied = {
        module: manifests.modules[module]
        for module, done in report.modules.items()
        if module in manifests.modules and done.applied.state == "applied"
    }
    memory.record_applied(world, report.sources, applied, report.unchanged, folder)
    memory.save()


def _applied(
    node: str, report: Report, previous: Mapping[str, AppliedValue], current: Sequence[KvItem]
) -> dict[str, bytes]:
    """Each module's applied record, stamped with when its content last changed; an unchanged
    module's as it is stored."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    stored = {item.key: item.value for item in current if not item.deleted}
    desired, unchanged = {}, report.unchanged
    for module, done in report.modules.items():
        key = buckets.APPLIED.shape.build(node=node, module=module)
        if module in unchanged and key in stored:
            desired[key] = stored[key]
            continue
        stamped = _fitted(done.applied).stamped(previous.get(module), now)
        report.modules[module] = replace(done, applied=stamped)
        desired[key] = to_json(stamped)
    return desired


def _kept(
    current: Sequence[KvItem], parse: Callable[[str], dict[str, str]], field_name: str, held: set[str]
) -> dict[str, bytes]:
    """The current keys of held modules, unchanged."""
    kept = {}
    for item in current:
        if item.deleted:
            continue
        try:
            owner = parse(item.key)[field_name]
        except RegistryError:
            continue
        if owner in held:
            kept[item.key] = item.value
    return kept


def _applied_by_module(current: Sequence[KvItem]) -> dict[str, AppliedValue]:
    found = {}
    for item in current:
        if item.deleted:
            continue
        try:
            module = buckets.APPLIED.shape.parse(item.key)["module"]
            found[module] = AppliedValue.model_validate(read_json(item.value))
        except (RegistryError, ValidationError, JsonRefused):
            log.warning("ignored %s key %r: not an applied value", buckets.APPLIED.name, item.key)
    return found


def _fitted(applied: AppliedValue) -> AppliedValue:
    """The applied record, within the buckets' value limit whatever it holds."""
    size = len(to_json(applied))
    if size + _STAMP_BYTES <= MAX_VALUE_BYTES:
        return applied
    reason = f"the record was {size:,} bytes, over the {MAX_VALUE_BYTES:,} a value may be: its reasons are cut"
    return applied.model_copy(update={"reasons": (reason,)})
