"""deploy/prometheus/dashboard.json, the Grafana dashboard of the fleet: each panel's query runs in
a real Prometheus and reads only series the README lists (which a test checks against what the
seat and a node export)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.helpers import DEPLOY
from tests.prometheus import documented, prometheus

DASHBOARD = DEPLOY / "prometheus" / "dashboard.json"
SERIES = re.compile(r"\b(mesh_(?:node|seat)_[a-z_]+)\b")


def queries() -> list[str]:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def test_the_dashboard_reads_only_documented_series_and_every_panel_is_placed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels) >= 12
    assert all({"h", "w", "x", "y"} <= set(panel["gridPos"]) for panel in panels)
    read = {name for query in queries() for name in SERIES.findall(query)}
    assert read - set(documented()) == set()
    assert {name[:10] for name in read} == {"mesh_node_", "mesh_seat_"}


async def test_every_query_of_the_dashboard_runs(tmp_path: Path) -> None:
    async with prometheus(tmp_path, "global: {scrape_interval: 1s}\n") as api:
        errors = {query: api.error_of(query) for query in queries()}
    assert {query: error for query, error in errors.items() if error is not None} == {}


async def test_a_query_that_does_not_parse_is_told(tmp_path: Path) -> None:
    async with prometheus(tmp_path, "global: {scrape_interval: 1s}\n") as api:
        assert "parse error" in (api.error_of("sum(mesh_node_modules") or "")
