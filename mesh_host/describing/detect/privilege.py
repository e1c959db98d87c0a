"""privileged: this process runs as root (effective uid 0), so it can write any path and manage
units and the firewall. Capabilities granted without uid 0 are not counted."""

from __future__ import annotations

import pwd

from mesh_host.describing.detect.probe import Capability, Probe

NAME = "privileged"


def privileged(probe: Probe) -> Capability:
    if probe.euid == 0:
        return Capability(NAME, True, "effective uid 0")
    return Capability(NAME, False, f"effective uid {probe.euid}{_named(probe.euid)}, not 0")


def _named(uid: int) -> str:
    try:
        return f" ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return ""
