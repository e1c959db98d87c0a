"""graphical-session: a Wayland or X11 session is there to show things to a person.

First the environment's own session: the compositor's socket named by WAYLAND_DISPLAY (under
XDG_RUNTIME_DIR), or the X server's named by DISPLAY (/tmp/.X11-unix/X<n>), is connected to: a
socket left behind by a session that ended refuses. A DISPLAY on another host (ssh's forwarding)
is not this machine's session. Then the machine's: logind is asked for an active session of type
wayland or x11 (a host run by a unit has no session in its environment, but the machine may).
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from mesh_host.describing.detect.probe import Capability, Probe, failed

NAME = "graphical-session"
GRAPHICAL = frozenset({"wayland", "x11", "mir"})
LOCAL_DISPLAY = re.compile(r"^(?:unix)?:(\d+)(?:\.\d+)?$")
X11_SOCKETS = "/tmp/.X11-unix"  # noqa: S108  # where every X server listens, not a file we make
CONNECT_TIMEOUT = 1.0  # seconds: a compositor or X server accepts at once, or not at all


def graphical_session(probe: Probe) -> Capability:
    found, how = _in_environment(probe)
    if found:
        return Capability(NAME, True, how)
    logind_found, logind_how = _from_logind(probe)
    return Capability(NAME, logind_found, logind_how if logind_found else f"{how}; {logind_how}")


def _in_environment(probe: Probe) -> tuple[bool, str]:
    checks = []
    if wayland := probe.environ.get("WAYLAND_DISPLAY"):
        checks.append(_wayland(probe, wayland))
    if display := probe.environ.get("DISPLAY"):
        checks.append(_x11(probe, display))
    if not checks:
        return False, "no WAYLAND_DISPLAY or DISPLAY in the environment"
    working = [how for found, how in checks if found]
    return (True, working[0]) if working else (False, "; ".join(how for _, how in checks))


def _wayland(probe: Probe, name: str) -> tuple[bool, str]:
    runtime = probe.environ.get("XDG_RUNTIME_DIR", "")
    if not name.startswith("/") and not runtime:
        return False, f"WAYLAND_DISPLAY={name} but XDG_RUNTIME_DIR is unset"
    where = name if name.startswith("/") else f"{runtime.rstrip('/')}/{name}"
    return _answers(probe, where, "Wayland compositor", "WAYLAND_DISPLAY")


def _x11(probe: Probe, display: str) -> tuple[bool, str]:
    local = LOCAL_DISPLAY.match(display)
    if not local:
        return False, f"DISPLAY={display} is a display on another host, not this machine's session"
    return _answers(probe, f"{X11_SOCKETS}/X{local.group(1)}", "X server", f"DISPLAY={display}")


def _answers(probe: Probe, where: str, what: str, named_by: str) -> tuple[bool, str]:
    refused = _connect(probe.path(where))
    if refused:
        return False, f"{what} socket {where} ({named_by}): {refused}"
    return True, f"{what} accepting connections on {where} ({named_by})"


def _connect(path: Path) -> str:
    """Why connecting to the socket at `path` failed, or "" if it accepted."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(CONNECT_TIMEOUT)
        try:
            client.connect(str(path))
        except OSError as err:
            return err.strerror or type(err).__name__
    return ""


def _from_logind(probe: Probe) -> tuple[bool, str]:
    listed = probe.run("loginctl", "list-sessions", "--no-legend")
    if not listed.ok:
        return False, failed(listed)
    ids = [line.split()[0] for line in listed.stdout.splitlines() if line.split()]
    if not ids:
        return False, "logind has no sessions"
    shown = probe.run("loginctl", "show-session", *ids, "-p", "Id", "-p", "Name", "-p", "Type", "-p", "Active")
    if not shown.ok:
        return False, failed(shown)
    return _judge(_sessions(shown.stdout))


def _sessions(printed: str) -> list[dict[str, str]]:
    """`loginctl show-session 2 3 -p ...`: a block of Key=value lines per session, each from Id=."""
    sessions: list[dict[str, str]] = []
    for line in printed.splitlines():
        key, _, value = line.partition("=")
        if key == "Id":
            sessions.append({})
        if sessions and key:
            sessions[-1][key] = value
    return sessions


def _judge(sessions: list[dict[str, str]]) -> tuple[bool, str]:
    graphical = [s for s in sessions if s.get("Type") in GRAPHICAL]
    for session in graphical:
        if session.get("Active") == "yes":
            return True, f"logind: session {_called(session)} is an active {session['Type']} session"
    if graphical:
        return False, "logind: " + ", ".join(f"session {_called(s)} is {s['Type']}, not active" for s in graphical)
    types = sorted({s.get("Type", "?") for s in sessions})
    return False, f"logind: no wayland or x11 session among {len(sessions)} ({', '.join(types)})"


def _called(session: dict[str, str]) -> str:
    return f"{session.get('Id', '?')} ({session.get('Name', '?')})"
