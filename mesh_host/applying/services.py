"""Services: systemd units through `systemctl`, run by the runner, judged by what they are.

A unit is judged by `systemctl show -p LoadState,ActiveState,UnitFileState,NeedDaemonReload`, not
by `is-active`'s exit code: a unit that does not exist (`LoadState=not-found`) is not a unit that
is stopped. Running is `ActiveState` active or reloading; enabled is `UnitFileState` enabled or
enabled-runtime. A unit that is masked, fails to load, or is static (no [Install] section) while
declared enabled is a failed step saying so: the host does not unmask or invent what it did not
declare.
"""

from __future__ import annotations

from dataclasses import dataclass

from mesh_host.applying.footprint import Before
from mesh_host.errors import MeshHostError
from mesh_host.runner import Ran, Runner, run

PROPERTIES = ("LoadState", "ActiveState", "UnitFileState", "NeedDaemonReload")
RUNNING = frozenset({"active", "reloading"})
ENABLED = frozenset({"enabled", "enabled-runtime"})
UNINSTALLABLE = frozenset({"static", "indirect", "generated", "transient"})  # enable/disable cannot change them
ACT_TIMEOUT = 120.0  # seconds: a start waits for the unit's own start-up


class ServiceFailed(MeshHostError):
    """`systemctl` could not tell or do what a service step needs, for `why`."""

    def __init__(self, unit: str, why: str) -> None:
        super().__init__(unit, why)
        self.unit = unit
        self.why = why

    def __str__(self) -> str:
        return f"{self.unit}: {self.why}"


@dataclass(frozen=True)
class UnitState:
    """What systemd says a unit is."""

    load: str
    active: str
    unit_file: str
    need_reload: bool = False

    @property
    def exists(self) -> bool:
        return self.load != "not-found"

    @property
    def running(self) -> bool:
        return self.active in RUNNING

    @property
    def enabled(self) -> bool:
        return self.unit_file in ENABLED

    @property
    def before(self) -> Before:
        return Before(running=self.running, enabled=self.enabled)

    def said(self) -> str:
        return f"LoadState={self.load} ActiveState={self.active} UnitFileState={self.unit_file or '(none)'}"


@dataclass(frozen=True)
class Systemctl:
    """systemctl, through a runner (a fake one in tests)."""

    runner: Runner = run

    def state(self, unit: str) -> UnitState:
        ran = self._run("show", f"--property={','.join(PROPERTIES)}", "--", unit)
        said = dict(line.partition("=")[::2] for line in ran.stdout.splitlines() if "=" in line)
        if "LoadState" not in said:
            raise ServiceFailed(unit, f"systemctl show said no LoadState: {ran.stdout.strip()[:200]!r}")
        return UnitState(
            load=said["LoadState"],
            active=said.get("ActiveState", ""),
            unit_file=said.get("UnitFileState", ""),
            need_reload=said.get("NeedDaemonReload") == "yes",
        )

    def act(self, verb: str, unit: str) -> None:
        self._run(verb, "--", unit, timeout=ACT_TIMEOUT)

    def reload(self) -> None:
        self._run("daemon-reload", timeout=ACT_TIMEOUT)

    def _run(self, *argv: str, timeout: float | None = None) -> Ran:
        command = ("systemctl", "--no-ask-password", *argv)
        ran = self.runner(command) if timeout is None else self.runner(command, timeout=timeout)
        if not ran.ok:
            subject = argv[-1] if argv[-2:-1] == ("--",) else "systemd"
            raise ServiceFailed(subject, f"systemctl {argv[0]}: {ran.said()}")
        return ran


def verbs_toward(unit: str, state: UnitState, *, running: bool, enabled: bool | None) -> tuple[str, ...]:
    """The systemctl verbs that bring a unit from `state` to what is declared, enabling before starting
    (`enabled` None: its enablement is left as it is)."""
    _can_be_declared(unit, state, enabled=enabled)
    verbs = []
    if enabled is not None and enabled != state.enabled and state.unit_file not in UNINSTALLABLE:
        verbs.append("enable" if enabled else "disable")
    if running and not state.running:
        verbs.append("start")
    if not running and (state.running or state.active == "activating"):
        verbs.append("stop")
    return tuple(verbs)


def _can_be_declared(unit: str, state: UnitState, *, enabled: bool | None) -> None:
    if not state.exists:
        raise ServiceFailed(
            unit, f"no such unit here ({state.said()}): install its unit file, or declare it as a file before"
        )
    if state.load == "masked" or state.unit_file.startswith("masked"):
        raise ServiceFailed(unit, f"it is masked ({state.said()}): the host does not unmask what it did not mask")
    if state.load != "loaded":
        raise ServiceFailed(unit, f"its unit does not load ({state.said()}): see systemctl status {unit}")
    if enabled and state.unit_file in UNINSTALLABLE:
        raise ServiceFailed(
            unit, f"it cannot be enabled ({state.said()}): a {state.unit_file} unit has no [Install] to enable"
        )


def verbs_back(state: UnitState, before: Before, *, enablement: bool = True) -> tuple[str, ...]:
    """The verbs that return a unit no longer declared to how the host first found it (its enablement
    only when the host ever declared it: `enablement`).

    A unit whose file is gone is stopped if the host had started it, and nothing more: there is no
    unit file left to disable, which is not a failure.
    """
    verbs = []
    returnable = state.exists and state.unit_file in ENABLED | {"disabled"}
    if enablement and returnable and state.enabled != before.enabled:
        verbs.append("enable" if before.enabled else "disable")
    if state.running and not before.running:
        verbs.append("stop")
    if state.exists and state.load == "loaded" and before.running and not state.running:
        verbs.append("start")
    return tuple(verbs)
