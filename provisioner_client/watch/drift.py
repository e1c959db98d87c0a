"""Drift of the env files the client wrote, seen within a second and put back from what is applied.

`DriftWatch` follows the env file of each applied module (its path and digest, from the last
reconcile) by `lstat` every `drift_poll` (1 s): an unchanged inode, mtime, ctime, size and mode
costs one `lstat`, about a millisecond for 1,000 files. A file whose `lstat` changed is judged by
its keyed digest and mode: the client's own writes are as applied and cost one digest; a hand edit,
a `chmod` or a removal is drift. Only files the client wrote for applied modules are followed, and
only inside the materialize folder; any other file is never looked at, let alone touched.

A file is judged against what the client last wrote into it, never against what an earlier
reconcile wanted: the poll runs while a reconcile rewrites files (between two of its bus requests,
during a change action), so the watch is the reconcile's `FileObserver` and takes each file's new
digest at the moment it is written (a write is synchronous: no poll runs inside one), and forgets
a file at the moment it is removed. A reconcile that fails after writing leaves the watch knowing
what it wrote. So only something other than the client changing a file is drift.

`put_back` writes one drifted module's file again: it resolves that module's placeholders alone,
and writes the file (through the ledger, `EnvFolder.materialize`) only if what it renders has the
digest that was applied. Otherwise the values moved on since the last reconcile, and it answers
False: that module needs a full reconcile, which also records the new state.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from provisioner_client.concurrently import all_of
from provisioner_client.errors import ManifestError
from provisioner_client.materializing.action import rendered
from provisioner_client.materializing.envfile import EnvFolder, FileObserver, as_written
from provisioner_client.reconcile import ClientPlan
from provisioner_client.resolving.manifest import LoadedManifest, load_manifest
from provisioner_client.resolving.resolve import Registry, Resolver, read_registry
from provisioner_client.resolving.scope import NodeScope
from registry.contract import AppliedValue, buckets
from registry.wire import Bus

log = logging.getLogger(__name__)

Fingerprint = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class Written:
    """An env file as the client wrote it for an applied module."""

    path: Path
    digest: str


def fingerprint(path: Path) -> Fingerprint | None:
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_ctime_ns, found.st_size, found.st_mode)


class DriftWatch:
    """The env files of the applied modules; `drifted()` names those no longer as written."""

    def __init__(self, folder: Path) -> None:
        self._folder = EnvFolder(folder)
        self._written: dict[str, Written] = {}
        self._seen: dict[str, Fingerprint | None] = {}

    def expect(self, applied: Mapping[str, AppliedValue]) -> None:
        """The files as the last reconcile left them; files already judged stay judged."""
        written = {m: w for m, a in applied.items() if (w := self._written_for(m, a)) is not None}
        self._seen = {m: seen for m, seen in self._seen.items() if written.get(m) == self._written.get(m)}
        self._written = written

    def wrote(self, module: str, path: Path, digest: str) -> None:
        """The client has just made a followed module's file hold content of `digest`: judged against
        it from now. A module not followed yet is from the next `expect` on."""
        if module in self._written and path == self._folder.folder / f"{module}.env":
            self._written[module] = Written(path, digest)
            self._seen.pop(module, None)

    def removed(self, module: str) -> None:
        """The client has just removed the module's file: no longer followed."""
        self._written.pop(module, None)
        self._seen.pop(module, None)

    def _written_for(self, module: str, applied: AppliedValue) -> Written | None:
        if applied.state != "applied" or applied.file is None or applied.digest is None:
            return None
        path = Path(applied.file)
        return Written(path, applied.digest) if path == self._folder.folder / f"{module}.env" else None

    def drifted(self) -> dict[str, str]:
        """Module to how its file drifted ("edited" or "removed"), for the files whose `lstat` changed."""
        found: dict[str, str] = {}
        for module, written in self._written.items():
            now = fingerprint(written.path)
            if module in self._seen and self._seen[module] == now:
                continue
            self._seen[module] = now
            if now is None:
                found[module] = "removed"
            elif not as_written(written.path, written.digest, self._key()):
                found[module] = "edited"
        return found

    def _key(self) -> bytes:
        return self._folder.key() or b""  # no key: no digest can match, so the file is put back


async def put_back(
    bus: Bus, plan: ClientPlan, module: str, applied_digest: str, *, observer: FileObserver | None = None
) -> bool:
    """Writes the module's env file again if its values still render what was applied; False if not."""
    folder = EnvFolder(plan.materialize, observer=observer)
    loaded = _manifest_of(folder, plan.manifests, module)
    if loaded is None:
        return False
    resolver = await _resolver(bus, plan, needed=bool(loaded.manifest.placeholders()))
    content = await rendered(resolver, loaded)
    if isinstance(content, list) or folder.digest(content) != applied_digest:
        return False
    folder.materialize(module, content)
    return True


def _manifest_of(folder: EnvFolder, manifests: Path, module: str) -> LoadedManifest | None:
    """The manifest that declared `module` when last reconciled (the ledger remembers which file)."""
    names = [name for name, declared in folder.read_ledger().manifests.items() if declared == module]
    if len(names) != 1:
        return None
    try:
        loaded = load_manifest(manifests / names[0], module)
    except ManifestError:
        return None
    return loaded if loaded.module == module else None


async def _resolver(bus: Bus, plan: ClientPlan, *, needed: bool) -> Resolver:
    registry = Registry()
    own_collect: dict[str, bytes] = {}
    if needed:

        async def read_whole_registry() -> None:
            nonlocal registry
            registry = await read_registry(bus)

        async def read_own_collect() -> None:
            items = await NodeScope(plan.node).read(bus, buckets.COLLECT)
            own_collect.update({item.key: item.value for item in items if not item.deleted})

        await all_of(read_whole_registry, read_own_collect)
    return Resolver(bus, registry, node=plan.node, verb_timeout=plan.verb_timeout, own_collect=own_collect)
