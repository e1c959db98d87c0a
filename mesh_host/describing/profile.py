"""`mesh-host profile`: what this machine can be asked to do, each capability detected by asking
the machine something that succeeds only if it works, never assumed from what is installed, and
each verdict saying how it knows. The detectors are in `mesh_host.describing.detect`, one per capability.

    linux/amd64

    yes  package-manager    dpkg 1.21.22 (dpkg-query answered)
    no   container-runtime  docker CLI present, daemon not answering: Cannot connect to the Docker daemon
    ...

    cannot be asked to: [container-runtime service-manager]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from mesh_host.describing.detect import containers, firewall, graphical, overlay, packages, privilege, systemd
from mesh_host.describing.detect.probe import Capability, Probe
from mesh_host.runner import Runner, run

__all__ = ["DETECTORS", "Capability", "Profile", "detect", "platform_of"]

DETECT_TIMEOUT = 5.0  # seconds each command of a detector may take: a daemon that hangs is a "no", not a hang

DETECTORS: tuple[tuple[str, Callable[[Probe], Capability]], ...] = (
    (packages.NAME, packages.package_manager),
    (containers.NAME, containers.container_runtime),
    (systemd.NAME, systemd.service_manager),
    (privilege.NAME, privilege.privileged),
    (firewall.NAME, firewall.firewall),
    (overlay.NAME, overlay.overlay),
    (graphical.NAME, graphical.graphical_session),
)

# uname's machine, as Go and container images name architectures
ARCHITECTURES = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv6l": "arm",
    "armv7l": "arm",
    "armv8l": "arm",
    "i386": "386",
    "i486": "386",
    "i586": "386",
    "i686": "386",
}


@dataclass(frozen=True)
class Profile:
    platform: str  # linux/amd64
    capabilities: list[Capability]

    @property
    def cannot(self) -> list[str]:
        return [capability.name for capability in self.capabilities if not capability.available]

    def render(self) -> str:
        width = max((len(capability.name) for capability in self.capabilities), default=0)
        lines = [
            f"{'yes' if capability.available else 'no':<3}  {capability.name:<{width}}  {capability.how}"
            for capability in self.capabilities
        ]
        return "\n".join([self.platform, "", *lines, "", f"cannot be asked to: [{' '.join(self.cannot)}]"]) + "\n"

    def as_json(self) -> dict[str, object]:
        return {
            "platform": self.platform,
            "capabilities": [asdict(capability) for capability in self.capabilities],
            "cannot": self.cannot,
        }


def detect(
    runner: Runner = run,
    *,
    system: Path = Path("/"),
    environ: Mapping[str, str] | None = None,
    euid: int | None = None,
    timeout: float = DETECT_TIMEOUT,
) -> Profile:
    """Runs every detector (at once: each may wait on a tool up to `timeout`) on this machine, or on
    `system`'s /proc, /sys and /run, with this process's environment and effective uid unless given."""
    probe = Probe(
        runner=runner,
        system=system,
        environ=os.environ if environ is None else environ,
        euid=os.geteuid() if euid is None else euid,
        timeout=timeout,
    )
    with ThreadPoolExecutor(max_workers=len(DETECTORS)) as pool:
        capabilities = list(pool.map(lambda detector: _verdict(probe, *detector), DETECTORS))
    uname = os.uname()
    return Profile(platform_of(uname.sysname, uname.machine), capabilities)


def platform_of(sysname: str, machine: str) -> str:
    """`linux/amd64` from the kernel's uname (`Linux`, `x86_64`), not from how Python was built."""
    return f"{sysname.lower()}/{ARCHITECTURES.get(machine.lower(), machine.lower())}"


def _verdict(probe: Probe, name: str, detector: Callable[[Probe], Capability]) -> Capability:
    try:
        return detector(probe)
    except Exception as err:  # a detector that breaks on an unforeseen machine is its verdict, not the profile's end
        return Capability(name, False, f"the detector failed: {type(err).__name__}: {err}")
