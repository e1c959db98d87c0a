"""firewall: nftables lists its ruleset, which needs the privilege as well as the tool
(`nft exited 1: Operation not permitted (you must be root)`). The firewall this host can be asked
to manage is nftables; a machine with iptables-legacy alone has none it can manage."""

from __future__ import annotations

from mesh_host.describing.detect.probe import Capability, Probe, failed

NAME = "firewall"


def firewall(probe: Probe) -> Capability:
    listed = probe.run("nft", "list", "ruleset")
    if not listed.ok:
        return Capability(NAME, False, failed(listed))
    tables = sum(1 for line in listed.stdout.splitlines() if line.startswith("table "))
    return Capability(NAME, True, f"{_version(probe)} listed its ruleset: {_tables(tables)}")


def _version(probe: Probe) -> str:
    # "nftables v1.0.6 (Lester Gooch #5)"
    words = probe.run("nft", "--version").stdout.split()
    return " ".join(words[:2]) if words[:1] == ["nftables"] else "nft"


def _tables(count: int) -> str:
    return "no tables yet" if count == 0 else f"{count} table" + ("s" if count > 1 else "")
