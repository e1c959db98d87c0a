"""One reconcile: manifests in, needs, collect, env files and applied out.

In order: read the manifests; converge this node's needs (`<node>.<module>.<kind>.<name>`) and
contributions (`<node>.<collection>.<module>`); read the registry; resolve each module's
placeholders and materialize its env file, or leave the module pending with every reason and its
previous file as it was (never a partial file); run the change action of each module whose file
changed; converge `applied` (`<node>.<module>`: state, digest, reasons, action outcome); remove
the env files of modules no longer declared.

Every write goes through `NodeScope.converge`, so nothing changes when nothing differs: a second
reconcile makes zero KV writes and rewrites no file. A module whose manifest cannot be read but
whose name can be told is held: its keys and file stay as they were, its `applied` says why. The
module a file holds is the one it declared when last read (remembered in the materialize folder's
ledger), so corrupting `web.json` that declares `app` holds `app`, never removes it.

An applied record is bounded: at most `MAX_REASONS` reasons of at most `errors.REASON_CHARS`
characters each (then "... and N more"), and never more than `MAX_VALUE_BYTES` (the buckets'
value limit), so a module with thousands of pending placeholders is still recorded.

A reconcile that changes nothing costs little: the node's own keys are not listed when their
stamps say nothing moved since the last reconcile (`provisioner_client.remembered`, `own`), and a
module whose inputs are what they were (the registry, the stamps of the buckets it reads from, the
node's collections, the digests of the verbs' answers, its manifest: `provisioner_client.inputs`)
is not resolved again while its file on disk is still the one recorded. Needs and collect are
written (64 in flight) before the values are read, applied after the env files.

`reconcile` takes no lease: the CLI and watch mode hold the node's lease around it
(`provisioner_client.holding`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from pydantic import ValidationError

from provisioner_client import inputs, remembered
from provisioner_client.action import DEFAULT_ENVIRONMENT, action_environment, run_action
from provisioner_client.concurrently import all_of
from provisioner_client.envfile import EnvFolder, render
from provisioner_client.errors import ManifestError, MaterializeError, capped
from provisioner_client.inputs import World
from provisioner_client.manifest import MAX_VALUE_BYTES, LoadedManifest, Manifests, load_manifests
from provisioner_client.own import OwnKeys
from provisioner_client.remembered import Remembered
from provisioner_client.resolve import Pending, Registry, Resolver, Source, read_registry
from provisioner_client.scope import NodeScope
from registry.contract import (
    ActionRecord,
    AppliedValue,
    Bucket,
    JsonRefused,
    Placeholder,
    buckets,
    read_json,
    substitute,
    to_json,
)
from registry.errors import RegistryError
from registry.wire import Bus, Changes, KvItem

log = logging.getLogger(__name__)

MAX_REASONS = 20
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


@dataclass(frozen=True)
class ModuleReport:
    module: str
    applied: AppliedValue
    written: bool = False

    @property
    def action(self) -> ActionRecord | None:
        return self.applied.action


@dataclass
class Report:
    """What a reconcile found and did."""

    node: str
    modules: dict[str, ModuleReport] = field(default_factory=dict)
    manifest_errors: list[ManifestError] = field(default_factory=list)
    ledger_problems: tuple[str, ...] = ()
    removed: list[Path] = field(default_factory=list)
    writes: dict[str, Changes] = field(default_factory=dict)
    sources: set[Source] = field(default_factory=set)
    actions_run: list[str] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # the buckets whose node keys were listed, not known as remembered
    unchanged: set[str] = field(default_factory=set)  # the modules whose inputs were as before: not resolved
    write_seconds: dict[str, float] = field(default_factory=dict)  # how long each bucket's writes took

    @property
    def ok(self) -> bool:
        """Every module applied, every manifest read, every action that ran succeeded."""
        modules_ok = all(m.applied.state == "applied" for m in self.modules.values())
        actions = [self.modules[m].action for m in self.actions_run]
        return modules_ok and all(a is None or a.ok for a in actions) and not self.manifest_errors

    def summary(self) -> str:
        """A few readable lines: each module's state, file, reasons and change action."""
        lines = [f"manifest error: {error}" for error in self.manifest_errors]
        lines.extend(f"ledger: {problem}" for problem in self.ledger_problems)
        for name, module in sorted(self.modules.items()):
            applied = module.applied
            where = f" -> {applied.file}" if applied.file else ""
            lines.append(f"{name}: {applied.state}{where}{' (written)' if module.written else ''}")
            lines.extend(f"  reason: {reason}" for reason in applied.reasons)
            action = module.action
            if action is not None and name in self.actions_run:
                lines.append(f"  change action: {action.outcome}")
        lines.extend(f"removed {path}" for path in self.removed)
        return "\n".join(lines)


