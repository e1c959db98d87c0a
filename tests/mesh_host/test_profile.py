"""`mesh-host profile`: each detector against a scripted runner and files under a temporary folder
(its logic: every verdict it can give), then against this machine (its behaviour: the verdict
tells the truth about whatever is there, asked again here another way)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from mesh_host.describing.detect import containers, firewall, graphical, overlay, packages, privilege, systemd
from mesh_host.describing.detect.probe import Capability, Probe, failed
from mesh_host.describing.profile import DETECTORS, Profile, detect, platform_of
from mesh_host.runner import Ran, run
from tests.mesh_host.scripted import Answer, Scripted, hangs, said
from tests.mesh_host.unprivileged import as_nobody

SHORT = 2.0  # seconds: a command of the machine tests answers well within it, or is cut there


def probe(
    script: Mapping[str, Answer] | None = None,
    system: Path = Path("/nonexistent"),
    *,
    environ: Mapping[str, str] | None = None,
    euid: int = 0,
) -> Probe:
    return Probe(runner=Scripted(script or {}), system=system, environ=environ or {}, euid=euid, timeout=SHORT)


def put(system: Path, path: str, text: str) -> Path:
    where = system / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(text)
    return where


# --- the output ------------------------------------------------------------------------------------


ISSUE_EXAMPLE = """\
linux/amd64

yes  package-manager    dpkg 1.21.22 (dpkg-query answered)
no   container-runtime  docker CLI present, daemon not answering: Cannot connect to the Docker daemon
no   service-manager    systemctl: System has not been booted with systemd as init system
yes  privileged         effective uid 0

