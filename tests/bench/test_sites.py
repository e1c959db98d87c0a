"""`python -m bench --sites` at tiny sizes: the wiring of the figures across sites (a hub and
two sites on their generated files, the relay in between, a seat at each) cannot rot. Speed is not
asserted here; what is asserted holds at any size: nothing written by an unchanged reconcile,
nothing of a site's asked by the hub's seat, every registered node healthy at the hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import sites
from bench.sites import SitesSizes, mesh_file

TINY = SitesSizes(sites=2, nodes=2, rate=20.0, modules=2, reconciles=2, asked=5)


def test_the_mesh_file_places_each_registering_node_at_one_site() -> None:
    text = mesh_file(SitesSizes(sites=3, nodes=2), relay=1, leaf=2)
    assert 'nodes = ["nsite", "n00000", "n00001"]' in text
    assert 'nodes = ["n00002", "n00003"]' in text and 'nodes = ["n00004", "n00005"]' in text
    assert '"nhub"' in text.splitlines()[0] and '"n00011"' in text.splitlines()[0]  # 6 more at the hub
    assert '"n00006"' not in "".join(text.splitlines()[1:])


@pytest.mark.slow
def test_bench_sites_reports_every_figure_with_its_verdict(tmp_path: Path) -> None:
    out = tmp_path / "sites.json"
    sites(out, TINY)
    document = json.loads(out.read_text())
    figures = {figure["name"]: figure for figure in document["figures"]}
    assert figures["unchanged reconciles: the nodes' KV writes (all 4)"]["value"] == 0
    assert figures["unchanged reconciles: env files written"]["value"] == 0
    assert figures["site requests the hub's seat answered"]["value"] == 0
    assert figures["2 site reconciles: verb requests the hub's seat answered"]["value"] == 0
    for where in ("at the sites", "at the hub"):
        assert figures[f"nodes registered {where} the hub's seat calls healthy"]["value"] == TINY.sites * TINY.nodes
    ratios = ["unchanged reconcile, site / hub (medians)", "what=registry, site / hub (p50s)"]
    assert all(figures[name]["target"] and figures[name]["met"] is not None for name in ratios)
    assert set(document["registrations"]["at the sites"]) == {"site 1", "site 2"}
    assert document["sizes"]["delay"] == TINY.delay