async def reconcile(bus: Bus, plan: ClientPlan) -> Report:
    if not plan.manifests.is_dir():  # never read a missing folder as "no modules": that would remove them all
        raise ManifestError(plan.manifests, "the manifests folder does not exist")
    folder = EnvFolder(plan.materialize)
    ledger = folder.read_ledger()
    for problem in ledger.problems:
        log.error("%s: %s", folder.folder, problem, extra={"node": plan.node})
    manifests = load_manifests(plan.manifests, ledger.manifests)
    for error in manifests.errors:
        log.error("%s", error)
    folder.remember(manifests.declared())
    report = Report(plan.node, manifest_errors=list(manifests.errors), ledger_problems=ledger.problems)
    own = OwnKeys(bus, NodeScope(plan.node), remembered.read(plan.materialize, plan.node))
    needs, collect = _needs(plan.node, manifests), _collect(plan.node, manifests)
    registry = await _read_state(own, needs=needs, collect=collect, held=bool(manifests.held))
    needs.update(_kept(own.items(buckets.NEEDS), buckets.NEEDS.shape.parse, "module", set(manifests.held)))
    collect.update(_kept(own.items(buckets.COLLECT), buckets.COLLECT.shape.parse, "contributor", set(manifests.held)))
    resolver = Resolver(bus, registry, node=plan.node, verb_timeout=plan.verb_timeout, own_collect=collect)
    wanted = [(m, p) for m, loaded in manifests.modules.items() for p in loaded.manifest.placeholders()]
    await all_of(  # needs and collect are written before applied, below
        partial(_converge, own, report, buckets.NEEDS, needs),
        partial(_converge, own, report, buckets.COLLECT, collect),
    )
    previous = _applied_by_module(own.items(buckets.APPLIED))
    read_before = _remembered_sources(own.memory)
    world = await _world(read_before, resolver, registry, wanted, folder, collect=collect)
    unchanged = report.unchanged = _unchanged(manifests, previous, world, own.memory, folder)
    await resolver.prefetch([(m, p) for m, p in wanted if m not in unchanged])
    for module, loaded in sorted(manifests.modules.items()):
        if module in unchanged:
            report.modules[module] = ModuleReport(module, previous[module])
            continue
        report.modules[module] = await _apply(resolver, folder, plan, loaded, previous=previous.get(module),
                                              report=report)  # fmt: skip
    for module, error in sorted(manifests.held.items()):
        report.modules[module] = _held(folder, module, error, previous.get(module))
    await _converge(own, report, buckets.APPLIED, _applied(plan.node, report, previous, own.items(buckets.APPLIED)))
    report.sources = resolver.sources | (read_before if unchanged else set())
    _remember_inputs(own, world, report, manifests, folder)
    if own.changed:
        remembered.write(plan.materialize, own.memory)
    report.removed = folder.remove_except(set(report.modules))
    report.listed = {name for name, found in own.found.items() if found.listed}
    return report