cannot be asked to: [container-runtime service-manager]
"""


def test_the_text_reads_exactly_as_the_issue_shows() -> None:
    profile = Profile(
        "linux/amd64",
        [
            Capability("package-manager", True, "dpkg 1.21.22 (dpkg-query answered)"),
            Capability(
                "container-runtime",
                False,
                "docker CLI present, daemon not answering: Cannot connect to the Docker daemon",
            ),
            Capability("service-manager", False, "systemctl: System has not been booted with systemd as init system"),
            Capability("privileged", True, "effective uid 0"),
        ],
    )
    assert profile.render() == ISSUE_EXAMPLE
    assert profile.as_json() == {
        "platform": "linux/amd64",
        "capabilities": [{"name": c.name, "available": c.available, "how": c.how} for c in profile.capabilities],
        "cannot": ["container-runtime", "service-manager"],
    }


def test_a_machine_that_can_do_everything_names_nothing_it_cannot() -> None:
    profile = Profile("linux/arm64", [Capability("privileged", True, "effective uid 0")])
    assert profile.render().endswith("\n\ncannot be asked to: []\n")
    assert profile.cannot == []


@pytest.mark.parametrize(
    ("sysname", "machine", "platform"),
    [
        ("Linux", "x86_64", "linux/amd64"),
        ("Linux", "aarch64", "linux/arm64"),
        ("Linux", "armv7l", "linux/arm"),
        ("Linux", "i686", "linux/386"),
        ("Linux", "riscv64", "linux/riscv64"),
        ("Darwin", "arm64", "darwin/arm64"),
    ],
    ids=["x86_64 is amd64", "aarch64 is arm64", "armv7l is arm", "i686 is 386", "others as uname says", "darwin"],
)
def test_the_platform_is_named_as_go_and_images_name_it(sysname: str, machine: str, platform: str) -> None:
    assert platform_of(sysname, machine) == platform


def test_a_detector_that_breaks_is_a_no_saying_so_and_the_others_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: Probe) -> Capability:
        raise ValueError("invalid literal for int() with base 16: 'zz'")

    monkeypatch.setattr(
        "mesh_host.describing.profile.DETECTORS", ((overlay.NAME, broken), (privilege.NAME, privilege.privileged))
    )
    profile = detect(Scripted({}), system=Path("/nonexistent"), environ={}, euid=0)
    assert profile.capabilities == [
        Capability("overlay", False, "the detector failed: ValueError: invalid literal for int() with base 16: 'zz'"),
        Capability("privileged", True, "effective uid 0"),
    ]


def test_every_command_is_given_the_injected_timeout() -> None:
    runner = Scripted({})
    detect(runner, system=Path("/nonexistent"), environ={}, euid=0, timeout=0.25)
    assert runner.calls and {timeout for _, timeout in runner.calls} == {0.25}


# --- package-manager -------------------------------------------------------------------------------


def test_dpkg_answering_is_the_package_manager_with_its_version() -> None:
    verdict = packages.package_manager(probe({"dpkg-query --show": said("1.21.22")}))
    assert verdict == Capability("package-manager", True, "dpkg 1.21.22 (dpkg-query answered)")


def test_rpm_answers_where_dpkg_is_not_installed() -> None:
    verdict = packages.package_manager(probe({"rpm --query": said("4.18.2")}))
    assert verdict == Capability("package-manager", True, "rpm 4.18.2 (rpm answered)")


def test_apk_answers_with_the_version_of_apk_tools() -> None:
    printed = "apk-tools-2.14.4-r0 x86_64 {apk-tools} (GPL-2.0-only) [installed]\n"
    verdict = packages.package_manager(probe({"apk list --installed apk-tools": said(printed)}))
    assert verdict == Capability("package-manager", True, "apk-tools 2.14.4-r0 (apk answered)")


def test_an_rpm_tool_without_its_database_is_no_package_manager_and_says_why() -> None:
    verdict = packages.package_manager(probe({"rpm --query": said("package rpm is not installed", exit=1)}))
    assert verdict == Capability("package-manager", False, "rpm exited 1: package rpm is not installed")


def test_a_broken_dpkg_database_says_what_dpkg_query_said() -> None:
    broken = said(stderr="dpkg-query: error: parsing file '/var/lib/dpkg/status' near line 7:\n...", exit=2)
    verdict = packages.package_manager(probe({"dpkg-query": broken}))
    assert not verdict.available
    assert verdict.how == "dpkg-query exited 2: dpkg-query: error: parsing file '/var/lib/dpkg/status' near line 7:"


def test_no_package_tool_at_all_says_none_is_installed() -> None:
    verdict = packages.package_manager(probe())
    assert verdict == Capability("package-manager", False, "none of dpkg-query, rpm, apk is installed")


def test_a_package_database_that_hangs_is_a_no_saying_so() -> None:
    verdict = packages.package_manager(probe({"dpkg-query": hangs()}))
    assert verdict == Capability("package-manager", False, "dpkg-query did not answer within its time")


# --- container-runtime -----------------------------------------------------------------------------


def test_the_docker_daemon_answering_its_version_is_a_runtime() -> None:
    verdict = containers.container_runtime(probe({"docker version": said("28.2.2\n")}))
    assert verdict == Capability("container-runtime", True, "docker 28.2.2 (the daemon answered its version)")


def test_a_docker_cli_with_its_daemon_down_is_no_runtime_with_the_daemons_message() -> None:
    down = said(
        "\n",
        stderr="WARNING: Error loading config file: open /root/.docker/config.json: permission denied\n"
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
        exit=1,
    )
    verdict = containers.container_runtime(probe({"docker version": down}))
    assert verdict == Capability(
        "container-runtime",
        False,
        "docker CLI present, daemon not answering: "
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    )


def test_a_daemon_that_does_not_answer_in_time_is_no_runtime() -> None:
    verdict = containers.container_runtime(probe({"docker version": hangs()}))
    assert verdict.how == "docker CLI present, daemon not answering: docker did not answer within its time"


def test_podman_working_is_a_runtime_where_docker_is_down() -> None:
    script = {"docker version": said(stderr="Cannot connect", exit=1), "podman info": said("4.3.1\n")}
    verdict = containers.container_runtime(probe(script))
    assert verdict == Capability("container-runtime", True, "podman 4.3.1 (podman info answered)")


def test_podman_failing_says_what_it_said() -> None:
    broken = said(stderr='Error: cannot find "runc" in $PATH: invalid argument', exit=125)
    verdict = containers.container_runtime(probe({"podman info": broken}))
    assert (
        verdict.how
        == 'podman present, not working: podman exited 125: Error: cannot find "runc" in $PATH: invalid argument'
    )


def test_no_container_tool_says_neither_is_installed() -> None:
    verdict = containers.container_runtime(probe())
    assert verdict == Capability("container-runtime", False, "neither docker nor podman is installed")


# --- service-manager -------------------------------------------------------------------------------


@pytest.fixture
def systemd_pid1(tmp_path: Path) -> Path:
    put(tmp_path, "/proc/1/comm", "systemd\n")
    return tmp_path


VERSION = {"systemctl --version": said("systemd 252 (252.22-1~deb12u1)\n+PAM +AUDIT\n")}


def test_systemd_running_is_a_service_manager(systemd_pid1: Path) -> None:
    script = VERSION | {"systemctl is-system-running": said("running\n")}
    verdict = systemd.service_manager(probe(script, systemd_pid1))
    assert verdict == Capability("service-manager", True, "systemd 252 is running (systemctl is-system-running)")


def test_degraded_is_a_working_init_though_systemctl_exits_1(systemd_pid1: Path) -> None:
    script = VERSION | {"systemctl is-system-running": said("degraded\n", exit=1)}
    verdict = systemd.service_manager(probe(script, systemd_pid1))
    assert verdict.available
    assert verdict.how == "systemd 252 is degraded (systemctl is-system-running): a working init with failed units"


@pytest.mark.parametrize("state", ["maintenance", "stopping", "offline"])
def test_systemd_not_up_is_no_service_manager_naming_its_state(systemd_pid1: Path, state: str) -> None:
    verdict = systemd.service_manager(
        probe(VERSION | {"systemctl is-system-running": said(state, exit=1)}, systemd_pid1)
    )
    assert verdict == Capability(
        "service-manager", False, f"PID 1 is systemd, but the system is {state} (systemctl is-system-running)"
    )


def test_systemctl_that_hangs_is_no_service_manager(systemd_pid1: Path) -> None:
    verdict = systemd.service_manager(probe({"systemctl is-system-running": hangs()}, systemd_pid1))
    assert verdict == Capability(
        "service-manager", False, "PID 1 is systemd, but systemctl did not answer within its time"
    )


def test_systemd_without_systemctl_is_no_service_manager(systemd_pid1: Path) -> None:
    verdict = systemd.service_manager(probe({}, systemd_pid1))
    assert verdict == Capability("service-manager", False, "PID 1 is systemd, but systemctl not found")


def test_another_init_is_named_with_what_systemctl_said(tmp_path: Path) -> None:
    put(tmp_path, "/proc/1/comm", "tini\n")
    refused = said(stderr="System has not been booted with systemd as init system (PID 1). Can't operate.", exit=1)
    verdict = systemd.service_manager(probe({"systemctl is-system-running": refused}, tmp_path))
    assert verdict == Capability(
        "service-manager",
        False,
        "PID 1 is tini, not systemd; "
        "systemctl: System has not been booted with systemd as init system (PID 1). Can't operate.",
    )


def test_another_init_without_systemctl_says_both(tmp_path: Path) -> None:
    put(tmp_path, "/proc/1/comm", "openrc-init\n")
    verdict = systemd.service_manager(probe({}, tmp_path))
    assert verdict.how == "PID 1 is openrc-init, not systemd; systemctl not found"


def test_pid_1_unreadable_is_no_service_manager_saying_why(tmp_path: Path) -> None:
    verdict = systemd.service_manager(probe({}, tmp_path))
    assert verdict == Capability("service-manager", False, "cannot read /proc/1/comm: No such file or directory")


# --- privileged -----------------------------------------------------------------------------------


def test_uid_0_is_privileged() -> None:
    assert privilege.privileged(probe(euid=0)) == Capability("privileged", True, "effective uid 0")


def test_another_uid_is_not_privileged_naming_the_user() -> None:
    verdict = privilege.privileged(probe(euid=65534))
    assert not verdict.available and verdict.how.startswith("effective uid 65534") and verdict.how.endswith(", not 0")


# --- firewall -------------------------------------------------------------------------------------


RULESET = "table inet filter {\n\tchain input {\n\t}\n}\ntable ip nat {\n}\n"


def test_nft_listing_its_ruleset_is_a_firewall() -> None:
    script = {"nft list ruleset": said(RULESET), "nft --version": said("nftables v1.0.6 (Lester Gooch #5)\n")}
    verdict = firewall.firewall(probe(script))
    assert verdict == Capability("firewall", True, "nftables v1.0.6 listed its ruleset: 2 tables")


def test_an_empty_ruleset_is_still_a_firewall() -> None:
    verdict = firewall.firewall(probe({"nft list ruleset": said("")}))
    assert verdict == Capability("firewall", True, "nft listed its ruleset: no tables yet")


def test_nft_without_the_privilege_is_no_firewall_saying_so() -> None:
    refused = said(
        stderr="Operation not permitted (you must be root)\nnetlink: Error: cache initialization failed\n", exit=1
    )
    verdict = firewall.firewall(probe({"nft list ruleset": refused}))
    assert verdict == Capability("firewall", False, "nft exited 1: Operation not permitted (you must be root)")


def test_no_nft_is_no_firewall() -> None:
    assert firewall.firewall(probe()) == Capability("firewall", False, "nft not found")


def test_nft_that_hangs_is_no_firewall() -> None:
    assert firewall.firewall(probe({"nft list ruleset": hangs()})).how == "nft did not answer within its time"


# --- overlay --------------------------------------------------------------------------------------


def interface(
    system: Path, name: str, *, devtype: str = "", tun: bool = False, flags: str = "0x1091", state: str = "unknown"
) -> None:
    put(
        system,
        f"/sys/class/net/{name}/uevent",
        f"DEVTYPE={devtype}\nINTERFACE={name}\n" if devtype else f"INTERFACE={name}\n",
    )
    put(system, f"/sys/class/net/{name}/flags", flags + "\n")
    put(system, f"/sys/class/net/{name}/operstate", state + "\n")
    if tun:
        put(system, f"/sys/class/net/{name}/tun_flags", "0x1002\n")


def addressed(name: str, address: str) -> dict[str, Answer]:
    printed = f"5: {name}    inet {address} scope global {name}\\       valid_lft forever preferred_lft forever\n"
    return {f"ip -o address show dev {name}": said(printed)}


def test_a_kernel_wireguard_interface_up_with_an_address_is_the_overlay(tmp_path: Path) -> None:
    interface(tmp_path, "eth0", state="up")
    interface(tmp_path, "wg0", devtype="wireguard")
    verdict = overlay.overlay(probe(addressed("wg0", "10.8.0.2/24"), tmp_path))
    assert verdict == Capability("overlay", True, "wg0 (wireguard) is up with 10.8.0.2/24")


@pytest.mark.parametrize(
    ("name", "kind"),
    [("tailscale0", "tailscale"), ("nebula1", "nebula"), ("ztabcdef12", "zerotier"), ("wg0", "wireguard (userspace)")],
)
def test_an_overlay_agents_tun_device_is_the_overlay(tmp_path: Path, name: str, kind: str) -> None:
    interface(tmp_path, name, tun=True)
    verdict = overlay.overlay(probe(addressed(name, "100.64.0.7/32"), tmp_path))
    assert verdict == Capability("overlay", True, f"{name} ({kind}) is up with 100.64.0.7/32")


def test_a_tun_device_of_no_overlay_agent_is_not_the_overlay(tmp_path: Path) -> None:
    interface(tmp_path, "tun0", tun=True)
    interface(tmp_path, "lo")
    verdict = overlay.overlay(probe({}, tmp_path))
    assert verdict == Capability(
        "overlay", False, "no wireguard, tailscale, nebula or zerotier interface in /sys/class/net (lo, tun0)"
    )


def test_a_wireguard_interface_down_is_no_overlay(tmp_path: Path) -> None:
    interface(tmp_path, "wg0", devtype="wireguard", flags="0x1090", state="down")
    assert overlay.overlay(probe({}, tmp_path)) == Capability("overlay", False, "wg0 (wireguard) is down")


def test_a_tun_device_whose_agent_has_gone_is_no_overlay(tmp_path: Path) -> None:
    interface(tmp_path, "tailscale0", tun=True, flags="0x1091", state="down")
    verdict = overlay.overlay(probe({}, tmp_path))
    assert verdict == Capability("overlay", False, "tailscale0 (tailscale) is up but operationally down")


def test_an_overlay_interface_without_an_address_is_no_overlay(tmp_path: Path) -> None:
    interface(tmp_path, "wg0", devtype="wireguard")
    verdict = overlay.overlay(probe({"ip -o address show dev wg0": said("")}, tmp_path))
    assert verdict == Capability("overlay", False, "wg0 (wireguard) is up but has no address (ip address)")


def test_without_ip_an_overlay_interface_up_is_the_overlay_its_address_unread(tmp_path: Path) -> None:
    interface(tmp_path, "wg0", devtype="wireguard")
    verdict = overlay.overlay(probe({}, tmp_path))
    assert verdict == Capability("overlay", True, "wg0 (wireguard) is up (ip not found, its address unread)")


def test_one_working_overlay_among_broken_ones_is_the_overlay(tmp_path: Path) -> None:
    interface(tmp_path, "wg0", devtype="wireguard", flags="0x1090", state="down")
    interface(tmp_path, "wg1", devtype="wireguard")
    verdict = overlay.overlay(probe(addressed("wg1", "10.9.0.1/24"), tmp_path))
    assert verdict == Capability("overlay", True, "wg1 (wireguard) is up with 10.9.0.1/24")


def test_no_interface_list_is_no_overlay_saying_why(tmp_path: Path) -> None:
    verdict = overlay.overlay(probe({}, tmp_path))
    assert verdict == Capability("overlay", False, "cannot list /sys/class/net: No such file or directory")


# --- graphical-session ----------------------------------------------------------------------------


@pytest.fixture
def system() -> Iterator[Path]:
    """A short folder: a unix socket's path must fit in 108 bytes, pytest's tmp_path may not."""
    folder = Path(tempfile.mkdtemp(prefix="mh-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder)


def listening(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    return server


def left_behind(path: Path) -> None:
    """A socket file whose listener has gone, as a session that ended leaves it."""
    listening(path).close()


WAYLAND = {"WAYLAND_DISPLAY": "wayland-0", "XDG_RUNTIME_DIR": "/run/user/1000"}


def test_a_wayland_compositor_accepting_is_a_session(system: Path) -> None:
    with listening(system / "run/user/1000/wayland-0"):
        verdict = graphical.graphical_session(probe({}, system, environ=WAYLAND))
    assert verdict == Capability(
        "graphical-session",
        True,
        "Wayland compositor accepting connections on /run/user/1000/wayland-0 (WAYLAND_DISPLAY)",
    )


def test_an_x_server_accepting_is_a_session(system: Path) -> None:
    with listening(system / "tmp/.X11-unix/X1"):
        verdict = graphical.graphical_session(probe({}, system, environ={"DISPLAY": ":1.0"}))
    assert verdict == Capability(
        "graphical-session", True, "X server accepting connections on /tmp/.X11-unix/X1 (DISPLAY=:1.0)"
    )


def test_a_socket_left_by_an_ended_session_is_no_session(system: Path) -> None:
    left_behind(system / "run/user/1000/wayland-0")
    verdict = graphical.graphical_session(probe({"loginctl list-sessions": said("")}, system, environ=WAYLAND))
    assert verdict == Capability(
        "graphical-session",
        False,
        "Wayland compositor socket /run/user/1000/wayland-0 (WAYLAND_DISPLAY): Connection refused; "
        "logind has no sessions",
    )


def test_a_forwarded_display_is_not_this_machines_session(system: Path) -> None:
    verdict = graphical.graphical_session(
        probe({"loginctl list-sessions": said("")}, system, environ={"DISPLAY": "localhost:10.0"})
    )
    assert not verdict.available
    assert verdict.how.startswith("DISPLAY=localhost:10.0 is a display on another host, not this machine's session")


def test_wayland_display_without_a_runtime_dir_says_so(system: Path) -> None:
    verdict = graphical.graphical_session(probe({}, system, environ={"WAYLAND_DISPLAY": "wayland-0"}))
    assert verdict.how.startswith("WAYLAND_DISPLAY=wayland-0 but XDG_RUNTIME_DIR is unset; ")


SESSIONS = "     2 1000 alice seat0 tty2\n     5    0 root        pts/0\n"


def shown(*blocks: str) -> dict[str, Answer]:
    return {
        "loginctl list-sessions --no-legend": said(SESSIONS),
        "loginctl show-session 2 5": said("\n\n".join(blocks) + "\n"),
    }


def test_an_active_graphical_session_in_logind_is_a_session_for_a_host_run_by_a_unit() -> None:
    script = shown("Id=2\nName=alice\nType=wayland\nActive=yes", "Id=5\nName=root\nType=tty\nActive=yes")
    verdict = graphical.graphical_session(probe(script))
    assert verdict == Capability("graphical-session", True, "logind: session 2 (alice) is an active wayland session")


def test_a_graphical_session_not_in_front_is_no_session() -> None:
    script = shown("Id=2\nName=alice\nType=x11\nActive=no", "Id=5\nName=root\nType=tty\nActive=yes")
    verdict = graphical.graphical_session(probe(script))
    assert verdict.how.endswith("logind: session 2 (alice) is x11, not active")
    assert not verdict.available


def test_only_text_sessions_are_no_session() -> None:
    script = shown("Id=2\nName=alice\nType=tty\nActive=yes", "Id=5\nName=root\nType=tty\nActive=yes")
    verdict = graphical.graphical_session(probe(script))
    assert verdict == Capability(
        "graphical-session",
        False,
        "no WAYLAND_DISPLAY or DISPLAY in the environment; logind: no wayland or x11 session among 2 (tty)",
    )


def test_logind_not_answering_says_what_loginctl_said() -> None:
    down = said(stderr="System has not been booted with systemd as init system (PID 1). Can't operate.\n", exit=1)
    verdict = graphical.graphical_session(probe({"loginctl list-sessions": down}))
    assert verdict.how == (
        "no WAYLAND_DISPLAY or DISPLAY in the environment; "
        "loginctl exited 1: System has not been booted with systemd as init system (PID 1). Can't operate."
    )


# --- this machine ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def here() -> dict[str, Capability]:
    return {capability.name: capability for capability in detect(timeout=SHORT).capabilities}


def asked(*argv: str) -> Ran:
    return run(argv, timeout=SHORT)


def test_this_machine_is_asked_about_every_capability_fast() -> None:
    started = time.monotonic()
    profile = detect(timeout=SHORT)
    assert [capability.name for capability in profile.capabilities] == [name for name, _ in DETECTORS]
    assert time.monotonic() - started < 2 * SHORT  # at once: not the sum of each detector's wait
    text = profile.render()
    assert text.startswith(profile.platform + "\n\n") and text.endswith(
        f"cannot be asked to: [{' '.join(profile.cannot)}]\n"
    )


def test_the_platform_is_the_kernels_and_machines() -> None:
    kernel, machine = asked("uname", "-s").stdout.strip(), asked("uname", "-m").stdout.strip()
    assert detect(Scripted({}), environ={}).platform == platform_of(kernel, machine)


def test_privileged_tells_the_effective_uid(here: dict[str, Capability]) -> None:
    assert here["privileged"].available == (os.geteuid() == 0)
    assert here["privileged"].how.startswith(f"effective uid {os.geteuid()}")


def test_service_manager_tells_what_pid_1_is(here: dict[str, Capability]) -> None:
    init = Path("/proc/1/comm").read_text().strip()
    verdict = here["service-manager"]
    if init != "systemd":
        assert not verdict.available and verdict.how.startswith(f"PID 1 is {init}, not systemd; ")
        return
    state = asked("systemctl", "is-system-running").stdout.strip()
    assert verdict.available == (state in systemd.WORKING) and state in verdict.how


def test_package_manager_tells_what_the_database_answered(here: dict[str, Capability]) -> None:
    verdict = here["package-manager"]
    dpkg = asked("dpkg-query", "-W", "-f=${Version}", "dpkg")
    if dpkg.ok:
        assert verdict == Capability("package-manager", True, f"dpkg {dpkg.stdout} (dpkg-query answered)")
    elif not any(shutil.which(tool) for tool in ("dpkg-query", "rpm", "apk")):
        assert verdict == Capability("package-manager", False, "none of dpkg-query, rpm, apk is installed")
    else:
        assert verdict.how.split()[0] in ("rpm", "apk-tools") or not verdict.available


def test_container_runtime_tells_what_the_daemon_said(here: dict[str, Capability]) -> None:
    verdict = here["container-runtime"]
    docker = asked("docker", "version", "--format", "{{.Server.Version}}")
    if docker.ok and docker.stdout.strip():
        assert verdict.available and verdict.how.startswith(f"docker {docker.stdout.strip()} ")
    elif not docker.missing:
        last = docker.stderr.strip().splitlines()[-1] if docker.stderr.strip() else ""
        assert verdict.how.startswith("docker CLI present, daemon not answering: ") and last in verdict.how
        assert verdict.available == verdict.how.startswith("podman")
    elif not shutil.which("podman"):
        assert verdict == Capability("container-runtime", False, "neither docker nor podman is installed")


def test_firewall_tells_what_nft_said(here: dict[str, Capability]) -> None:
    verdict = here["firewall"]
    listed = asked("nft", "list", "ruleset")
    assert verdict.available == listed.ok
    if listed.missing:
        assert verdict.how == "nft not found"
    elif not listed.ok:
        assert verdict.how == f"nft exited {listed.returncode}: {listed.stderr.strip().splitlines()[0]}"


def test_overlay_names_the_interfaces_it_looked_at(here: dict[str, Capability]) -> None:
    names = sorted(os.listdir("/sys/class/net"))
    overlays = [n for n in names if "DEVTYPE=wireguard" in Path(f"/sys/class/net/{n}/uevent").read_text().splitlines()]
    overlays += [
        n
        for n in names
        if Path(f"/sys/class/net/{n}/tun_flags").exists() and n.startswith(("tailscale", "nebula", "zt", "wg"))
    ]
    verdict = here["overlay"]
    if not overlays:
        assert verdict == Capability(
            "overlay",
            False,
            f"no wireguard, tailscale, nebula or zerotier interface in /sys/class/net ({', '.join(names)})",
        )
    else:
        assert any(name in verdict.how for name in overlays)


def test_graphical_session_outside_any_session_tells_what_logind_said() -> None:
    verdict = graphical.graphical_session(Probe(run, Path("/"), {}, os.geteuid(), SHORT))
    listed = asked("loginctl", "list-sessions", "--no-legend")
    assert verdict.how.startswith("no WAYLAND_DISPLAY or DISPLAY in the environment; ")
    if not listed.ok:
        assert not verdict.available and verdict.how.endswith(failed(listed))
    elif not listed.stdout.strip():
        assert verdict == Capability(
            "graphical-session", False, "no WAYLAND_DISPLAY or DISPLAY in the environment; logind has no sessions"
        )


def test_tools_that_hang_are_cut_at_the_injected_time_all_at_once(tmp_path: Path) -> None:
    for tool in ("docker", "systemctl", "nft", "loginctl"):
        put(tmp_path, tool, "#!/bin/sh\nexec sleep 30\n").chmod(0o755)
    environment = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")

    def hanging(argv: Sequence[str], *, timeout: float = SHORT) -> Ran:
        return run(argv, timeout=timeout, env=environment)

    started = time.monotonic()
    verdicts = {capability.name: capability for capability in detect(hanging, environ={}, timeout=1.0).capabilities}
    assert time.monotonic() - started < 3.0  # each cut at 1 s, at once; one after the other: 4 s at least
    assert verdicts["container-runtime"].how.startswith(
        "docker CLI present, daemon not answering: docker did not answer"
    )
    assert "systemctl did not answer within its time" in verdicts["service-manager"].how
    assert verdicts["firewall"] == Capability("firewall", False, "nft did not answer within its time")
    assert verdicts["graphical-session"].how.endswith("loginctl did not answer within its time")


# --- as nobody ------------------------------------------------------------------------------------


# Found as a shell finds it: a folder of PATH that nobody may not search (root's own, on some
# machines) is passed over; exec's own search would end on its EACCES instead.
NFT_AS_NOBODY = """
found = shutil.which("nft")
if found is None:
    print(json.dumps({"missing": True}))
