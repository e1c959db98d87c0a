"""Rollouts: a change of a module's env file reaches the fleet in waves.

A module with a budget (its manifest's `"rollout": {"budget": N | "P%"}`, else the client setting
`rollout_budget`) changes on at most that many nodes at once. Coordination goes through the fleet
bucket (`registry.contract.fleet`), with no coordinator of our own: each node writes its own
claim `claim.<module>.<node>` and reads every other, and the server's revisions order them.

- `budget`: what a budget is and how many slots it gives.
- `admission`: which live claims hold the slots (pure: claims in, verdict out).
- `health`: the health command run after the change action.
- `pacing`: splay and wait for modules without a budget.
- `gate`: the reconcile's one door: admit a change, see it through, keep the claims; the node's
  claim in the fleet bucket (written, renewed, deleted; holds read) and what the node remembers
  locally (which change ran under which claim, its last good env file, when a paced change is due).
"""

from __future__ import annotations

from provisioner_client.rollout.budget import Budget, RolloutPlan
from provisioner_client.rollout.gate import Admission, RolloutGate, RolloutReport

__all__ = ["Admission", "Budget", "RolloutGate", "RolloutPlan", "RolloutReport"]
