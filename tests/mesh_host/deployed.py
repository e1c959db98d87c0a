"""deploy/host's declarations as the tests read them: resources by path or unit, units' settings,
and a temporary root standing for a bare systemd machine."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.helpers import DEPLOY

HOST = DEPLOY / "host"
DECLARATIONS = {"node": HOST / "node.json", "seat": HOST / "seat.json"}
# What a systemd machine has before anything of ours: the folders the declarations lay files into.
MACHINE_FOLDERS = ("etc/systemd/system", "usr/lib/sysusers.d", "run")


def resources(role: str) -> dict[str, dict[str, Any]]:
    """The declaration's resources by path (directories, files) or unit (services)."""
    listed: list[dict[str, Any]] = json.loads(DECLARATIONS[role].read_text())["resources"]
    return {resource.get("path") or resource["unit"]: resource for resource in listed}


def content(role: str, path: str) -> str:
    resource = resources(role)[path]
    assert resource["type"] == "file", f"{path} is declared as a {resource['type']}"
    text: str = resource["content"]
    return text


def unit_settings(text: str) -> dict[str, list[str]]:
    """Each `Key=value` of a unit's text (continuation lines joined), every value of a repeated key."""
    found: dict[str, list[str]] = {}
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def bare_machine(root: Path) -> Path:
    """`root` with the folders of a bare systemd machine, for `--root`."""
    for folder in MACHINE_FOLDERS:
        (root / folder).mkdir(parents=True)
    return root
