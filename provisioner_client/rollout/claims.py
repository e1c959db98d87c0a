"""The node's side of the fleet bucket: its own claims, written, renewed and deleted, and the
claims and holds of the others, read.

Every write is conditional on the revision the node read or last wrote (its own key alone: its
grants let it write `claim.*.<node>` and nothing else), and every read is a batch direct get (a
node has no JetStream API besides direct gets). A write that lost to a write of its own stored
late (a renewal the bus did not answer in time) is done again from the revision read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from registry.contract import fleet, to_json
from registry.errors import KeyShapeError, WrongLastSequence
from registry.wire import Bus, KvItem, TooManyKeys, delete, get_direct, get_last_many, get_latest_paged, update

FLEET = fleet.FLEET
ClaimState = Literal["waiting", "running", "failed"]


class Claims:
    """Node `node`'s claims, and what it reads of the fleet bucket."""

    def __init__(self, bus: Bus, node: str, ttl: timedelta) -> None:
        self.bus = bus
        self.node = node
        self.ttl = ttl

    async def holds(self) -> dict[str, fleet.Hold]:
        """Every module's hold, by module (one read of `rollout.>`)."""
        found = {}
        for item in await _latest(self.bus, f"{fleet.ROLLOUT}.>"):
            module = _module_of(item.key)
            if not item.deleted and module is not None:  # an unreadable hold holds, as every view shows it
                found[module] = fleet.read_hold(item.value, item.stored_at)
        return found

    async def of_module(self, module: str) -> list[KvItem]:
        """Every node's claim of `module` as it stands (deleted ones included)."""
        return await _latest(self.bus, fleet.claims_of(module))

    def own(self, items: Sequence[KvItem], module: str) -> KvItem | None:
        key = fleet.claim_key(module, self.node)
        return next((item for item in items if item.key == key), None)

    async def write(
        self, module: str, *, state: ClaimState, change: str, queued: int, last: int | None, reason: str = ""
    ) -> int:
        """Writes the node's claim of `module`; its revision. `last`: the revision it stands at, if known."""
        claim = fleet.Claim(
            state=state,
            change=change,
            since=datetime.now(UTC),
            ttl_seconds=self.ttl.total_seconds(),
            reason=reason[:1024],
            queued=queued,
        )
        key = fleet.claim_key(module, self.node)
        if last is None:
            last = await self._revision_of(key)
        try:
            return await update(self.bus, FLEET, key, to_json(claim), last=last)
        except WrongLastSequence:
            return await update(self.bus, FLEET, key, to_json(claim), last=await self._revision_of(key))

    async def current(self, module: str) -> KvItem | None:
        """The node's own claim of `module` as it stands (a delete marker included), None if never written."""
        return await get_direct(self.bus, FLEET, fleet.claim_key(module, self.node))

    async def remove(self, module: str) -> None:
        """Deletes the node's claim of `module`, if it stands: its slot is free."""
        key = fleet.claim_key(module, self.node)
        current = await get_direct(self.bus, FLEET, key)
        if current is None or current.deleted:
            return
        try:
            await delete(self.bus, FLEET, key, last=current.revision)
        except WrongLastSequence:
            again = await get_direct(self.bus, FLEET, key)
            if again is not None and not again.deleted:
                await delete(self.bus, FLEET, key, last=again.revision)

    async def _revision_of(self, key: str) -> int:
        current = await get_direct(self.bus, FLEET, key)
        return current.revision if current is not None else 0


async def _latest(bus: Bus, subject_filter: str) -> list[KvItem]:
    """The keys under `subject_filter` as they stand: one batch read, or paged past its 1,024 keys
    (a deleted claim's marker stays: every node that ever claimed a module has a key of it)."""
    try:
        return await get_last_many(bus, FLEET, subject_filter)
    except TooManyKeys:
        return await get_latest_paged(bus, FLEET, subject_filter)


def _module_of(key: str) -> str | None:
    """The module a hold's key names; None for a key of no shape (an operator's grant takes any one
    token: a literal `*`, a non-canonical escape), which is no module's hold."""
    try:
        return fleet.parse_fleet_key(key).module
    except KeyShapeError:
        return None
