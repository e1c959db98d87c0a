"""The client's incremental memory: what the last reconcile left, so that this one skips what has not moved.

Listing the node's own keys of needs, collect and applied through the verb, and resolving every
module, are the largest costs of a reconcile that changes nothing. So each reconcile remembers,
per bucket of its own, the *stamp* of the node's keys (the stream sequence of the latest entry
under `<node>.>`: `NodeScope.stamp`) and a digest of what they held then (for applied, the records
themselves with their revisions: they say what was applied before); and, per applied module, the
digest of the inputs it was resolved from (the world, its manifest,
its env file's path, below), with the world's parts, so that a module resolved again says which part moved.

A reconcile loads the memory once (`Memory.load`), asks it what may be skipped (`keys`: may the
node's keys of a bucket be taken as remembered instead of listed; `verdict`: may a module be left
unresolved), each answer a `Verdict` whose reason reads in a debug log line ("stamp of needs
moved", "manifest digest changed", "memory older than 10 min", "first run"), tells it what it
converged and applied (`keep_keys`, `record_applied`), and saves it once (`save`), only when what is
remembered changed: an unchanged reconcile writes nothing. Nothing else reads or writes the file.

It is kept in the materialize folder (`FILE`, the node's record `state.records.MEMORY`, mode 0600,
written, read and validated by the node's state; a temporary file a killed client left is removed
at the next load; something other than a regular file in its place is said and ignored) and holds stamps,
digests and applied records, never a value. It is trusted only as far as the stamps agree, and for
at most `TRUSTED_FOR` (then the keys are listed and the modules resolved again whatever the stamps
say: a key removed without a new entry, by an administrator's purge of the stream, leaves the stamp
alone). It relies on the node's keys having one writer at a time, the holder of the node's lease.

The inputs, what a module's env file is made of, as digests: a module whose inputs are what they were when
its file was last written is not resolved again; its file is checked by its digest on disk and its
applied record kept.

The *world* a reconcile resolves in is one digest of: the registry's entries; the stamp of every
bucket the modules read values from (one direct get each: of `<node>.>` for a node-keyed bucket,
of `>` for a mesh-wide one, the latest revision under it, which moves with any write there); the
node's collect keys as converged; and the keyed digest (`state.records.digest`, the node's own key) of
every value a verb answers (and of every collection shared across the mesh, which the verb lists),
asked anyway once per name, digested and dropped: a secret is compared by digest, never kept. A
module's inputs are the world, its manifest file's bytes and its env file's path. The stamps are
read before any value, so a value changed meanwhile only moves the next stamp.

The world is vouched for only when every place the modules read values from lies under a stamp read
before them; otherwise (a bucket read for the first time, a key outside the node's own in a node-keyed
bucket) nothing is remembered and the next reconcile resolves every module again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import anyio

from provisioner_client.errors import MaterializeError
from provisioner_client.resolving.manifest import LoadedManifest
from provisioner_client.resolving.resolve import Pending, Registry, Resolver, Source
from provisioner_client.resolving.scope import LISTED_AS
from provisioner_client.state import records
from provisioner_client.state.records import BucketDocument, MemoryDocument, NotARecord
from registry.contract import AppliedValue, Bucket, Placeholder, VerbAnswer, buckets, shape_of, to_json, under
from registry.errors import BusError, NoResponders, RegistryError
from registry.wire import Bus, KvItem, get_direct

_OWN = {buckets.REGISTRY.name, buckets.COLLECT.name}
_FORMAT = 1  # of what a module's env file is made of: a client that renders otherwise counts it up


def node_keyed(bucket: Bucket) -> bool:
    return bucket.shape.fields[:1] == ("node",)


def stamp_filter(bucket: Bucket, node: str) -> str:
    """What one stamp of `bucket` covers: the node's keys of a node-keyed bucket, else all of it."""
    return under(node) if node_keyed(bucket) else ">"


