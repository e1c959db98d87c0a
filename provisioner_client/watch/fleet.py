"""Watch mode's view of the fleet bucket (`registry.contract.fleet`): one subscription on where
its stream republishes every write (`$KVR.mesh-provisioner_fleet.>`: a node's grants import it
there, not onto `$KV.`, where its own claims' puts would come back to it), whoever wrote it.

A write wakes the loop only when it may change what the node does:

- a hold `rollout.<module>` of a module the node declares (paused, resumed, aborted);
- a claim of a module the node waits on deleted (a slot freed), or written `failed`;
- a `gone.<node>` mark written or deleted (a node forgotten or back: its contributions leave
  or rejoin the collections the node resolves).

A node's own claim renewals and the other nodes' renewals wake nobody, so a queue of many nodes
does not become a storm of reconciles. What nothing announces (a claim expiring unrenewed, a
splay ending) the loop looks at on the `RolloutAlarm`: the time the last reconcile asked for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from registry.contract import fleet
from registry.errors import BusError, RegistryError
from registry.wire import Bus, Message

log = logging.getLogger(__name__)

_REMOVED = ("DEL", "PURGE")


class FleetInterest:
    """What the node cares about in the fleet bucket: the modules it declares, those it waits on."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.modules: set[str] = set()
        self.waiting: set[str] = set()

    def wakes(self, msg: Message) -> str | None:
        """Why `msg` (a republished write of the fleet bucket) should wake the loop; None: it should not."""
        key = fleet.FLEET.key_of(msg.subject)
        try:
            parsed = fleet.parse_fleet_key(key)
        except RegistryError:
            return None
        removed = msg.headers.get("KV-Operation") in _REMOVED
        if parsed.kind == fleet.GONE:
            return f"fleet {key}"
        if parsed.kind == fleet.ROLLOUT:
            return f"fleet {key}" if parsed.module in self.modules else None
        if parsed.module not in self.waiting or parsed.node == self.node:
            return None
        if removed:
            return f"fleet {key} freed"
        claim = fleet.read_claim(msg.data)
        return f"fleet {key} failed" if claim is not None and claim.state == "failed" else None


async def follow_fleet(bus: Bus, interest: FleetInterest, pull: Callable[[str], None]) -> None:
    """Follows the fleet bucket's writes until cancelled, pulling `pull` with the reason of each that matters."""

    async def on_message(msg: Message) -> None:
        reason = interest.wakes(msg)
        if reason is not None:
            pull(reason)

    try:
        subscription = await bus.subscribe(fleet.FLEET.live_subject(">"), on_message)
    except BusError as err:
        log.warning("cannot follow the fleet bucket: %s; rollouts are looked at on their timers only", err.reason)
        return
    try:
        await anyio.sleep_forever()
    finally:
        with anyio.move_on_after(2, shield=True):
            await subscription.unsubscribe()


class RolloutAlarm:
    """Pulls the loop once, when the time the last reconcile asked for comes (renew a claim, a
    splay ends, the wait for the coordination runs out); set again after each reconcile."""

    def __init__(self, pull: Callable[[str], None]) -> None:
        self._pull = pull
        self._deadline: float | None = None
        self._changed = anyio.Event()

    def set(self, seconds: float | None) -> None:
        self._deadline = None if seconds is None else time.monotonic() + max(seconds, 0.05)
        self._changed.set()

    async def run(self) -> None:
        while True:
            self._changed = anyio.Event()
            deadline = self._deadline
            if deadline is None:
                await self._changed.wait()
                continue
            with anyio.move_on_after(deadline - time.monotonic()):
                await self._changed.wait()
                continue
            self._deadline = None
            self._pull("rollout: time to look again")
