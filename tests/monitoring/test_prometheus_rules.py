"""deploy/prometheus: the alert rules pass `promtool check rules`, their unit tests pass `promtool
test rules`, every alert is tested firing and quiet, and every series they read is one the seat or the node exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.metrics import SeatMetrics, SeatWork
from provisioner.seat.buckets import seat_buckets
from provisioner.seat.registry_sync import CompileCounts
from provisioner.verb.paging import PageCache
from provisioner.verb.stats import RequestStats
from provisioner_client.metrics import NodeMetrics
from registry.wire import Bus
from tests.helpers import DEPLOY

RULES = DEPLOY / "prometheus" / "rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "rules.test.yml"
ALERT = re.compile(r"^\s*- alert: (\w+)$", re.MULTILINE)
EXPECTED = re.compile(r"alertname: (\w+)\n\s*exp_alerts:( \[\])?")
SERIES = re.compile(r"\b(mesh_(?:node|seat)_[a-z_]+)\b")


def promtool(*args: str) -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (scripts/test does as root)")
    done = subprocess.run([found, *args], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_are_valid() -> None:
    assert f"SUCCESS: {len(ALERT.findall(RULES.read_text()))} rules found" in promtool("check", "rules", str(RULES))


def test_the_rules_unit_tests_pass() -> None:
    assert "SUCCESS" in promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_is_tested_firing_and_quiet() -> None:
    alerts = set(ALERT.findall(RULES.read_text()))
    cases = EXPECTED.findall(RULE_TESTS.read_text())
    firing = {name for name, quiet in cases if not quiet}
    silent = {name for name, quiet in cases if quiet}
    assert len(alerts) >= 10
    assert (alerts - firing, alerts - silent, {name for name, _ in cases} - alerts) == (set(), set(), set())


async def test_the_rules_read_only_series_the_seat_and_the_node_export(tmp_path: Path, bus: Bus) -> None:
    node = NodeMetrics("n1", tmp_path).registry
    work = SeatWork(RequestStats(), CompileCounts(), PageCache())
    work.requests.answered("needs", "500", 0.01)  # a counter's samples show once counted
    seat = SeatMetrics({"data": bus, "verb": bus}, None, seat_buckets(), work=work).registry
    families = [family for registry in (node, seat) for family in registry.collect()]
    exported = {family.name for family in families} | {sample.name for f in families for sample in f.samples}
    read = set(SERIES.findall(RULES.read_text()))
    assert {name[: len("mesh_node_")] for name in read} == {"mesh_node_", "mesh_seat_"}
    assert read - exported == set()
