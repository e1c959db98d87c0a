"""service-manager: systemd is PID 1 and says its system is up.

PID 1's name is read from /proc/1/comm: a machine without systemd as PID 1 has no service manager
this host can drive, and says what PID 1 is. With systemd as PID 1, `systemctl is-system-running`
is asked the system's state. Its exit code is not the answer: it exits 1 for `degraded` (some unit
failed), which is a working init. `initializing` and `starting` (booting) are working too;
`maintenance` (rescue or emergency), `stopping`, `offline` and `unknown` are not.
"""

from __future__ import annotations

from mesh_host.describing.detect.probe import Capability, Probe, failed, message, why_not_read

NAME = "service-manager"
WORKING = frozenset({"initializing", "starting", "running", "degraded"})


def service_manager(probe: Probe) -> Capability:
    try:
        init = probe.read("/proc/1/comm").strip()
    except OSError as err:
        return Capability(NAME, False, f"cannot read /proc/1/comm: {why_not_read(err)}")
    if init != "systemd":
        return Capability(NAME, False, f"PID 1 is {init or 'unnamed'}, not systemd; {_systemctl_says(probe)}")
    return _systemd_state(probe)


def _systemd_state(probe: Probe) -> Capability:
    ran = probe.run("systemctl", "is-system-running")
    state = ran.stdout.strip().splitlines()[0] if ran.stdout.strip() else ""
    if state in WORKING:
        how = f"{_version(probe)} is {state} (systemctl is-system-running)"
        return Capability(NAME, True, how + (": a working init with failed units" if state == "degraded" else ""))
    if state:
        return Capability(NAME, False, f"PID 1 is systemd, but the system is {state} (systemctl is-system-running)")
    return Capability(NAME, False, f"PID 1 is systemd, but {failed(ran)}")


def _systemctl_says(probe: Probe) -> str:
    ran = probe.run("systemctl", "is-system-running")
    if ran.missing or ran.timed_out:
        return ran.said()
    said = ran.stderr.strip() and message(ran)
    return f"systemctl: {said}" if said else f"systemctl says the system is {ran.stdout.strip() or 'nothing'}"


def _version(probe: Probe) -> str:
    # "systemd 252 (252.22-1~deb12u1)" and the features on the next line
    words = probe.run("systemctl", "--version").stdout.split()
    return " ".join(words[:2]) if words[:1] == ["systemd"] else "systemd"
