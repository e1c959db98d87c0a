"""`bench.durability` runs end to end at a tiny size, so that CI runs its code (no figure judged)."""

from __future__ import annotations

from pathlib import Path

from bench.durability import SYNCS, put_rates


async def test_the_put_rates_are_measured_with_each_sync_interval(tmp_path: Path) -> None:
    rates = await put_rates(tmp_path, writes=20, in_flight=4)
    assert set(rates) == set(SYNCS)
    assert all(rate > 0 for by_way in rates.values() for rate in by_way.values())
