"""package-manager: the machine's package database answers a query (not merely: a tool is on disk).

Each known manager is asked for the version of its own package, which reads its database: dpkg
(`dpkg-query`), rpm, apk. The first that answers is the machine's package manager. An rpm tool on a
Debian machine answers "package rpm is not installed" and so does not count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mesh_host.describing.detect.probe import Capability, Probe, failed
from mesh_host.runner import Ran

NAME = "package-manager"


@dataclass(frozen=True)
class Manager:
    name: str  # how the verdict names it: `dpkg 1.21.22`
    argv: tuple[str, ...]  # asks its database for its own package's version
    version: Callable[[str], str]  # that version, from what it printed ("" if it printed none)


def _apk_version(printed: str) -> str:
    # `apk list --installed apk-tools`: "apk-tools-2.14.4-r0 x86_64 {apk-tools} (GPL-2.0-only) [installed]"
    first = next(iter(printed.split()), "")
    return first.removeprefix("apk-tools-") if first.startswith("apk-tools-") else ""


MANAGERS = (
    Manager("dpkg", ("dpkg-query", "--show", "--showformat=${Version}", "dpkg"), str.strip),
    Manager("rpm", ("rpm", "--query", "--queryformat=%{VERSION}", "rpm"), str.strip),
    Manager("apk-tools", ("apk", "list", "--installed", "apk-tools"), _apk_version),
)


def package_manager(probe: Probe) -> Capability:
    failures: list[str] = []
    for manager in MANAGERS:
        ran = probe.run(*manager.argv)
        version = manager.version(ran.stdout) if ran.ok else ""
        if version:
            return Capability(NAME, True, f"{manager.name} {version} ({manager.argv[0]} answered)")
        if not ran.missing:
            failures.append(_failed(manager, ran))
    tools = ", ".join(manager.argv[0] for manager in MANAGERS)
    return Capability(NAME, False, "; ".join(failures) or f"none of {tools} is installed")


def _failed(manager: Manager, ran: Ran) -> str:
    return f"{manager.argv[0]} answered no version of {manager.name}" if ran.ok else failed(ran)
