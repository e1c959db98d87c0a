"""The fixtures of the tests of deploy/: systemd-analyze and a root to run it on."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.deploy.units import PROGRAMS, UNITS


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    return found or pytest.fail("systemd-analyze is missing: scripts/test installs it (apt-get install systemd)")


@pytest.fixture(scope="module")
def analyze() -> str:
    return _systemd_analyze()


@pytest.fixture
def system_root(tmp_path: Path) -> Path:
    """A root for `--root`: systemd's own units, ours in /etc/systemd/system, and the programs where
    the units run them (this virtualenv's console scripts, copied: a link would point outside)."""
    root = tmp_path / "root"
    own = next((d for d in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if d.is_dir()), None)
    if own is None:
        pytest.skip("systemd's own units are not installed here (sysinit.target and friends)")
    shutil.copytree(own, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in UNITS.values():
        shutil.copyfile(unit, root / "etc/systemd/system" / unit.name)
    programs = root / PROGRAMS.relative_to("/")
    programs.mkdir(parents=True)
    for name in ("mesh-provisioner", "mesh-provisioner-client", "mesh-postgres-provisioner"):
        shutil.copy2(Path(sys.executable).parent / name, programs / name)
    return root
