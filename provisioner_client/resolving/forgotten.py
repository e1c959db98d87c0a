"""Forgotten nodes: whose contributions a collection leaves out.

The seat marks a node gone for good as `gone.<node>` in the fleet bucket
(`registry.contract.fleet`, `provisioner.seat.gone_marks`) and deletes the mark once the node is
back. A node's grants let it read the whole fleet bucket by batch direct get, so when it resolves
a collection it reads the marks of exactly the other nodes that contribute to it: one batch per
`MULTI_LAST_LIMIT` contributors, once per reconcile, and none at all while every contribution is
its own. A node never leaves its own contributions out, marked or not (its mark outlives its
return until the seat's next round).

The marks are read fail-open: a fleet bucket that does not answer (a seat older than the marks,
the bus away) leaves nothing out, said once per reconcile, so that a collection is never emptied
by an outage; a gone node's contributions are then read as they were before marks existed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import anyio

from registry.contract import decode_token, fleet, node_token
from registry.errors import BusError, TokenError
from registry.wire import MULTI_LAST_LIMIT, Bus, KvItem, get_last_many

log = logging.getLogger(__name__)


class Forgotten:
    """The gone marks a node reads during one reconcile, each contributor's read at most once."""

    def __init__(self, bus: Bus, *, node: str) -> None:
        self.bus = bus
        self.node = node
        self._marked: dict[str, bool] = {}  # contributor: whether it is marked gone
        self._reading = anyio.Lock()
        self.unreadable: str | None = None  # why the marks could not be read, if they could not

    async def left_out(self, contributors: Iterable[str]) -> set[str]:
        """The nodes among `contributors` whose contributions are left out: marked gone, and not
        this node."""
        others = {node for node in contributors if node != self.node}
        async with self._reading:
            await self._read_marks(sorted(others - self._marked.keys()))
        return {node for node in others if self._marked.get(node, False)}

    async def kept(self, items: list[KvItem]) -> list[KvItem]:
        """The collect bucket's `items` (keys `<node>.<collection>.<contributor>`) whose node is
        not left out."""
        by_node = {item.key: _node_of(item.key) for item in items}
        out = await self.left_out(node for node in by_node.values() if node is not None)
        return [item for item in items if by_node[item.key] not in out]

    async def _read_marks(self, nodes: list[str]) -> None:
        for start in range(0, len(nodes), MULTI_LAST_LIMIT):
            chunk = nodes[start : start + MULTI_LAST_LIMIT]
            try:
                found = await get_last_many(self.bus, fleet.FLEET, [fleet.gone_key(node) for node in chunk])
            except BusError as err:
                self._unreadable(err.reason)
                found = []
            marked = {item.key for item in found if not item.deleted}
            self._marked.update({node: fleet.gone_key(node) in marked for node in chunk})

    def _unreadable(self, reason: str) -> None:
        if self.unreadable is None:
            log.warning(
                "gone marks of %s not read (%s): no contribution left out of collections this reconcile",
                fleet.FLEET.name,
                reason,
                extra={"bucket": fleet.FLEET.name},
            )
        self.unreadable = reason


def _node_of(key: str) -> str | None:
    try:
        return decode_token(node_token(key))
    except TokenError:
        return None
