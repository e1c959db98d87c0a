"""The mutants of `bench/mutants/` stay usable: each patch still applies to the product as it is,
and each names test files that exist. A patch that no longer applies would let `run.sh` stop on
git's error and the promise it breaks go unchecked."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "bench" / "mutants"
CATCHER = re.compile(r'^\s*\[([\w-]+)\]="([^"]+)"$', re.MULTILINE)


def catchers() -> dict[str, list[str]]:
    return {name: files.split() for name, files in CATCHER.findall((MUTANTS / "run.sh").read_text())}


def test_every_patch_is_named_with_the_tests_that_catch_it_and_they_exist() -> None:
    named = catchers()
    assert sorted(named) == sorted(p.stem for p in MUTANTS.glob("*.patch"))
    missing = [f for files in named.values() for f in files if not (ROOT / f).is_file()]
    assert not missing, f"run.sh names test files that do not exist: {missing}"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git work tree")
@pytest.mark.parametrize("patch", sorted(p.name for p in MUTANTS.glob("*.patch")))
def test_each_patch_still_applies_to_the_product(patch: str) -> None:
    checked = subprocess.run(
        ["git", "apply", "--check", str(MUTANTS / patch)], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert checked.returncode == 0, f"{patch} no longer applies: {checked.stderr}"