@dataclass(frozen=True)
class World:
    """The digest of what every module resolves from (None when it cannot be vouched for, and then
    `unknown` says why), the stamps it was made of by bucket name, and the digest of each of its
    other parts (`registry`, `collect`, `verbs`): what a memory keeps to say which of them moved."""

    digest: str | None
    stamps: Mapping[str, int]
    parts: Mapping[str, str] = field(default_factory=dict)
    unknown: str = ""

    def inputs(self, module: str, manifest_digest: str, env_file: str) -> str | None:
        """The digest of one module's inputs; None when the world is not known."""
        if self.digest is None:
            return None
        return hashlib.sha256(f"{self.digest}\0{module}\0{manifest_digest}\0{env_file}".encode()).hexdigest()

    def covers(self, sources: Iterable[Source], node: str) -> bool:
        """Whether every place in `sources` lies under a stamp of this world."""
        own = under(node)[:-1]
        for source in sources:
            if source.bucket.name in _OWN:
                continue
            if source.bucket.name not in self.stamps:
                return False
            if node_keyed(source.bucket) and not source.filter.startswith(own):
                return False
        return True


UNREAD = -1  # a stamp that could not be read: the world is then not vouched for
ABSENT = -2  # nobody answers: no such bucket (or no direct get), a state as stable as any stamp


async def stamps_of(bus: Bus, node: str, stamped: Iterable[Bucket]) -> dict[str, int]:
    """Each bucket's stamp (0: nothing under it), all asked at once."""
    found: dict[str, int] = {}

    async def stamp(bucket: Bucket) -> None:
        try:
            item = await get_direct(bus, bucket, stamp_filter(bucket, node))
        except NoResponders:
            found[bucket.name] = ABSENT
            return
        except BusError:
            found[bucket.name] = UNREAD
            return
        found[bucket.name] = item.revision if item is not None else 0

    async with anyio.create_task_group() as tasks:
        for bucket in {b.name: b for b in stamped if b.name not in _OWN}.values():
            tasks.start_soon(stamp, bucket)
    return found


async def verb_digests(
    resolver: Resolver, registry: Registry, wanted: Sequence[tuple[str, Placeholder]], key: bytes
) -> dict[str, str]:
    """The keyed digest of each value a verb answers for `wanted` (or of why it could not), by
    verb, kind and name: asked at once, each once; the values are dropped here. A collection
    shared across the mesh is listed by the verb too, and digested alike."""
    asked = [
        (m, p) for m, p in wanted if isinstance(_answer_of(registry, p), VerbAnswer) or resolver.reads_shared(m, p)
    ]
    await resolver.prefetch(asked)
    digests: dict[str, str] = {}
    for module, placeholder in asked:
        answer = _answer_of(registry, placeholder)
        name = f"{getattr(answer, 'subject', '')}\0{placeholder}"
        if name in digests:
            continue
        try:
            digests[name] = _keyed(key, "value\0" + await resolver.resolve(module, placeholder))
        except Pending as pending:
            digests[name] = _keyed(key, "pending\0" + pending.reason)
    return digests


def world_of(
    registry: Registry, stamps: Mapping[str, int], collect: Mapping[str, bytes], verbs: Mapping[str, str]
) -> World:
    """The world from its parts; not vouched for when a stamp could not be read."""
    unread = sorted(bucket for bucket, stamp in stamps.items() if stamp == UNREAD)
    if unread:
        return World(None, stamps, unknown=f"stamp of {', '.join(unread)} not read")
    entries = {kind: to_json(entry).decode() for kind, entry in sorted(registry.entries.items())}
    document = {
        "format": _FORMAT,
        "registry": entries,
        "problems": dict(sorted(registry.problems.items())),
        "stamps": dict(sorted(stamps.items())),
        "collect": digest_of(collect),
        "verbs": dict(sorted(verbs.items())),
    }
    parts = {
        "registry": _digest({"registry": document["registry"], "problems": document["problems"]}),
        "collect": str(document["collect"]),
        "verbs": _digest(document["verbs"]),
    }
    return World(_digest(document), stamps, parts)


def unknown_world(stamps: Mapping[str, int], why: str) -> World:
    return World(None, stamps, unknown=why)


def digest_of(desired: Mapping[str, bytes]) -> str:
    """One digest of a bucket's keys and values, whatever their order."""
    hasher = hashlib.sha256()
    for key in sorted(desired):
        value = desired[key]
        hasher.update(f"{len(key)}:{key}{len(value)}:".encode())
        hasher.update(value)
    return hasher.hexdigest()


