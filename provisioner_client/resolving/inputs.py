"""What a module's env file is made of, as digests: a module whose inputs are what they were when
its file was last written is not resolved again; its file is checked by its digest on disk and its
applied record kept.

The *world* a reconcile resolves in is one digest of: the registry's entries; the stamp of every
bucket the modules read values from (one direct get each: of `<node>.>` for a node-keyed bucket,
of `>` for a mesh-wide one, the latest revision under it, which moves with any write there); the
node's collect keys as converged; and the keyed digest (`state.key.digest`, the node's own key) of
every value a verb answers (and of every collection shared across the mesh, which the verb lists),
asked anyway once per name, digested and dropped: a secret is compared by digest, never kept. A
module's inputs are the world, its manifest file's bytes and its env file's path. The stamps are
read before any value, so a value changed meanwhile only moves the next stamp.

The world is vouched for only when every place the modules read values from lies under a stamp read
before them; otherwise (a bucket read for the first time, a key outside the node's own in a node-keyed
bucket) nothing is remembered and the next reconcile resolves every module again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio

from provisioner_client.resolving.resolve import Pending, Registry, Resolver, Source
from provisioner_client.state import records as node_key
from registry.contract import Bucket, Placeholder, VerbAnswer, buckets, to_json, under
from registry.errors import BusError, NoResponders
from registry.wire import Bus, get_direct

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
    return node_key.digest(text.encode(), key)
