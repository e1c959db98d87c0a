"""`bench --rollout` runs end to end at tiny sizes, so that CI runs its code: watching
clients in child processes, a shared config change with a budget and without."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.rollout import RolloutSizes, run_rollout


@pytest.mark.slow
async def test_the_rollout_bench_counts_the_actions_at_once_and_every_node_finishes(tmp_path: Path) -> None:
    sizes = RolloutSizes.quick()
    report, details = await run_rollout(tmp_path, sizes)
    free, budgeted = details["rounds"]
    assert free["finished"] == budgeted["finished"] == sizes.nodes
    assert budgeted["at_once"] <= sizes.budget
    assert free["at_once"] >= 1
    assert all(figure.met is not False for figure in report.figures)
