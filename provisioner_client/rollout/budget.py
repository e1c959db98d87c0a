"""A module's rollout budget: how many nodes may change it at once.

`N` (an integer >= 1) is N slots. `P%` is P percent of the nodes the client counts for the
module: those holding a live claim of it (the nodes changing it or queued to), rounded down, at
least one. A node cannot read other nodes' applied records, so the count is of claims: while a
rollout is under way every node about to change holds one, which is the population that matters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from provisioner_client.resolving.manifest import Manifest, budget_problem

Unreachable = Literal["proceed", "hold"]


@dataclass(frozen=True)
class Budget:
    count: int = 0  # N nodes, or
    percent: int = 0  # P % of the nodes counted

    @staticmethod
    def of(value: int | str) -> Budget:
        """The budget `value` says (validated as the manifest validates it)."""
        problem = budget_problem(value)
        if problem is not None:
            raise ValueError(problem)
        if isinstance(value, int):
            return Budget(count=value)
        text = value.strip()
        return Budget(percent=int(text[:-1])) if text.endswith("%") else Budget(count=int(text))

    def slots(self, nodes: int) -> int:
        """How many of `nodes` may change at once."""
        if self.count:
            return self.count
        return max(1, math.floor(nodes * self.percent / 100))

    def __str__(self) -> str:
        return f"{self.count}" if self.count else f"{self.percent}%"


@dataclass(frozen=True)
class RolloutPlan:
    """The client's rollout settings: the fleet-wide default budget (None: none), how long a claim
    stands unrenewed, how long a node waits for an unreachable coordination, and what it does then."""

    budget: Budget | None = None
    claim_ttl: timedelta = timedelta(seconds=30)
    wait_limit: timedelta = timedelta(seconds=60)
    unreachable: Unreachable = "proceed"

    def budget_of(self, manifest: Manifest) -> Budget | None:
        """The module's budget: its own, else the default, unless it asks for splay or wait instead."""
        rollout = manifest.rollout
        if rollout is not None and rollout.budget is not None:
            return Budget.of(rollout.budget)
        if rollout is not None and (rollout.splay_seconds or rollout.wait_seconds):
            return None
        return self.budget
