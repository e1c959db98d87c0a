"""The node's own keys of needs, collect and applied in one reconcile: found, converged, remembered.

Each bucket's keys are found from what the last reconcile remembered when the stamps agree
(`provisioner_client.remembered`), else listed through the verb (`NodeScope.read`); a bucket found
as remembered with the same wanted content is not converged at all. After its converge, a bucket's
new state is remembered for the next reconcile, or forgotten when it cannot be vouched for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from provisioner_client import remembered
from provisioner_client.remembered import BucketState, Remembered
from provisioner_client.scope import NodeScope
from registry.contract import Bucket, buckets
from registry.errors import BusError
from registry.wire import Bus, Changes, KvItem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """A bucket's node keys as this reconcile found them: `items` None when they are known to hold
    exactly what was remembered (needs, collect); `listed` when they were read through the verb."""

    stamp: int
    items: list[KvItem] | None
    listed: bool


class OwnKeys:
    """The node's keys of needs, collect and applied, for one reconcile."""

    def __init__(self, bus: Bus, scope: NodeScope, memory: Remembered) -> None:
        self.bus = bus
        self.scope = scope
        self.memory = memory
        self.found: dict[str, Found] = {}
        self.changed = False  # whether `memory` differs from what was read

    async def find(self, bucket: Bucket, desired: Mapping[str, bytes] | None) -> None:
        """Finds the bucket's keys: as remembered when the stamp agrees (and, for needs and collect,
        `desired` is what was remembered; None lists them), else listed."""
        known = self.memory.of(bucket.name)
        try:
            stamp = await self.scope.stamp(self.bus, bucket)
        except BusError as err:  # the listing below says whether the bus is away
            log.debug("stamp of %s not read (%s): listing", bucket.name, err.reason)
            stamp = -1
        if known is not None and known.items is not None and known.holds(stamp):  # applied: its records
            self.found[bucket.name] = Found(stamp, list(known.items), listed=False)
        elif known is not None and known.items is None and desired is not None and known.holds(stamp, desired):
            self.found[bucket.name] = Found(stamp, None, listed=False)
        else:
            items = await self.scope.read(self.bus, bucket)
            self.found[bucket.name] = Found(stamp, items, listed=True)

    def items(self, bucket: Bucket) -> list[KvItem]:
        """The bucket's node keys as found; empty for a bucket known to hold what is wanted."""
        return self.found[bucket.name].items or []

    async def converge(self, bucket: Bucket, desired: Mapping[str, bytes]) -> Changes:
        """Makes the bucket's node keys hold `desired` (nothing to do when they were found as
        remembered), then remembers what they hold."""
        found = self.found[bucket.name]
        if found.items is None:
            return Changes()
        written: dict[str, int] = {}
        try:
            changes = await self.scope.converge(self.bus, bucket, found.items, desired, revisions=written)
        except BaseException:
            self._forget(bucket)
            raise
        await self._remember(bucket, found, desired, written)
        return changes

    async def _remember(
        self, bucket: Bucket, found: Found, desired: Mapping[str, bytes], written: Mapping[str, int]
    ) -> None:
        keep_items = bucket is buckets.APPLIED
        after = remembered.after_converge(found.stamp, found.items or [], desired, written, keep_items=keep_items)
        if after is None or found.stamp < 0:
            self._forget(bucket)
            return
        stamp, items = after
        if written and await self._stamp_or_none(bucket) != stamp:  # someone else wrote meanwhile
            self._forget(bucket)
            return
        known = self.memory.of(bucket.name)
        listed_at = time.time() if found.listed or known is None else known.listed_at
        state = BucketState(stamp, remembered.digest_of(desired), listed_at, items)
        if state != known:
            self.memory.buckets[bucket.name] = state
            self.changed = True

    async def _stamp_or_none(self, bucket: Bucket) -> int | None:
        try:
            return await self.scope.stamp(self.bus, bucket)
        except BusError:
            return None

    def _forget(self, bucket: Bucket) -> None:
        if self.memory.buckets.pop(bucket.name, None) is not None:
            self.changed = True
