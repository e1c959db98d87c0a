"""overlay: this machine is on the overlay network, the private network the mesh's machines reach
one another over whatever lies between them. It is one of WireGuard (the kernel's, or
wireguard-go's tun device named wg*), Tailscale (tailscale*), Nebula (nebula*) or ZeroTier (zt*),
and is known by its interface in /sys/class/net: a kernel WireGuard interface by its device type,
the others by their tun or tap device and their agent's naming.

It is available when such an interface is up (IFF_UP, and not operationally down: a tun device
whose agent has gone is down) and, where `ip` can say, holds an address.
"""

from __future__ import annotations

from dataclasses import dataclass

from mesh_host.describing.detect.probe import Capability, Probe, why_not_read

NAME = "overlay"
NET = "/sys/class/net"
IFF_UP = 0x1
AGENTS = (("tailscale", "tailscale"), ("nebula", "nebula"), ("zt", "zerotier"), ("wg", "wireguard (userspace)"))


@dataclass(frozen=True)
class Interface:
    name: str
    kind: str  # wireguard, tailscale, ...
    up: bool
    operstate: str

    @property
    def called(self) -> str:
        return f"{self.name} ({self.kind})"


def overlay(probe: Probe) -> Capability:
    try:
        names = sorted(entry.name for entry in probe.path(NET).iterdir())
    except OSError as err:
        return Capability(NAME, False, f"cannot list {NET}: {why_not_read(err)}")
    found = [interface for name in names if (interface := _overlay_interface(probe, name))]
    if not found:
        kinds = "wireguard, tailscale, nebula or zerotier"
        return Capability(NAME, False, f"no {kinds} interface in {NET} ({', '.join(names) or 'none'})")
    verdicts = [_verdict(probe, interface) for interface in found]
    working = [how for available, how in verdicts if available]
    return Capability(NAME, bool(working), "; ".join(working or [how for _, how in verdicts]))


def _overlay_interface(probe: Probe, name: str) -> Interface | None:
    kind = _kind(probe, name)
    if kind is None:
        return None
    flags = _read(probe, f"{NET}/{name}/flags") or "0"
    operstate = _read(probe, f"{NET}/{name}/operstate") or "unknown"
    return Interface(name, kind, _is_up(flags), operstate)


def _is_up(flags: str) -> bool:
    try:
        return bool(int(flags, 16) & IFF_UP)  # "0x1091"
    except ValueError:
        return False


def _kind(probe: Probe, name: str) -> str | None:
    if "DEVTYPE=wireguard" in (_read(probe, f"{NET}/{name}/uevent") or "").splitlines():
        return "wireguard"
    if not probe.path(f"{NET}/{name}/tun_flags").exists():
        return None
    return next((kind for prefix, kind in AGENTS if name.startswith(prefix)), None)


def _verdict(probe: Probe, interface: Interface) -> tuple[bool, str]:
    if not interface.up:
        return False, f"{interface.called} is down"
    if interface.operstate not in ("up", "unknown"):
        return False, f"{interface.called} is up but operationally {interface.operstate}"
    ran = probe.run("ip", "-o", "address", "show", "dev", interface.name)
    if not ran.ok:
        return True, f"{interface.called} is up ({ran.said()}, its address unread)"
    addresses = _addresses(ran.stdout)
    if not addresses:
        return False, f"{interface.called} is up but has no address (ip address)"
    return True, f"{interface.called} is up with {', '.join(addresses)}"


def _addresses(printed: str) -> list[str]:
    # "5: wg0    inet 10.8.0.2/24 scope global wg0\       valid_lft forever preferred_lft forever"
    words = printed.split()
    return [words[at + 1] for at, word in enumerate(words[:-1]) if word in ("inet", "inet6")]


def _read(probe: Probe, path: str) -> str | None:
    try:
        return probe.read(path).strip()
    except OSError:
        return None
