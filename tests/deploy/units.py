"""deploy/systemd's units as the tests read them: where each is, its settings, systemd-analyze's verdict on them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.helpers import DEPLOY

UNITS = {
    "seat": DEPLOY / "systemd" / "mesh-provisioner.service",
    "client": DEPLOY / "systemd" / "mesh-provisioner-client.service",
    "provider": DEPLOY / "systemd" / "mesh-postgres-provisioner.service",
}
PROGRAMS = Path("/opt/mesh-provisioner/bin")


def unit_settings(unit: Path) -> dict[str, list[str]]:
    """Each `Key=value` of a unit (continuation lines joined), every value of a repeated key."""
    text = re.sub(r"\\\n\s*", " ", unit.read_text())
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def verify(analyze: str, root: Path, *units: str) -> subprocess.CompletedProcess[str]:
    paths = [f"/etc/systemd/system/{unit}" for unit in units]
    command = [analyze, "verify", "--man=no", f"--root={root}", *paths]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