async def _world(
    read_before: set[Source], resolver: Resolver, registry: Registry, wanted: Sequence[tuple[str, Placeholder]],
    folder: EnvFolder, *, collect: Mapping[str, bytes],
) -> World:  # fmt: skip
    """What every module resolves from this time: the stamps of the buckets read last time (or, the
    first time, of those the registry names), and the digests of the verbs' answers, asked at once."""
    stamped = inputs.buckets_of(read_before) or resolver.buckets_read(wanted)
    key = folder.key(create=bool(wanted))
    stamps: dict[str, int] = {}
    verbs: dict[str, str] = {}

    async def read_stamps() -> None:
        stamps.update(await inputs.stamps_of(resolver.bus, resolver.node, stamped))

    async def ask_verbs() -> None:
        verbs.update(await inputs.verb_digests(resolver, registry, wanted, key or b""))

    await all_of(read_stamps, ask_verbs)
    if key is None:
        return inputs.World(None, stamps)
    return inputs.world_of(registry, stamps, remembered.digest_of(collect), verbs)


def _unchanged(
    manifests: Manifests, previous: Mapping[str, AppliedValue], world: World, memory: Remembered, folder: EnvFolder
) -> set[str]:
    """The modules whose inputs are what they were when their file was written, and whose file is
    still that one: neither resolved nor written again."""
    found = set()
    for module, loaded in manifests.modules.items():
        before = previous.get(module)
        now = world.inputs(module, loaded.digest, str(folder.path_of(module)))
        if now is None or before is None or not memory.resolved(module, now):
            continue
        if before.state != "applied" or before.digest is None or not folder.intact(module, before.digest):
            continue
        action = before.action
        if loaded.manifest.on_change is not None and (action is None or action.digest != before.digest):
            continue
        found.add(module)
    return found


def _remembered_sources(memory: Remembered) -> set[Source]:
    return {source for source in map(inputs.source_of, memory.sources) if source is not None}


def _remember_inputs(own: OwnKeys, world: World, report: Report, manifests: Manifests, folder: EnvFolder) -> None:
    """Keeps the world, the places read and each applied module's inputs (with when it was last
    resolved from them), when the world's stamps cover every place read; else forgets them (the
    next reconcile resolves every module)."""
    memory = own.memory
    if world.digest is not None and world.digest == memory.world and report.unchanged == memory.modules.keys():
        return  # every module as it was, from the world as it was: nothing new to keep
    modules: dict[str, tuple[str, float]] = {}
    vouched = world.digest is not None and world.covers(report.sources, own.scope.node)
    now = time.time()
    for module, done in report.modules.items():
        loaded = manifests.modules.get(module)
        inputs_now = world.inputs(module, loaded.digest, str(folder.path_of(module))) if loaded else None
        if not vouched or inputs_now is None or done.applied.state != "applied":
            continue
        before = own.memory.modules.get(module)
        kept = module in report.unchanged and before is not None
        modules[module] = before if kept and before is not None else (inputs_now, now)
    sources = sorted(inputs.document_of(source) for source in report.sources)
    own.changed |= own.memory.resolved_in(world.digest if vouched else None, sources, modules)


async def _read_state(own: OwnKeys, *, needs: dict[str, bytes], collect: dict[str, bytes], held: bool) -> Registry:
    """The node's keys of needs, collect and applied (as remembered where nothing moved, else
    listed), and the registry: asked all at once. With modules held, needs and collect are listed:
    their keys are kept as they are."""
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
    return registry


async def _converge(own: OwnKeys, report: Report, bucket: Bucket, desired: Mapping[str, bytes]) -> None:
    started = time.perf_counter()
    changes = await own.converge(bucket, desired)
    report.writes[bucket.name] = changes
    if changes:
        report.write_seconds[bucket.name] = time.perf_counter() - started
        log.info("node %s: %s %s", own.scope.node, bucket.name, changes.summary(),
                 extra={"node": own.scope.node, "bucket": bucket.name})  # fmt: skip


