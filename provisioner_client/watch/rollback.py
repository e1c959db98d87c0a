"""Watch mode's rollback check, run every `rollback_check` whatever else happens: whether the bus
went back under the node (a server restarted from a store behind the writes it acknowledged, the
connection perhaps never seen to drop), found cheaply: per bucket of the node's own keys, one
direct get of their stamp against the one the last reconcile kept on disk; per claim the node
holds, one direct get against the revision it last wrote. Found below, the loop reconciles, and
that reconcile, finding the same, writes back what was lost and says so
(`provisioner_client.resolving.own`, `provisioner_client.rollout.gate`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import anyio

from provisioner_client.resolving.memory import remembered_stamps
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.rollout.gate import RolloutState
from registry.contract import buckets, fleet
from registry.errors import BusError
from registry.wire import Bus, get_direct

log = logging.getLogger(__name__)

OWN = {bucket.name: bucket for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)}


async def check_for_rollback(bus: Bus, folder: Path, node: str, wake: Callable[[str], None], every: timedelta) -> None:
    """Every `every`, wakes the loop saying what went back, if anything did; a bus away is the
    loop's to say."""
    while True:
        await anyio.sleep(every.total_seconds())
        try:
            what = await went_back(bus, folder, node)
        except BusError as err:
            log.debug("rollback check of node %s not done: %s", node, err.reason)
            continue
        if what is not None:
            wake(f"the bus went back: {what}")


async def went_back(bus: Bus, folder: Path, node: str) -> str | None:
    """What of the node's the bus holds below what the node remembers writing; None if nothing."""
    scope = NodeScope(node)
    for name, remembered in sorted(remembered_stamps(folder, node).items()):
        bucket = OWN.get(name)
        if bucket is not None and (stamp := await scope.stamp(bus, bucket)) < remembered:
            return f"the stamp of its {name} keys went back from {remembered} to {stamp}"
    for module, record in sorted(RolloutState(folder).modules.items()):
        if record.claimed and record.revision:
            own = await get_direct(bus, fleet.FLEET, fleet.claim_key(module, node))
            if (found := own.revision if own is not None else 0) < record.revision:
                return f"its claim of module {module} went back from revision {record.revision} to {found}"
    return None
