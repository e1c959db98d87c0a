"""Admission: which live claims of a module hold its slots.

Every claim has a queue position: the stream revision of its node's first claim write
(`Claim.position`), kept across renewals, so a node renewing never loses its place and no two
nodes share one; the seat deletes a claim naming a place the bus did not give it, or of a node
that does not run the module. A claim is live while the server's stamp of its last write plus its
ttl (`fleet.MAX_CLAIM_TTL` at most) plus the clock skew allowed (`registry.wire.SKEW`) lies ahead;
a dead one holds nothing. Every reader reads claims alike (`registry.contract.fleet.live_claims`).
The slots are the first `budget.slots(nodes)` live claims by position, whatever their state: a
claim `running` or `failed` holds its slot as much as one `waiting` to run (a failure uses its
slot up).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from provisioner_client.rollout.budget import Budget
from registry.contract import fleet
from registry.contract.fleet import LiveClaim
from registry.wire import SKEW, KvItem

__all__ = ["LiveClaim", "Verdict", "live_claims", "verdict"]


def live_claims(items: Iterable[KvItem], now: datetime, *, skew: timedelta | None = None) -> list[LiveClaim]:
    """The live claims among `items` (a module's claim keys as read), in queue order, as every
    reader reads them (`fleet.live_claims`); `skew`, the clock skew allowed, is `SKEW` unless given."""
    return fleet.live_claims(items, now, skew=SKEW if skew is None else skew)


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    rank: int  # 0-based place in the queue
    slots: int
    holders: tuple[str, ...]  # the nodes holding the slots

    def describe(self) -> str:
        if self.admitted:
            return f"admitted: place {self.rank + 1} of {self.slots} slots"
        ahead = self.rank - self.slots + 1
        return f"{ahead} ahead in the queue; the {self.slots} slots held by {', '.join(self.holders[:5])}" + (
            " ..." if len(self.holders) > 5 else ""
        )


def verdict(claims: list[LiveClaim], node: str, budget: Budget) -> Verdict:
    """Whether `node`'s claim is among the first slots of `claims` (queue-ordered, its own among them)."""
    slots = budget.slots(len({live.node for live in claims}))
    ranks = [i for i, live in enumerate(claims) if live.node == node]
    rank = ranks[0] if ranks else len(claims)
    holders = tuple(live.node for live in claims[:slots])
    return Verdict(rank < slots, rank, slots, holders)
