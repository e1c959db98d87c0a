"""What the node's own keys held when the last reconcile ended, so that the next one need not list them.

Listing the node's keys of needs, collect and applied through the verb is the largest cost of a
reconcile that changes nothing (about 1,200 entries for 100 modules). Instead, each reconcile
remembers per bucket the *stamp* of the node's keys (the stream sequence of the latest entry under
`<node>.>`, which one direct get of that filter answers: `NodeScope.stamp`) and a digest of what they
held then; for applied, the records themselves with their revisions (they say what was applied
before: the change actions' outcomes, `changed_at`). The next reconcile asks the stamps only: where a
bucket's stamp is the remembered one and what it wants there has the remembered digest, nothing can
differ and the bucket is neither listed nor converged. Any write, delete or purge of one of the
node's keys moves the stamp, so the remembered state is then ignored and the keys are listed as
before.

It is kept in the materialize folder (`.mesh-provisioner-client.state.json`, mode 0600) and holds
digests, stamps and applied records, never a value. It is trusted only as far as the stamps agree,
and for at most `TRUSTED_FOR` (after which the keys are listed again whatever the stamps say: a key
removed without a new entry, by an administrator's purge of the stream, leaves the stamp alone).
It relies on the node's keys having one writer at a time, the holder of the node's lease.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from registry.contract import MAX_PAGE_BYTES, JsonRefused, read_json_file
from registry.wire import KvItem

log = logging.getLogger(__name__)

FILE = ".mesh-provisioner-client.state.json"
TRUSTED_FOR = 600.0  # seconds a remembered state is used before the keys are listed again whatever it says
_VERSION = 1


def digest_of(desired: Mapping[str, bytes]) -> str:
    """One digest of a bucket's wanted keys and values, whatever their order."""
    hasher = hashlib.sha256()
    for key in sorted(desired):
        value = desired[key]
        hasher.update(f"{len(key)}:{key}{len(value)}:".encode())
        hasher.update(value)
    return hasher.hexdigest()


@dataclass(frozen=True)
class BucketState:
    """A bucket's node keys at `stamp`: their digest, and (for applied) the entries themselves, as
    they have been known since the listing at `listed_at` (seconds since the epoch)."""

    stamp: int
    digest: str
    listed_at: float
    items: tuple[KvItem, ...] | None = None

    def holds(self, stamp: int, desired: Mapping[str, bytes] | None = None) -> bool:
        """Whether the keys are still as remembered (and, given `desired`, are exactly that)."""
        if not 0 <= time.time() - self.listed_at <= TRUSTED_FOR:
            return False
        return stamp == self.stamp and (desired is None or digest_of(desired) == self.digest)


@dataclass
class Remembered:
    """The remembered state of each of the node's buckets, by bucket name; the world the modules
    were resolved in (`provisioner_client.inputs`), the places they read and each applied
    module's inputs."""

    node: str
    buckets: dict[str, BucketState] = field(default_factory=dict)
    world: str | None = None
    sources: list[list[str]] = field(default_factory=list)
    modules: dict[str, tuple[str, float]] = field(default_factory=dict)  # inputs, and when resolved from them

    def of(self, bucket: str) -> BucketState | None:
        return self.buckets.get(bucket)

    def resolved(self, module: str, inputs: str) -> bool:
        """Whether `module` was resolved from `inputs`, at most `TRUSTED_FOR` ago."""
        found = self.modules.get(module)
        return found is not None and found[0] == inputs and 0 <= time.time() - found[1] <= TRUSTED_FOR

    def resolved_in(self, world: str | None, sources: list[list[str]], modules: dict[str, tuple[str, float]]) -> bool:
        """Keeps what the modules were resolved from; whether that changed what is remembered."""
        if (world, sources, modules) == (self.world, self.sources, self.modules):
            return False
        self.world, self.sources, self.modules = world, sources, modules
        return True


def read(folder: Path, node: str) -> Remembered:
    """The state remembered for `node` in `folder`; empty when there is none, it is another node's,
    too old, or it cannot be read (then the keys are simply listed)."""
    try:
        document = read_json_file(folder / FILE, max_bytes=MAX_PAGE_BYTES)
    except FileNotFoundError:
        return Remembered(node)
    except (OSError, JsonRefused) as err:
        log.warning("%s: ignored (%s); the node's keys are listed", folder / FILE, err, extra={"node": node})
        return Remembered(node)
    try:
        return _parsed(document, node)
    except (KeyError, TypeError, ValueError):
        log.warning("%s: ignored, not a remembered state; the node's keys are listed", folder / FILE,
                    extra={"node": node})  # fmt: skip
        return Remembered(node)


def _parsed(document: object, node: str) -> Remembered:
    if not isinstance(document, dict) or document.get("version") != _VERSION or document.get("node") != node:
        return Remembered(node)
    found = Remembered(node)
    world = document.get("world")
    found.world = world if isinstance(world, str) else None
    found.sources = [[str(part) for part in source] for source in document.get("sources", [])]
    found.modules = {str(m): (str(inputs), float(at)) for m, (inputs, at) in dict(document.get("modules", {})).items()}
    for name, state in dict(document["buckets"]).items():
        items = state.get("items")
        found.buckets[str(name)] = BucketState(
            int(state["stamp"]),
            str(state["digest"]),
            float(state["listed_at"]),
            None if items is None else tuple(KvItem(str(k), str(v).encode(), int(r)) for k, r, v in items),
        )
    return found


def write(folder: Path, remembered: Remembered) -> None:
    """Keeps `remembered` for the next reconcile (atomically, mode 0600); a failure only costs a listing."""
    document = {
        "version": _VERSION,
        "node": remembered.node,
        "buckets": {name: _document_of(state) for name, state in sorted(remembered.buckets.items())},
        "world": remembered.world,
        "sources": sorted(remembered.sources),
        "modules": {module: list(found) for module, found in sorted(remembered.modules.items())},
    }
    path = folder / FILE
    temporary = path.with_name(f"{FILE}.{os.getpid()}.tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())
        os.replace(temporary, path)
    except OSError as err:
        log.warning("%s: not written (%s); the next reconcile lists the node's keys", path, err.strerror,
                    extra={"node": remembered.node})  # fmt: skip
        forget(folder)


def forget(folder: Path) -> None:
    for path in (folder / FILE, *folder.glob(f"{FILE}.*.tmp")):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            log.warning("%s: not removed (%s)", path, err.strerror)


def _document_of(state: BucketState) -> dict[str, object]:
    items = None if state.items is None else [[i.key, i.revision, i.value.decode()] for i in state.items]
    return {"stamp": state.stamp, "digest": state.digest, "listed_at": state.listed_at, "items": items}


def after_converge(
    stamp_before: int, current: Iterable[KvItem], desired: Mapping[str, bytes], written: Mapping[str, int],
    *, keep_items: bool,
) -> tuple[int, tuple[KvItem, ...] | None] | None:  # fmt: skip
    """The stamp the bucket should now have and its entries (with `keep_items`), or None when the
    listing itself went past `stamp_before` (something wrote meanwhile: remember nothing)."""
    listed = {item.key: item for item in current if not item.deleted}
    if any(item.revision > stamp_before for item in listed.values()):
        return None
    expected = max(written.values(), default=stamp_before)
    if not keep_items:
        return expected, None
    items = []
    for key, value in sorted(desired.items()):
        revision = written.get(key) or (listed[key].revision if key in listed else 0)
        if not revision:  # found holding the value without being listed: its revision is not known
            return None
        items.append(KvItem(key, value, revision))
    return expected, tuple(items)
