"""Splay and wait, for a module without a budget (its manifest's `rollout`).

- `splay_seconds`: a change is applied after a random delay of up to that long, drawn once per
  change, so the fleet's nodes spread out instead of changing within the same second.
- `wait_seconds` (and `wait_max_seconds`): a quiet period. A change is applied once its values
  have stood unchanged that long, or `wait_max_seconds` after the first change of the burst,
  whichever comes first: a burst of changes becomes one.

Both are timed in the node's rollout record (`state`), so a restart keeps them; until a change is
due the module is pending (`rollout: waiting for a slot: ...`), its file as it was.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from provisioner_client.resolving.manifest import Rollout
from provisioner_client.state.records import ModuleRollout


def paced(record: ModuleRollout, rollout: Rollout, change: str, now: datetime) -> ModuleRollout:
    """The record timing `change`: a new change moves the quiet period and draws a new splay."""
    if record.pacing_change == change:
        return record
    # a burst goes on until a change of it is applied; the next change begins a new one
    ongoing = record.pacing_change and not record.pacing_applied
    burst = record.burst_since if ongoing else now
    splay = timedelta(seconds=random.uniform(0, rollout.splay_seconds))  # noqa: S311 - spreading, no secret
    return record.model_copy(
        update={
            "pacing_change": change,
            "pacing_applied": False,
            "burst_since": burst or now,
            "changed_at": now,
            "splay_until": now + splay,
        }
    )


def due_at(record: ModuleRollout, rollout: Rollout) -> datetime:
    """When the change the record times may be applied."""
    assert record.changed_at is not None and record.burst_since is not None
    quiet = record.changed_at + timedelta(seconds=rollout.wait_seconds)
    if rollout.wait_max_seconds is not None:
        quiet = min(quiet, record.burst_since + timedelta(seconds=rollout.wait_max_seconds))
    return max(quiet, record.splay_until or quiet)
