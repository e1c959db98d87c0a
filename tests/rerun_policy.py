"""Which tests may be run once more after a failure, and the line that says when one was.

`scripts/test` runs a failed test once more (pytest-rerunfailures) to keep a race in a test's own
timing from failing a whole run. A suite whose failure can be a race in the product is never run
again: isolation, attacks, quotas, rollouts, sites and faults. A race there that fails one run in
three would pass CI on a rerun, and these suites exist to catch exactly that. Their tests are
marked `flaky(reruns=0)` at collection; a test of theirs that asks for a rerun of its own is refused
before anything runs.

Every test that did need its rerun is named, with the first line of its first failure, in one
summary line at the end of the run, so that CI's output says it.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import PurePosixPath

import pytest
from pytest_rerunfailures import get_reruns_count

# The folders of tests/ whose every test runs once: the suites are grouped by concern.
NO_RERUN_FOLDERS = ("isolation", "limits", "sites", "rollouts", "faults")

# File names (anywhere under tests/) of the suites that run once, in the folders of the units too.
NO_RERUN = (
    # isolation: what one party's credentials reach of another's
    "test_*isolation*.py",
    "test_cross_node_oracle.py",
    "test_permissions.py",
    "test_scope.py",
    "test_grants_push_foreign.py",
    "test_vault_contract.py",
    # attacks: a hostile party's bytes
    "test_*hostile*.py",
    # quotas and the limits the bus enforces
    "test_*quota*.py",
    "test_*limits*.py",
    "test_full_bucket.py",
    "test_fill.py",
    # rollouts: at most N at once, no action twice
    "test_*rollout*.py",
    # sites: nothing lost, nothing written twice over a cut link
    "test_*site*.py",
    "test_sites_*.py",
    # faults: restarts, failovers, leases, writes given up on
    "test_outage.py",
    "test_*fault*.py",
    "test_restart_soak.py",
    "test_cluster.py",
    "test_*lease*.py",
    "test_*late_writes.py",
    "test_reconnect.py",
    "test_scope_writes.py",
    "test_shutdown.py",
)


def reruns_forbidden(path: PurePosixPath) -> bool:
    in_folder = len(path.parts) >= 3 and path.parts[-3] == "tests" and path.parts[-2] in NO_RERUN_FOLDERS
    return in_folder or any(fnmatch(path.name, pattern) for pattern in NO_RERUN)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    asking = []
    for item in items:
        if not reruns_forbidden(PurePosixPath(item.path)):
            continue
        if item.get_closest_marker("flaky") is not None:
            asking.append(item.nodeid)
        item.add_marker(pytest.mark.flaky(reruns=0))
    if asking:
        raise pytest.UsageError(
            f"a test of a suite that runs once asks for a rerun (flaky marker): {', '.join(asking)}; "
            "its failure may be a race in the product (tests/rerun_policy.py)"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for the tests that passed when run again, one for those that failed again: a test
    failing every time is no flake, and is not said to have passed."""
    reruns = terminalreporter.stats.get("rerun", [])
    firsts = {report.nodeid: _first_line(report) for report in reversed(reruns)}
    failed = {report.nodeid for report in terminalreporter.stats.get("failed", [])}
    for outcome, nodeids in (
        ("passed only when run again", sorted(set(firsts) - failed)),
        ("failed again when run again", sorted(set(firsts) & failed)),
    ):
        if nodeids:
            named = "; ".join(f"{nodeid} (first failure: {firsts[nodeid]})" for nodeid in nodeids)
            terminalreporter.write_line(f"RERUN SUMMARY: {len(nodeids)} test(s) {outcome}: {named}")


def _first_line(report: pytest.TestReport) -> str:
    return failure_line(str(report.longrepr or ""))


# An exception as a traceback ends on it, inside an exception group's `|` borders too:
# `registry.errors.NoResponders: request …`.
_RAISED = re.compile(r"^[\s|]*((?:[A-Za-z_]\w*\.)*[A-Z]\w*: .+)$")


def failure_line(text: str) -> str:
    """The line that says what failed: pytest's first `E` line, else the last exception a traceback
    names (an exception group's borders are not one), else its last line."""
    lines = text.strip().splitlines()
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    raised = [m.group(1) for m in map(_RAISED.match, lines) if m]
    return (errors[0] if errors else raised[-1] if raised else lines[-1] if lines else "no traceback")[:200]


def reruns_of(item: pytest.Item) -> int:
    """The reruns pytest-rerunfailures will give this item."""
    return int(get_reruns_count(item) or 0)