def buckets_of(sources: Iterable[Source]) -> list[Bucket]:
    return [s.bucket for s in sources if s.bucket.name not in _OWN]


def _answer_of(registry: Registry, placeholder: Placeholder) -> object:
    entry = registry.entries.get(placeholder.kind)
    return entry.answer if entry is not None else None


def _digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _keyed(key: bytes, text: str) -> str:
    return records.digest(text.encode(), key)


log = logging.getLogger(__name__)

FILE = records.MEMORY.name
TRUSTED_FOR = 600.0  # seconds a remembered state is used before the keys are listed again whatever it says
_VERSION = 1
_KEEPS_ITEMS = buckets.APPLIED.name  # its records say what was applied before: kept, not only their digest
_PARTS = {
    "registry": "the registry changed",
    "collect": "the node's collections changed",
    "verbs": "a verb's answer changed",
}


class EnvFiles(Protocol):
    """Where a module's env file is, and whether it is still the one of a digest
    (`materializing.envfile.EnvFolder`)."""

    def path_of(self, module: str) -> Path: ...

    def intact(self, module: str, wanted: str) -> bool: ...


@dataclass(frozen=True)
class Verdict:
    """Whether what was remembered still holds (`as_before`: the listing or the resolving is
    skipped), and why, in words an operator reads in a debug log line."""

    as_before: bool
    reason: str

    def __str__(self) -> str:
        return self.reason


def _again(reason: str) -> Verdict:
    return Verdict(as_before=False, reason=reason)


@dataclass(frozen=True)
class BucketState:
    """A bucket's node keys at `stamp`: their digest, and (for applied) the entries themselves, as
    they have been known since the listing at `listed_at` (seconds since the epoch)."""

    stamp: int
    digest: str
    listed_at: float
    items: tuple[KvItem, ...] | None = None


@dataclass(frozen=True)
class ModuleState:
    """The digest of the inputs an applied module was resolved from, when, and its manifest's digest
    then (None in a memory written before it was kept)."""

    inputs: str
    at: float
    manifest: str | None = None


