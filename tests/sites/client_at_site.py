"""The timings and the counts the tests of the node client at a site share."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from provisioner_client.watch.watching import WatchTiming
from registry.contract import buckets
from registry.wire import Bus
from tests.helpers import last_sequence

LEASE_TTL = timedelta(seconds=3)  # renewed every second: the cut is told within about one
TIMING = WatchTiming(debounce=timedelta(seconds=0.1), poll=timedelta(seconds=0.2))
NODE_BUCKETS = (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)


def manifest(module: str, env: dict[str, str], runs: Path) -> str:
    """A module whose change action appends a line to `runs`: its lines count its runs."""
    on_change = {"command": ["sh", "-c", f"echo run >> {runs}"], "timeout_seconds": 10}
    return json.dumps({"module": module, "env": env, "on_change": on_change})


def runs_of(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def last_sequences(seat: Bus) -> dict[str, int]:
    """Each node bucket's last sequence at the hub: it grows by one per write stored."""
    return {bucket.name: await last_sequence(seat, bucket) for bucket in NODE_BUCKETS}
