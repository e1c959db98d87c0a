"""`./scripts/test` runs the suite with `--dist loadgroup`, and a test marked `xdist_group` runs on
its group's worker only: the single-file build once, not once per worker. pytest-xdist does that by
adding `@<group>` to the test's id, which pytest 9.2 no longer lets it do, silently (then every
group is spread over every worker)."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("grouped")
def test_a_test_marked_with_a_group_runs_under_its_groups_id(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("run without --dist loadgroup: there are no groups to keep")
    assert request.node.nodeid.endswith("@grouped"), (
        f"{request.node.nodeid}: pytest-xdist did not add its group to the id, so no group is kept together"
    )
