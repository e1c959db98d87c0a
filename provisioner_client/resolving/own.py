"""The node's own keys of needs, collect and applied in one reconcile: found, then converged.

Each bucket's keys are taken as the memory has them when it says they are as remembered
(`provisioner_client.resolving.memory`: their stamp has not moved, and for needs and collect the wanted
content is the remembered one), else listed through the verb (`NodeScope.read`); a bucket found as
remembered with the same wanted content is not converged at all. After its converge, the memory is
told what the bucket now holds, or that it cannot be vouched for.

A stamp found below the remembered one says the bus lost writes it had acknowledged (a server's
store rolled back to an earlier prefix by a power failure before its sync): the keys are listed,
what the node wants of them written again, and one line says what was lost and restored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from provisioner_client.resolving.memory import Memory, Verdict
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.resolving.waiting import link_down
from registry.contract import Bucket
from registry.errors import BusError, ConvergeError
from registry.wire import Bus, Changes, KvItem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """A bucket's node keys as this reconcile found them: `items` None when they are known to hold
    exactly what was remembered (needs, collect); `verdict` says whether they were listed and why."""

    stamp: int
    items: list[KvItem] | None
    verdict: Verdict
    unlisted: BusError | None = None  # the listing the hub did not answer: the keys are not known
    lost_after: int | None = None  # the remembered stamp, when the one found is below it: writes lost

    @property
    def listed(self) -> bool:
        """Read through the verb, not known as remembered."""
        return not self.verdict.as_before


class OwnKeys:
    """The node's keys of needs, collect and applied, for one reconcile. Without a `memory`,
    nothing is remembered: every bucket is listed."""

    def __init__(self, bus: Bus, scope: NodeScope, memory: Memory | None = None) -> None:
        self.bus = bus
        self.scope = scope
        self.memory = memory if memory is not None else Memory(scope.node)
        self.found: dict[str, Found] = {}
        self.written: dict[str, dict[str, int]] = {}  # per bucket, each key written and its new revision

    async def find(self, bucket: Bucket, desired: Mapping[str, bytes] | None) -> None:
        """Finds the bucket's keys: as remembered when the memory says they are (for needs and
        collect, `desired` must be what was remembered; None lists them), else listed."""
        try:
            stamp = await self.scope.stamp(self.bus, bucket)
        except BusError as err:  # the listing below says whether the bus is away
            log.debug("stamp of %s not read (%s): listing", bucket.name, err.reason)
            stamp = -1
        verdict = self.memory.keys(bucket.name, stamp, desired)
        lost_after = self.memory.went_back(bucket.name, stamp)
        how = "as remembered" if verdict.as_before else "listed"
        log.debug("node %s: %s %s: %s", self.scope.node, bucket.name, how, verdict, extra={"bucket": bucket.name})
        if verdict.as_before:
            self.found[bucket.name] = Found(stamp, self.memory.items_of(bucket.name), verdict)
            return
        try:
            self.found[bucket.name] = Found(
                stamp, await self.scope.read(self.bus, bucket), verdict, lost_after=lost_after
            )
        except BusError as err:
            if link_down(err) is None:
                raise
            self.found[bucket.name] = self._unlisted(bucket, stamp, err)

    def _unlisted(self, bucket: Bucket, stamp: int, err: BusError) -> Found:
        """The keys of a bucket the verb (at the hub) did not list: a link down. Its writes wait;
        applied's records are taken as remembered, so that what was applied is still known."""
        log.debug(  # said once per cut by the record of waiting writes (`waiting`)
            "node %s: %s not listed (%s): its writes wait for the hub",
            self.scope.node,
            bucket.name,
            err,
            extra={"bucket": bucket.name},
        )
        remembered = self.memory.items_of(bucket.name) or []
        return Found(stamp, remembered, Verdict(as_before=False, reason=f"not listed: {err.reason}"), unlisted=err)

    def items(self, bucket: Bucket) -> list[KvItem]:
        """The bucket's node keys as found; empty for a bucket known to hold what is wanted."""
        return self.found[bucket.name].items or []

    async def converge(self, bucket: Bucket, desired: Mapping[str, bytes]) -> Changes:
        """Makes the bucket's node keys hold `desired` (nothing to do when they were found as
        remembered), then tells the memory what they hold."""
        found = self.found[bucket.name]
        if found.unlisted is not None:
            reason = f"its keys could not be listed: {found.unlisted.reason}"
            raise ConvergeError(bucket.name, "*", reason, "nothing") from found.unlisted
        if found.items is None:
            return Changes()
        written = self.written.setdefault(bucket.name, {})
        try:
            changes = await self.scope.converge(self.bus, bucket, found.items, desired, revisions=written)
        except ConvergeError as err:
            self._remember_unchanged(bucket, found, err)
            raise
        except BaseException:
            self.memory.keep_keys(bucket.name, None)
            raise
        state = self.memory.converged(bucket.name, found.stamp, found.items, desired, written, listed=found.listed)
        if state is not None and written and await self._stamp_or_none(bucket) != state.stamp:
            state = None  # someone else wrote meanwhile
        self.memory.keep_keys(bucket.name, state)
        if found.lost_after is not None:
            restored = changes.summary() if changes else "nothing of the node's was missing"
            say_lost(self.scope.node, f"{bucket.name} keys", found.lost_after, found.stamp, restored)
        return changes

    def _remember_unchanged(self, bucket: Bucket, found: Found, err: ConvergeError) -> None:
        """After a converge that failed: with nothing written and the hub out of reach, the keys
        are as found (a write given up on and stored later moves their stamp), so the next
        reconcile, during the same cut, need not list them through the verb at the hub."""
        if self.written.get(bucket.name) or link_down(err) is None or found.items is None:
            self.memory.keep_keys(bucket.name, None)
            return
        present = {item.key: item.value for item in found.items if not item.deleted}
        state = self.memory.converged(bucket.name, found.stamp, found.items, present, {}, listed=found.listed)
        self.memory.keep_keys(bucket.name, state)

    def unwritten(self, bucket: Bucket, desired: Mapping[str, bytes]) -> set[str]:
        """The keys of `desired` the bucket does not hold as desired after a converge that failed
        part-way: neither found so nor written since (none known for a bucket not listed)."""
        if self.found[bucket.name].unlisted is not None:
            return set()  # its keys are not known: which of them differ is not either
        found = {item.key: item.value for item in self.items(bucket) if not item.deleted}
        done = self.written.get(bucket.name, {})
        return {key for key, value in desired.items() if key not in done and found.get(key) != value}

    async def _stamp_or_none(self, bucket: Bucket) -> int | None:
        try:
            return await self.scope.stamp(self.bus, bucket)
        except BusError:
            return None


def say_lost(node: str, what: str, remembered: int, found: int, restored: str) -> None:
    """The one line that says the bus lost writes of the node's own `what` (found at `found`, below
    the `remembered` stamp or revision) and what the node wrote again."""
    log.warning(
        "node %s: the bus lost writes of its %s (their stamp went back from %d to %d); restored: %s",
        node,
        what,
        remembered,
        found,
        restored,
        extra={"node": node, "what": what},
    )
