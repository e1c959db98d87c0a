"""`./scripts/test` runs a failed test once more (pytest-rerunfailures), at most three in a run, and
prints each first failure whole: a test that fails once and then passes lets the run pass and is
still shown, to be fixed; one that fails twice fails the run, as a fourth failure does. The suites
whose failure can be a race in the product (tests/rerun_policy.py) are never run again. Checked on
scratch suites run with the very options `scripts/test` gives."""

from __future__ import annotations

import re
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

import pytest

from tests.helpers import clean_environment
from tests.rerun_policy import NO_RERUN, NO_RERUN_FOLDERS, failure_line, reruns_forbidden, reruns_of

REPO = Path(__file__).resolve().parents[2]
# Each scratch run starts pytest with the plugins `scripts/test` loads but hypothesis's: no scratch
# suite holds a property test, and importing hypothesis took 0.6 s of the 1.1 s of CPU a run took.
PLUGINS = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"]

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
    argv = [sys.executable, "-m", "pytest", *PLUGINS, *rerun_options()]
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


ONCE_IN_A_SUITE_THAT_RUNS_ONCE = FLAKY

ASKS_FOR_A_RERUN = """
import pytest

@pytest.mark.flaky(reruns=2)
def test_asks():
    pass
"""


def run_named(folder: Path, name: str, source: str) -> subprocess.CompletedProcess[str]:
    """A scratch suite of one file, under the test command's rerun options and the rerun policy."""
    folder.mkdir()
    (folder / name).write_text(source)
    argv = [sys.executable, "-m", "pytest", *PLUGINS, "-p", "tests.rerun_policy", *rerun_options()]
    return subprocess.run(
        [*argv, "-q", str(folder)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean_environment(), "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize("name", ["test_isolation.py", "test_hostile.py", "test_quotas.py", "test_site_resume.py"])
def test_a_suite_that_runs_once_fails_the_run_on_its_first_failure(tmp_path: Path, name: str) -> None:
    done = run_named(tmp_path / "once", name, ONCE_IN_A_SUITE_THAT_RUNS_ONCE)
    assert done.returncode == 1, done.stdout
    assert "1 failed" in done.stdout and "rerun" not in done.stdout.split("short test summary")[-1]


def test_a_rerun_asked_for_in_a_suite_that_runs_once_refuses_the_whole_run(tmp_path: Path) -> None:
    done = run_named(tmp_path / "asks", "test_fleet_isolation.py", ASKS_FOR_A_RERUN)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "asks for a rerun" in done.stderr


@pytest.mark.parametrize(
    ("name", "source", "status", "line"),
    [
        pytest.param(
            "test_elsewhere.py",
            FLAKY,
            0,
            "RERUN SUMMARY: 1 test(s) passed only when run again: "
            "test_elsewhere.py::test_fails_once_then_passes (first failure: AssertionError: FIRST-ATTEMPT-FAILED)",
            id="passed when run again",
        ),
        pytest.param(
            "test_broken.py",
            BROKEN,
            1,
            "RERUN SUMMARY: 1 test(s) failed again when run again: "
            "test_broken.py::test_fails_every_time (first failure: AssertionError: FAILS-EVERY-TIME)",
            id="failed again: never said to have passed",
        ),
    ],
)
def test_a_test_run_again_is_named_in_one_summary_line_with_its_outcome(
    tmp_path: Path, name: str, source: str, status: int, line: str
) -> None:
    done = run_named(tmp_path / "scratch", name, source)
    assert done.returncode == status, done.stdout
    summary = [found for found in done.stdout.splitlines() if found.startswith("RERUN SUMMARY:")]
    assert summary == [line], done.stdout


def test_no_test_of_a_suite_that_runs_once_is_given_a_rerun(request: pytest.FixtureRequest) -> None:
    """Over every test this session collected (the whole suite under `scripts/test`)."""
    once = [item for item in request.session.items if reruns_forbidden(PurePosixPath(item.path))]
    given = [item.nodeid for item in once if reruns_of(item)]
    assert given == []


def test_every_pattern_of_the_suites_that_run_once_names_a_test_file() -> None:
    files = [PurePosixPath(path) for path in (REPO / "tests").rglob("test_*.py")]
    stale = [pattern for pattern in NO_RERUN if not any(fnmatch(path.name, pattern) for path in files)]
    assert stale == []


def test_each_folder_of_the_suites_that_run_once_holds_tests_and_all_of_them_run_once() -> None:
    for folder in NO_RERUN_FOLDERS:
        files = sorted((REPO / "tests" / folder).glob("test_*.py"))
        assert files, f"tests/{folder} holds no test file"
        assert all(reruns_forbidden(PurePosixPath(path)) for path in files), folder


def test_the_summary_names_what_an_exception_group_raised_not_its_border() -> None:
    grouped = """+ Exception Group Traceback (most recent call last):
  |   File "tests/helpers.py", line 150, in serving
  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |     raise errors.NoRespondersError
    | nats.errors.NoRespondersError: nats: no responders available for request
    |
    | The above exception was the direct cause of the following exception:
    |
    | registry.errors.NoResponders: request mesh-provisioner.provisioning: nobody answered
    +------------------------------------"""
    assert (
        failure_line(grouped) == "registry.errors.NoResponders: request mesh-provisioner.provisioning: nobody answered"
    )
    assert failure_line("x\nE   assert 1 == 2\nE   more") == "assert 1 == 2"
    assert failure_line("") == "no traceback"
