"""The `metrics` part of `python -m bench` (what a scrape costs the seat) runs end to end at tiny sizes,
so that CI runs its code: the seat with its endpoint, the fleet counted at a scrape, rounds with and
without the scraper, the figures in the report and its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import PARTS, results_file, run_parts
from bench.metrics import PART, MetricsSizes, nodes_counted

TINY = MetricsSizes(nodes=30, modules=2, rounds=2, workers=5, per_worker=100, every=0.05, scrapes=3)


def test_the_whole_bench_includes_the_part_and_its_run_alone_has_a_file_of_its_own() -> None:
    assert PART in PARTS
    assert results_file(scale=False, parts=[PART]).name == f"latest.{PART}.json"


async def test_the_part_counts_the_fleet_and_shows_each_side_and_the_verdict(tmp_path: Path) -> None:
    report = await run_parts(tmp_path, quick=True, parts=[PART], metrics_sizes=TINY)
    report.save(tmp_path / "figures.json")
    saved = json.loads((tmp_path / "figures.json").read_text())["figures"]
    shown = {figure["name"]: figure for figure in saved}
    assert shown["scrape cost: fleet counted at each scrape (2 modules a node)"]["value"] == 30
    assert shown["scrape cost: seat CPU a scrape, alone"]["value"] >= 0
    without = shown["scrape cost: throughput without scraping (5 requesters, median of 2)"]["value"]
    scraping = shown["scrape cost: throughput scraping every 0.05 s (5 requesters, median of 2)"]["value"]
    assert without > 0 and scraping > 0
    ratio = shown["scrape cost: throughput scraping / without"]
    assert ratio["value"] == pytest.approx(scraping / without)
    assert ratio["target"] == ">= 0.95" and ratio["met"] == (ratio["value"] >= 0.95)
    assert shown["scrape cost: throughput scraping / without, median of the 2 pairs"]["value"] > 0
    assert shown["scrape cost: seat CPU a request, without scraping"]["value"] > 0
    assert shown["scrape cost: seat CPU a request, scraping every 0.05 s"]["value"] > 0
    assert shown["scrape cost: scrapes made in the 2 scraped rounds"]["value"] >= 1


def test_a_scrape_counts_the_nodes_of_every_verdict() -> None:
    text = "\n".join(
        [
            "# HELP mesh_seat_nodes nodes by the seat's verdict",
            'mesh_seat_nodes{verdict="healthy"} 997.0',
            'mesh_seat_nodes{verdict="stale"} 2.0',
            'mesh_seat_nodes{verdict="gone"} 1.0',
            'mesh_seat_nodes{verdict="over_quota"} 0.0',
            "mesh_seat_fleet_ready 1.0",
        ]
    )
    assert nodes_counted(text) == 1000