def _applied(
    node: str, report: Report, previous: Mapping[str, AppliedValue], current: Sequence[KvItem]
) -> dict[str, bytes]:
    """Each module's applied record, stamped with when its content last changed; an unchanged
    module's as it is stored."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    stored = {item.key: item.value for item in current if not item.deleted}
    desired = {}
    for module, done in report.modules.items():
        key = buckets.APPLIED.shape.build(node=node, module=module)
        if module in report.unchanged and key in stored:
            desired[key] = stored[key]
            continue
        stamped = _fitted(done.applied).stamped(previous.get(module), now)
        report.modules[module] = replace(done, applied=stamped)
        desired[key] = to_json(stamped)
    return desired


def _needs(node: str, manifests: Manifests) -> dict[str, bytes]:
    """The needs of the modules read (a held module's are kept as they are, from the listing)."""
    return {key: value for loaded in manifests.modules.values() for key, value in loaded.needs(node).items()}


def _collect(node: str, manifests: Manifests) -> dict[str, bytes]:
    """The contributions of the modules read (a held module's are kept as they are, from the listing)."""
    return {key: value for loaded in manifests.modules.values() for key, value in loaded.contributions(node).items()}


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


async def _apply(
    resolver: Resolver, folder: EnvFolder, plan: ClientPlan, loaded: LoadedManifest, *,
    previous: AppliedValue | None, report: Report,
) -> ModuleReport:  # fmt: skip
    module, manifest = loaded.module, loaded.manifest
    content = await rendered(resolver, loaded)
    old_action = previous.action if previous else None
    if isinstance(content, list):
        return _pending(folder, module, content, previous)
    try:
        done = folder.materialize(module, content)
    except MaterializeError as err:
        return _pending(folder, module, [str(err)], previous)
    action = old_action
    if manifest.on_change is not None and (old_action is None or old_action.digest != done.digest):
        env = action_environment(plan.action_env, node=plan.node, module=module, env_file=done.path)
        action = await run_action(module, manifest.on_change, done.digest, env=env)
        report.actions_run.append(module)
    applied = AppliedValue(state="applied", digest=done.digest, file=str(done.path), action=action)
    return ModuleReport(module, applied, written=done.written)


async def rendered(resolver: Resolver, loaded: LoadedManifest) -> bytes | list[str]:
    """The module's env file as its values render it, or why it cannot be (each pending
    placeholder and its reason); the values are dropped here. Reconcile and the drift watch's
    `put_back` both render through it."""
    module, manifest = loaded.module, loaded.manifest
    values: dict[str, str] = {}
    env: dict[str, str] = {}
    reasons = []
    try:
        for placeholder in manifest.placeholders():
            try:
                values[str(placeholder)] = await resolver.resolve(module, placeholder)
            except Pending as pending:
                reasons.append(f"{placeholder}: {pending.reason}")
        if reasons:
            return reasons
        env = {name: substitute(text, lambda p: values[str(p)]) for name, text in manifest.env.items()}
        return render(module, env)
    finally:
        values.clear()
        env.clear()


def _pending(folder: EnvFolder, module: str, reasons: list[str], previous: AppliedValue | None) -> ModuleReport:
    reasons = bounded_reasons(reasons)
    unchanged = previous is not None and previous.reasons == tuple(reasons)
    log.log(logging.DEBUG if unchanged else logging.WARNING, "module %s is pending: %s", module,
            capped("; ".join(reasons), 2000))  # fmt: skip
    action = previous.action if previous else None
    on_disk = folder.digest_on_disk(module)
    file = str(folder.path_of(module)) if on_disk else None
    return ModuleReport(module, AppliedValue(state="pending", digest=on_disk, file=file, reasons=tuple(reasons),
                                             action=action))  # fmt: skip


def _held(folder: EnvFolder, module: str, error: ManifestError, previous: AppliedValue | None) -> ModuleReport:
    return _pending(folder, module, [str(error)], previous)


def bounded_reasons(reasons: Sequence[str], *, count: int = MAX_REASONS) -> list[str]:
    """At most `count` reasons, each capped, then how many more there were."""
    kept = [capped(reason) for reason in reasons[:count]]
    return kept + ([f"... and {len(reasons) - count} more"] if len(reasons) > count else [])


def _fitted(applied: AppliedValue) -> AppliedValue:
    """The applied record, within the buckets' value limit whatever it holds."""
    size = len(to_json(applied))
    if size + _STAMP_BYTES <= MAX_VALUE_BYTES:
        return applied
    reason = f"the record was {size:,} bytes, over the {MAX_VALUE_BYTES:,} a value may be: its reasons are cut"
    return applied.model_copy(update={"reasons": (reason,)})
