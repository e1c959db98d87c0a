"""`bench --fill` runs end to end at tiny sizes, so that CI runs its code: a node filling
a bucket past its quota while another node and the seat write."""

from __future__ import annotations

from pathlib import Path

from bench.fill import FillSizes, run_fill

# Quotas a few of the hostile node's values pass, and buckets small enough for them to matter: at
# the fill's ~50 MB/s, 16 MB is ~0.3 s for the seat's guard to purge before the bucket is full.
SMALL = {"node_quota_keys": 100, "node_quota_bytes": 256 * 1024, "bucket_max_bytes": 16 * 1024 * 1024}


async def test_the_fill_counts_the_others_writes_and_shows_the_filler_over_quota(tmp_path: Path) -> None:
    sizes = FillSizes(seconds=2, after=0.5, writers=2, seat=SMALL)
    _, details = await run_fill(tmp_path, sizes)
    assert details["hostile"]["n1"]["fill"]["stored"] > 0
    # No refusal at all is the bench's target (`python -m bench --fill`), a race against the guard's
    # reaction that a loaded CI machine can lose once; a bucket pinned full refuses most writes.
    assert all(sum(writes["refused"].values()) <= writes["made"] // 4 for writes in details["others"].values())
    assert all(writes["made"] > 0 for writes in details["others"].values())
    assert all(
        writes["kept"] >= writes["made"] - sum(writes["refused"].values()) for writes in details["others"].values()
    )
    assert details["shown"]["n1"]["verdict"] == "over-quota"
    assert details["commands"] == {"query nodes": ["n1"], "top --once": ["n1"]}
    assert details["bucket"]["end"] < details["bucket"]["bound"]