@dataclass
class Memory:
    """The node's incremental memory for one reconcile. `folder` None: kept nowhere (a benchmark's
    node), so it remembers nothing beyond this reconcile. `missing` says why nothing was loaded
    ("first run", "memory unreadable", ...); empty when the memory was read."""

    node: str
    folder: Path | None = None
    buckets: dict[str, BucketState] = field(default_factory=dict)
    world: str | None = None
    world_parts: dict[str, object] = field(default_factory=dict)
    sources: list[list[str]] = field(default_factory=list)
    modules: dict[str, ModuleState] = field(default_factory=dict)
    missing: str = "first run"
    _as_loaded: MemoryDocument | None = field(default=None, init=False, repr=False, compare=False)
    _sources_read: frozenset[Source] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, folder: Path, node: str) -> Memory:
        """The memory `node`'s last reconcile left in `folder`; empty (saying why) when there is
        none, it is another node's or it cannot be read: then everything is listed and resolved."""
        _remove_leftovers(folder, node)
        memory = _read(folder, node)
        memory._as_loaded = memory._document()
        return memory

    def distrust(self, reason: str) -> None:
        """Nothing remembered is vouched for in this reconcile (`reason` says why): every key listed,
        every module resolved. A server restarted from an earlier store and written to again holds
        other content at the very sequences remembered, so after a reconnect an equal stamp proves
        nothing."""
        self.buckets, self.world, self.world_parts, self.modules = {}, None, {}, {}
        self.missing = reason

    def save(self) -> bool:
        """Keeps the memory for the next reconcile when it changed; whether it was written. A failure
        to write only costs the next reconcile a listing."""
        document = self._document()
        if self.folder is None or document == self._as_loaded:
            return False
        self._as_loaded = document
        return _write(self.folder, self.node, document)

    def keys(self, bucket: str, stamp: int, wanted: Mapping[str, bytes] | None) -> Verdict:
        """Whether the node's keys of `bucket`, at `stamp` (-1: not read), are as remembered and need
        no listing: for applied, by their stamp alone (their records are remembered); for needs and
        collect, by their stamp and `wanted` (None, with modules held: they are listed to be kept)."""
        name = LISTED_AS.get(bucket, bucket)
        known = self.buckets.get(bucket)
        if known is None:
            return _again(self._unknown(self.buckets, f"{name} not remembered"))
        moved = _stamp_moved(known, stamp, name)
        if moved is not None:
            return _again(moved)
        if known.items is not None:
            return Verdict(as_before=True, reason=f"stamp of {name} as remembered")
        if wanted is None:
            return _again(f"modules held: the {name} keys are listed to keep theirs")
        if digest_of(wanted) != known.digest:
            return _again(f"the {name} wanted differ from those remembered")
        return Verdict(as_before=True, reason=f"stamp of {name} and what is wanted there as remembered")

    def went_back(self, bucket: str, stamp: int) -> int | None:
        """The remembered stamp of the node's keys of `bucket`, when `stamp` (read now) is below it:
        the bus lost writes it had acknowledged. None otherwise (or `stamp` not read)."""
        known = self.buckets.get(bucket)
        return known.stamp if known is not None and 0 <= stamp < known.stamp else None

    def items_of(self, bucket: str) -> list[KvItem] | None:
        """The remembered entries of a bucket that keeps them (applied); None for the others."""
        known = self.buckets.get(bucket)
        return None if known is None or known.items is None else list(known.items)

    def converged(
        self,
        bucket: str,
        stamp: int,
        current: Iterable[KvItem],
        desired: Mapping[str, bytes],
        written: Mapping[str, int],
        *,
        listed: bool,
    ) -> BucketState | None:
        """What the node's keys of `bucket` hold once `desired` is converged over `current` (found at
        `stamp`), with the revisions `written`; None when that cannot be vouched for (the stamp was
        not read, or the listing itself went past it: something wrote meanwhile)."""
        if stamp < 0:
            return None
        present = {item.key: item for item in current if not item.deleted}
        if any(item.revision > stamp for item in present.values()):
            return None
        items = _items_after(present, desired, written) if bucket == _KEEPS_ITEMS else None
        if bucket == _KEEPS_ITEMS and items is None:
            return None
        known = self.buckets.get(bucket)
        state = BucketState(max(written.values(), default=stamp), digest_of(desired), time.time(), items)
        if known is not None and _trusted(known.listed_at) and replace(state, listed_at=known.listed_at) == known:
            return known  # listed again (a held module lists every time) and found as remembered: nothing to save
        return state if listed or known is None else replace(state, listed_at=known.listed_at)

    def keep_keys(self, bucket: str, state: BucketState | None) -> None:
        """Remembers the node's keys of `bucket` as `state`; None forgets them (they are listed next time)."""
        if state is None:
            self.buckets.pop(bucket, None)
        else:
            self.buckets[bucket] = state

    def sources_read(self) -> frozenset[Source]:
        """The places the modules read values from last time, as remembered (parsed once)."""
        if self._sources_read is None:
            self._sources_read = frozenset(source for source in map(_source_of, self.sources) if source is not None)
        return self._sources_read

    def verdict(self, loaded: LoadedManifest, world: World, applied: AppliedValue | None, folder: EnvFiles) -> Verdict:
        """Whether a module may be left unresolved: it was applied (`applied`) from the inputs it has
        now, less than `TRUSTED_FOR` ago, and its env file is still that one."""
        if applied is None or applied.state != "applied" or applied.digest is None:
            return _again(
                self._unknown(self.modules, "no applied record" if applied is None else f"{applied.state} last time")
            )
        if world.digest is None:
            return _again(world.unknown)
        why = self._inputs_moved(loaded, world, folder) or _file_moved(loaded, applied, applied.digest, folder)
        return _again(why) if why else Verdict(as_before=True, reason="inputs and env file as remembered")

    def record_applied(
        self,
        world: World,
        sources: set[Source],
        applied: Mapping[str, LoadedManifest],
        spared: set[str],
        folder: EnvFiles,
    ) -> None:
        """Remembers the world, the places read and each module `applied` now with its inputs (when
        it was last resolved from them: now, unless it was `spared`), when the world's stamps cover
        every place read; else forgets them (the next reconcile resolves every module)."""
        if world.digest is not None and world.digest == self.world and spared == self.modules.keys():
            return  # every module as it was, from the world as it was: nothing new to keep
        vouched = world.digest is not None and world.covers(sources, self.node)
        now = time.time()
        modules = {}
        for module, loaded in applied.items():
            inputs = world.inputs(module, loaded.digest, str(folder.path_of(module)))
            if not vouched or inputs is None:
                continue
            before = self.modules.get(module)
            kept = before if module in spared else None
            modules[module] = kept or ModuleState(inputs, now, loaded.digest)
        self.world = world.digest if vouched else None
        self.world_parts = {**world.parts, "stamps": dict(world.stamps)} if vouched else {}
        self.sources = sorted(_document_of(source) for source in sources)
        self._sources_read = None
        self.modules = modules

    def _inputs_moved(self, loaded: LoadedManifest, world: World, folder: EnvFiles) -> str | None:
        """Why the module's inputs are not the remembered ones, if they are not."""
        module = loaded.module
        known = self.modules.get(module)
        if known is None:
            return self._unknown(self.modules, "not remembered as resolved")
        if not _trusted(known.at):
            return _too_old(known.at)
        if known.inputs == world.inputs(module, loaded.digest, str(folder.path_of(module))):
            return None
        return self._what_moved(known, loaded, world)

    def _unknown(self, remembered: Mapping[str, object], otherwise: str) -> str:
        """Why nothing was loaded, when nothing of the kind is remembered; else `otherwise`."""
        return self.missing if self.missing and not remembered else otherwise

    def _what_moved(self, known: ModuleState, loaded: LoadedManifest, world: World) -> str:
        """Which of a module's inputs moved, as far as the memory tells."""
        moved = []
        if known.manifest is not None and known.manifest != loaded.digest:
            moved.append("manifest digest changed")
        before = self.world_parts
        stamps = before.get("stamps")
        if isinstance(stamps, dict):
            for bucket in sorted({*stamps, *world.stamps}):
                if stamps.get(bucket) != world.stamps.get(bucket):
                    moved.append(f"stamp of {bucket} moved")
        moved.extend(says for part, says in _PARTS.items() if part in before and before[part] != world.parts.get(part))
        return "; ".join(moved) or "inputs changed"

    def _document(self) -> MemoryDocument:
        return MemoryDocument.model_validate(
            {
                "version": _VERSION,
                "node": self.node,
                "buckets": {name: _bucket_document(state) for name, state in sorted(self.buckets.items())},
                "world": self.world,
                "world_parts": self.world_parts,
                "sources": sorted(self.sources),
                "modules": {module: _module_document(state) for module, state in sorted(self.modules.items())},
            }
        )


