"""container-runtime: a container engine answers (not merely: its client is on disk).

Docker's daemon is asked its version (`docker version --format {{.Server.Version}}`), which only
the daemon can answer: a docker CLI whose daemon is down, or refuses this user, is no runtime and
the verdict carries the daemon's message. Podman has no daemon: `podman info` answers only when its
storage and runtime work for this user.
"""

from __future__ import annotations

from mesh_host.describing.detect.probe import Capability, Probe, failed, message
from mesh_host.runner import Ran

NAME = "container-runtime"
DOCKER = ("docker", "version", "--format", "{{.Server.Version}}")
PODMAN = ("podman", "info", "--format", "{{.Version.Version}}")


def container_runtime(probe: Probe) -> Capability:
    docker = probe.run(*DOCKER)
    if docker.ok and docker.stdout.strip():
        return Capability(NAME, True, f"docker {docker.stdout.strip()} (the daemon answered its version)")
    podman = probe.run(*PODMAN)
    if podman.ok and podman.stdout.strip():
        return Capability(NAME, True, f"podman {podman.stdout.strip()} (podman info answered)")
    reasons = [_docker_down(docker)] if not docker.missing else []
    reasons += [_podman_down(podman)] if not podman.missing else []
    return Capability(NAME, False, "; ".join(reasons) or "neither docker nor podman is installed")


def _docker_down(docker: Ran) -> str:
    return (
        "docker answered no server version"
        if docker.ok
        else f"docker CLI present, daemon not answering: {message(docker)}"
    )


def _podman_down(podman: Ran) -> str:
    return "podman answered no version" if podman.ok else f"podman present, not working: {failed(podman)}"
