"""Removing a node: every key under its token in the needs, applied and collect buckets.

For the controller (import `remove_node`) and for an operator (`mesh-provisioner remove-node`),
connected with the seat's credentials in the data account. The node's keys are found under
`<node-token>.>`, the node's name escaped exactly as keys are, so node `a.b` removes `a=2Eb.>`
and never the keys of node `a`. Each key gets a delete marker conditional on the revision it
was listed at: never a rollup or purge (the buckets refuse rollups), and a key written again
in between is left alone with an error rather than lost.
"""

from __future__ import annotations

import logging

from registry.contract import Bucket, buckets, under
from registry.wire import Bus, KvItem, current_snapshot, delete

log = logging.getLogger(__name__)

NODE_BUCKETS: tuple[Bucket, ...] = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)


async def node_keys(bus: Bus, node: str) -> dict[Bucket, list[KvItem]]:
    """The current keys of `node` in each bucket keyed by node (malformed keys under it too)."""
    return {bucket: await current_snapshot(bus, bucket, [under(node)]) for bucket in NODE_BUCKETS}


async def remove_keys(bus: Bus, found: dict[Bucket, list[KvItem]]) -> dict[str, list[str]]:
    """Deletes each key of `found` at the revision it was listed at; the keys removed, by bucket."""
    removed: dict[str, list[str]] = {}
    for bucket, items in found.items():
        for item in sorted(items, key=lambda item: item.key):
            await delete(bus, bucket, item.key, last=item.revision)
            log.info("removed %s %s", bucket.name, item.key, extra={"bucket": bucket.name, "key": item.key})
            removed.setdefault(bucket.name, []).append(item.key)
    return removed


async def remove_node(bus: Bus, node: str) -> dict[str, list[str]]:
    """Removes every key of `node` from needs, applied and collect; the keys removed, by bucket
    (empty when there was nothing to remove). Raises `registry.errors.BusError`, e.g.
    `WrongLastSequence` when the node wrote a key again meanwhile: run it again once it is stopped."""
    return await remove_keys(bus, await node_keys(bus, node))