def _stamp_moved(known: BucketState, stamp: int, name: str) -> str | None:
    if not _trusted(known.listed_at):
        return _too_old(known.listed_at)
    if stamp == known.stamp:
        return None
    if stamp < 0:
        return f"stamp of {name} not read"
    return f"stamp of {name} went back: the bus lost writes" if stamp < known.stamp else f"stamp of {name} moved"


def _file_moved(loaded: LoadedManifest, applied: AppliedValue, digest: str, folder: EnvFiles) -> str | None:
    """Why the module's env file or change action is not as applied, if it is not."""
    if not folder.intact(loaded.module, digest):
        return "env file on disk is not the one applied"
    action = applied.action
    if loaded.manifest.on_change is not None and (action is None or action.digest != digest):
        return "change action not run on this file"
    return None


def _trusted(since: float) -> bool:
    return 0 <= time.time() - since <= TRUSTED_FOR


def _too_old(since: float) -> str:
    if time.time() < since:
        return "memory dated in the future (the clock moved back)"
    return f"memory older than {TRUSTED_FOR / 60:g} min"


def _items_after(
    present: Mapping[str, KvItem], desired: Mapping[str, bytes], written: Mapping[str, int]
) -> tuple[KvItem, ...] | None:
    """The entries `desired` leaves, with their revisions; None when one's revision is not known
    (found holding the value without being listed)."""
    items = []
    for key, value in sorted(desired.items()):
        revision = written.get(key) or (present[key].revision if key in present else 0)
        if not revision:
            return None
        items.append(KvItem(key, value, revision))
    return tuple(items)