else:
    ran = subprocess.run([found, "list", "ruleset"], capture_output=True, text=True, check=False)
    print(json.dumps({"returncode": ran.returncode, "stderr": ran.stderr}))
"""


def test_as_nobody_the_firewall_says_why_it_is_not_available() -> None:
    done = as_nobody(
        "import json\nfrom mesh_host.describing.profile import detect",
        f"print(json.dumps(detect(timeout={SHORT}).as_json()))",
    )
    assert done.returncode == 0, done.stderr
    verdicts = {c["name"]: c for c in json.loads(done.stdout)["capabilities"]}
    nft_said = as_nobody("import json, shutil, subprocess", NFT_AS_NOBODY)
    assert nft_said.returncode == 0, nft_said.stderr
    nft = json.loads(nft_said.stdout)
    if nft.get("missing"):
        assert verdicts["firewall"] == {"name": "firewall", "available": False, "how": "nft not found"}
    else:
        assert verdicts["firewall"]["available"] is (nft["returncode"] == 0)
        if nft["returncode"] != 0:  # Operation not permitted (you must be root), where nft is installed
            first = nft["stderr"].strip().splitlines()[0]
            assert verdicts["firewall"]["how"] == f"nft exited {nft['returncode']}: {first}"
    assert verdicts["privileged"]["available"] is False
    assert verdicts["privileged"]["how"].startswith(f"effective uid {pwd.getpwnam('nobody').pw_uid} (nobody)")
