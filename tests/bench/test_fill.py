"""`bench --fill` (issue 17) runs end to end at tiny sizes, so that CI runs its code: a node filling
a bucket past its quota while another node and the seat write."""

from __future__ import annotations

from pathlib import Path

from bench.fill import FillSizes, run_fill

# Quotas a few of the hostile node's values pass, and buckets small enough for them to matter.
SMALL = {"node_quota_keys": 100, "node_quota_bytes": 256 * 1024, "bucket_max_bytes": 4 * 1024 * 1024}


async def test_the_fill_counts_the_others_writes_and_shows_the_filler_over_quota(tmp_path: Path) -> None:
    sizes = FillSizes(seconds=2, after=0.5, writers=2, seat=SMALL)
    _, details = await run_fill(tmp_path, sizes)
    assert details["hostile"]["fill"]["stored"] > 0
    assert all(writes["made"] > 0 and not writes["refused"] for writes in details["others"].values())
    assert details["verdict"]["verdict"] == "over-quota"
    assert details["bucket"]["end"] < details["bucket"]["bound"]