def _read(folder: Path, node: str) -> Memory:
    try:
        found = records.MEMORY.read(folder)
    except NotARecord:
        log.warning(
            "%s: ignored, not a remembered state; the node's keys are listed", folder / FILE, extra={"node": node}
        )
        return Memory(node, folder, missing="memory unreadable (not a remembered state)")
    except MaterializeError as err:
        log.warning("%s; ignored: the node's keys are listed", err, extra={"node": node})
        return Memory(node, folder, missing=f"memory unreadable ({err.reason})")
    return Memory(node, folder) if found is None else _parsed(found, folder, node)


def remembered_stamps(folder: Path, node: str) -> dict[str, int]:
    """The stamp of the node's keys of each bucket, as its last reconcile kept them on disk: none
    when there is no memory of this node to read (the next reconcile says why)."""
    try:
        found = records.MEMORY.read(folder)
    except MaterializeError:
        return {}
    if found is None or found.version != _VERSION or found.node != node:
        return {}
    return {name: state.stamp for name, state in found.buckets.items()}


def _parsed(document: MemoryDocument, folder: Path, node: str) -> Memory:
    if document.version != _VERSION:
        return Memory(node, folder, missing="memory of another version")
    if document.node != node:
        return Memory(node, folder, missing="memory of another node")
    return Memory(
        node,
        folder,
        buckets={name: _bucket_state(state) for name, state in document.buckets.items()},
        world=document.world,
        world_parts=dict(document.world_parts),
        sources=[list(source) for source in document.sources],
        modules={module: ModuleState(*state) for module, state in document.modules.items()},
        missing="",
    )


def _bucket_state(state: BucketDocument) -> BucketState:
    items = state.items
    return BucketState(
        state.stamp,
        state.digest,
        state.listed_at,
        None if items is None else tuple(KvItem(key, value.encode(), revision) for key, revision, value in items),
    )


def _bucket_document(state: BucketState) -> dict[str, object]:
    items = None if state.items is None else [[i.key, i.revision, i.value.decode()] for i in state.items]
    return {"stamp": state.stamp, "digest": state.digest, "listed_at": state.listed_at, "items": items}


def _module_document(state: ModuleState) -> list[object]:
    return [state.inputs, state.at] if state.manifest is None else [state.inputs, state.at, state.manifest]


def _write(folder: Path, node: str, document: MemoryDocument) -> bool:
    """Writes `document` atomically, mode 0600; on failure removes the file (the next reconcile lists)."""
    try:
        records.MEMORY.write(folder, document)
    except MaterializeError as err:
        log.warning("%s; the next reconcile lists the node's keys", err, extra={"node": node})
        _forget(folder)
        return False
    return True


def _forget(folder: Path) -> None:
    """The state file removed, so that the memory it held is not trusted after a failed write."""
    try:
        records.MEMORY.remove(folder)
    except MaterializeError as err:  # a folder in its place: said by the failed write, never read as a memory
        log.debug("%s", err)


def _remove_leftovers(folder: Path, node: str) -> None:
    """The temporary files a killed client left of the node's records (the node's lease is held:
    none is being written); the env files' are the env folder's to remove."""
    try:
        removed = records.remove_leftovers(folder, is_env_file=lambda _: False)
    except MaterializeError as err:
        log.warning("%s", err, extra={"node": node})
        return
    for path in removed:
        log.info("removed %s: a temporary file a stopped client left", path, extra={"node": node})


def _source_of(document: object) -> Source | None:
    """A source as `_document_of` wrote it, or None."""
    if not isinstance(document, list) or len(document) != 3 or not all(isinstance(p, str) for p in document):
        return None
    return _parsed_source(*document)


# A watching client reads the same few hundred sources at every reconcile: each is parsed once.
@functools.lru_cache(maxsize=4096)
def _parsed_source(name: str, shape: str, subject_filter: str) -> Source | None:
    try:
        return Source(Bucket(name, _shape_of(shape)), subject_filter)
    except RegistryError:
        return None


def _document_of(source: Source) -> list[str]:
    return [source.bucket.name, source.bucket.shape.text, source.filter]


_shape_of = functools.lru_cache(maxsize=256)(shape_of)
