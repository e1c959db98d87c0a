"""`./scripts/test` runs a failed test once more (pytest-rerunfailures), at most three in a run, and
prints each first failure whole: a test that fails once and then passes lets the run pass and is
still shown, to be fixed; one that fails twice fails the run, as a fourth failure does. Checked on a
scratch suite run with the very options `scripts/test` gives."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import clean_environment

REPO = Path(__file__).resolve().parent.parent

FLAKY = """
from pathlib import Path

def test_fails_once_then_passes():
    mark = Path(__file__).with_name("tried")
    if not mark.exists():
        mark.write_text("once")
        assert False, "FIRST-ATTEMPT-FAILED"
"""

BROKEN = """
def test_fails_every_time():
    assert False, "FAILS-EVERY-TIME"
"""

MANY = """
import pytest

@pytest.mark.parametrize("n", range(4))
def test_fails_once_each(n):
    from pathlib import Path
    mark = Path(__file__).with_name(f"tried-{n}")
    if not mark.exists():
        mark.write_text("once")
        assert False, f"FAILED-{n}"
"""


def rerun_options() -> list[str]:
    """The options `scripts/test` gives pytest for reruns (its `RERUNS=(...)` line)."""
    found = re.search(r"^RERUNS=\((.*)\)$", (REPO / "scripts" / "test").read_text(), re.MULTILINE)
    assert found, "scripts/test no longer names its rerun options"
    return found.group(1).split()


def run_scratch(folder: Path, source: str) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    (folder / "test_scratch.py").write_text(source)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *rerun_options()]
    return subprocess.run(
        [*argv, "-q", str(folder)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=clean_environment(),
    )


def test_scripts_test_runs_a_failed_test_once_more_and_at_most_three_in_a_run() -> None:
    assert rerun_options() == ["--reruns", "1", "--max-suite-reruns", "3", "--rerun-show-tracebacks"]


def test_a_test_that_fails_once_passes_the_run_and_its_failure_is_printed(tmp_path: Path) -> None:
    done = run_scratch(tmp_path / "flaky", FLAKY)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 1 rerun" in done.stdout
    assert "rerun test summary info" in done.stdout
    assert "FIRST-ATTEMPT-FAILED" in done.stdout


def test_a_test_that_fails_twice_fails_the_run(tmp_path: Path) -> None:
    done = run_scratch(tmp_path / "broken", BROKEN)
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 rerun" in done.stdout


def test_a_fourth_failure_in_a_run_is_not_run_again(tmp_path: Path) -> None:
    done = run_scratch(tmp_path / "many", MANY)
    assert done.returncode == 1, done.stdout
    assert "1 failed, 3 passed, 3 rerun" in done.stdout
