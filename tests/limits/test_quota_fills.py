"""Nodes filling the needs bucket as fast as they can, each a process of its own beside the seat's
(`bench.fill`, as `python -m bench --fill` runs it at the defaults for 60 s, here at sizes a test
waits for), while n2 and the seat put their own keys every 0.1 s: every one of those writes is
acknowledged and its key is in the bucket at the end, and each filler is shown over quota by
`what=nodes`, on its line of `query nodes` and of `top --once`, and once in the seat's log.

By headers (a put of `{}` under 60 KB of them): the seat used to read each block whole, twice (its
watch, then a count that followed the node's writes for as long as they came), on the connection
its views read by, and fell behind until the bucket was full. By many small keys: the keys' quota
cuts the node back. By five nodes at once: each is cut back at its own quota, and the nodes' share
of the bucket is never reached.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.fill import FillSizes, run_fill

MiB = 1024 * 1024
# The bench's sizes at a quarter, so that a fill of a few seconds does what its 60 s do at the defaults: a
# filler writing 15 to 35 MB/s passes its quota within the first second, and fills the nodes' share of
# 32 MiB (24 MiB) in one or two if the seat falls behind; five quotas (20 MiB) stay under that share.
LARGE = {"bucket_max_bytes": 32 * MiB, "node_quota_keys": 2_000, "node_quota_bytes": 4 * MiB}
# Small keys fill by count: 500 of them hold ~75 KB; the bucket holds ~14,000.
SMALL = {"bucket_max_bytes": 2 * MiB, "node_quota_keys": 500, "node_quota_bytes": MiB // 4}
SECONDS = 5.0
AFTER = 3.0  # n2 and the seat keep writing this long after the fill: past the seat's purge of it

FILLS = [
    pytest.param(
        FillSizes(seconds=SECONDS, after=AFTER, in_headers=True, value_bytes=60_000, seat=LARGE), id="by 60 KB headers"
    ),
    pytest.param(FillSizes(seconds=SECONDS, after=AFTER, value_bytes=64, seat=SMALL), id="by many small keys"),
    pytest.param(FillSizes(seconds=SECONDS, after=AFTER, fillers=5, writers=4, seat=LARGE), id="by five nodes at once"),
]


@pytest.mark.slow
@pytest.mark.parametrize("jwt", [False, True], ids=["static", "jwt"])
@pytest.mark.parametrize("sizes", FILLS)
async def test_every_write_of_the_others_is_stored_while_nodes_fill_the_bucket(
    tmp_path: Path, sizes: FillSizes, jwt: bool
) -> None:
    _, details = await run_fill(tmp_path, replace(sizes, jwt=jwt))
    others: dict[str, dict[str, Any]] = details["others"]
    assert all(writes["made"] >= 10 * SECONDS * 0.5 for writes in others.values()), others
    assert [writes["refused"] for writes in others.values()] == [{}, {}]
    # Every acknowledged write's key is in the bucket (and one more, a put in flight when the writer stopped).
    assert all(writes["kept"] >= writes["made"] for writes in others.values()), others
    fillers = sorted(details["hostile"])
    assert {node: shown["verdict"] for node, shown in details["shown"].items()} == dict.fromkeys(fillers, "over-quota")
    assert details["commands"] == {"query nodes": fillers, "top --once": fillers}
    assert details["seat_log"]["over quota"] == len(fillers)  # once each
    assert sum(filler["fill"]["stored_bytes"] for filler in details["hostile"].values()) > 0
