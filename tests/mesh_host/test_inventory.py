"""`mesh-host inventory`: each fact read from files under a temporary folder and a scripted runner
(its logic: where it comes from, what it says when it cannot be read), then from this machine,
checked against what Python's own calls say of it."""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest

from mesh_host.describing.detect.probe import MAX_READ
from mesh_host.describing.inventory import Fact, count_cpus, parse_os_release, take
from mesh_host.runner import run
from tests.mesh_host.scripted import Scripted, hangs, said


def put(under: Path, path: str, text: str) -> None:
    where = under / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(text)


@pytest.fixture
def system(tmp_path: Path) -> Path:
    """A machine's /proc and /sys, as its kernel would show them."""
    machine = tmp_path / "system"
    put(machine, "/proc/sys/kernel/hostname", "node-7\n")
    put(machine, "/proc/sys/kernel/ostype", "Linux\n")
    put(machine, "/proc/sys/kernel/osrelease", "6.1.0-18-amd64\n")
    put(machine, "/proc/sys/kernel/arch", "aarch64\n")
    put(machine, "/sys/devices/system/cpu/online", "0-3,6\n")
    put(machine, "/proc/meminfo", "MemTotal:        8000000 kB\nMemFree:  100 kB\nMemAvailable:    6000000 kB\n")
    put(machine, "/proc/stat", "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n")
    put(machine, "/proc/uptime", "93784.52 180000.00\n")
    return machine


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """What is installed: an image being built, or the machine's own /."""
    image = tmp_path / "root"
    put(
        image,
        "/etc/os-release",
        'NAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    )
    put(image, "/etc/machine-id", "3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    return image


DPKG = {"dpkg-query": said("installed\ninstalled\nconfig-files\ninstalled\nnot-installed\n")}


def test_each_fact_of_a_machine_says_where_it_came_from(system: Path, root: Path) -> None:
    inventory = take(Scripted(DPKG), root, system=system)
    facts = {fact.name: fact for fact in inventory.facts}
    assert facts["host"] == Fact("host", "node-7", "node-7", "/proc/sys/kernel/hostname")
    assert facts["os"] == Fact(
        "os",
        {
            "id": "debian",
            "name": "Debian GNU/Linux",
            "version_id": "12",
            "pretty_name": "Debian GNU/Linux 12 (bookworm)",
        },
        "Debian GNU/Linux 12 (bookworm)",
        str(root / "etc/os-release"),
    )
    assert (
        facts["kernel"].text == "Linux 6.1.0-18-amd64"
        and facts["kernel"].source == "/proc/sys/kernel/ostype, osrelease"
    )
    assert facts["architecture"] == Fact("architecture", "aarch64", "aarch64", "/proc/sys/kernel/arch")
    assert facts["cpus"].value == {"online": 5, "usable": len(os.sched_getaffinity(0))}
    assert facts["memory"] == Fact(
        "memory",
        {"total_bytes": 8_192_000_000, "available_bytes": 6_144_000_000},
        "7.6 GiB total, 5.7 GiB available",
        "/proc/meminfo",
    )
    assert facts["booted"] == Fact(
        "booted",
        {"boot_time": "2023-11-14T22:13:20Z", "uptime_seconds": 93784.52},
        "2023-11-14T22:13:20Z, up 1 d 2 h 3 min",
        "/proc/stat btime, /proc/uptime",
    )
    assert facts["machine-id"].value == "3d1219c7c4c5404aaa1f6d2a48adfda4"
    assert facts["packages"] == Fact(
        "packages", 3, "3 installed", f"dpkg-query --admindir={root / 'var/lib/dpkg'} --show"
    )


def test_disk_free_is_of_the_filesystem_under_root(system: Path, root: Path) -> None:
    disk = take(Scripted(DPKG), root, system=system).fact("disk")
    usage = shutil.disk_usage(root)
    assert disk.source == f"statvfs({root})" and disk.text.endswith(f" under {root}")
    assert isinstance(disk.value, dict) and disk.value["total_bytes"] == usage.total
    assert abs(int(disk.value["free_bytes"]) - usage.free) < 64 * 1024**2  # others write to this disk meanwhile


def test_the_text_aligns_names_values_and_sources(system: Path, root: Path) -> None:
    lines = take(Scripted(DPKG), root, system=system).render().splitlines()
    assert lines[0].startswith("host          node-7 ")
    assert lines[0].endswith("  /proc/sys/kernel/hostname")
    assert len({line.index("  /") if "  /" in line else None for line in lines[:3]}) == 1  # one column of sources


def test_nothing_readable_says_why_of_each_fact_and_where_it_looked(tmp_path: Path) -> None:
    inventory = take(Scripted({}), tmp_path / "root", system=tmp_path / "system")
    unread = {fact.name: fact for fact in inventory.facts if fact.value is None}
    assert unread["host"] == Fact("host", None, "unknown: No such file or directory", "/proc/sys/kernel/hostname")
    assert unread["os"] == Fact(
        "os", None, "unknown: neither it nor /usr/lib/os-release is there", str(tmp_path / "root/etc/os-release")
    )
    assert unread["packages"] == Fact("packages", None, "unknown: none of them is installed", "dpkg-query, rpm, apk")
    assert set(unread) == {"host", "os", "kernel", "cpus", "memory", "disk", "booted", "machine-id", "packages"}
    architecture = inventory.fact("architecture")
    assert architecture == Fact("architecture", os.uname().machine, os.uname().machine, "uname(2)")
    json.dumps(inventory.as_json())  # every fact, read or not, is JSON


def test_os_release_falls_back_to_usr_lib(tmp_path: Path) -> None:
    put(tmp_path, "/usr/lib/os-release", "NAME=Alpine\nVERSION='3.19 (edge)'\n")
    os_fact = take(Scripted({}), tmp_path, system=tmp_path).fact("os")
    expected = {"name": "Alpine", "version": "3.19 (edge)"}
    assert os_fact == Fact("os", expected, "Alpine 3.19 (edge)", str(tmp_path / "usr/lib/os-release"))


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ('PRETTY_NAME="Fedora Linux 40 (Forty)"', {"PRETTY_NAME": "Fedora Linux 40 (Forty)"}),
        ("ID=fedora", {"ID": "fedora"}),
        ("NAME='single quoted'", {"NAME": "single quoted"}),
        ('NAME="with \\"escaped\\" quotes"', {"NAME": 'with "escaped" quotes'}),
        ('# a comment\n\nID=arch\nnot a field\nBROKEN="unclosed', {"ID": "arch"}),
    ],
    ids=["double quoted", "bare", "single quoted", "escaped", "comments, blanks and broken lines skipped"],
)
def test_os_release_is_read_as_a_shell_would(text: str, fields: dict[str, str]) -> None:
    assert parse_os_release(text) == fields


def test_a_runaway_file_is_read_only_to_its_cap(tmp_path: Path) -> None:
    padding = "# " + "x" * 78 + "\n"
    put(tmp_path, "/etc/os-release", "NAME=Capped\n" + padding * (MAX_READ // 80 + 1) + "PRETTY_NAME=beyond\n")
    assert take(Scripted({}), tmp_path, system=tmp_path).fact("os").text == "Capped"


@pytest.mark.parametrize(("listed", "count"), [("0", 1), ("0-1", 2), ("0-3,8,10-11", 7), ("", 0)])
def test_a_kernel_cpu_list_is_counted(listed: str, count: int) -> None:
    assert count_cpus(listed) == count


def test_meminfo_without_its_total_says_so(system: Path, root: Path) -> None:
    put(system, "/proc/meminfo", "MemFree: 100 kB\n")
    memory = take(Scripted(DPKG), root, system=system).fact("memory")
    assert memory == Fact("memory", None, "unknown: it has no MemTotal", "/proc/meminfo")


@pytest.mark.parametrize(
    ("path", "text", "fact"),
    [
        ("/proc/uptime", "soon\n", "booted"),
        ("/proc/meminfo", "MemTotal: lots kB\n", "memory"),
        ("/sys/devices/system/cpu/online", "0-x\n", "cpus"),
    ],
    ids=["uptime", "meminfo", "cpu list"],
)
def test_a_file_not_as_the_kernel_writes_it_is_unknown_saying_so(
    system: Path, root: Path, path: str, text: str, fact: str
) -> None:
    put(system, path, text)
    inventory = take(Scripted(DPKG), root, system=system)
    assert inventory.fact(fact).value is None and inventory.fact(fact).text.startswith(
        "unknown: cannot parse it (ValueError"
    )
    assert path in inventory.fact(fact).source
    assert inventory.fact("host").value == "node-7"


def test_packages_are_counted_by_rpm_under_root_where_there_is_no_dpkg(system: Path, root: Path) -> None:
    runner = Scripted({"rpm": said(".\n.\n")})
    packages = take(runner, root, system=system).fact("packages")
    assert packages == Fact("packages", 2, "2 installed", f"rpm --root {root} -qa")
    assert ("rpm", "--root", str(root), "--query", "--all", "--queryformat=.\n") in [argv for argv, _ in runner.calls]


def test_an_empty_package_database_is_none_and_the_next_is_asked(system: Path, root: Path) -> None:
    packages = take(Scripted({"dpkg-query": said(""), "apk": said("musl\nbusybox\n")}), root, system=system).fact(
        "packages"
    )
    assert packages.value == 2 and packages.source == f"apk --root {root} info"


def test_package_databases_that_fail_say_how(system: Path, root: Path) -> None:
    runner = Scripted({"dpkg-query": said(stderr="dpkg-query: error: cannot open", exit=2), "rpm": hangs()})
    packages = take(runner, root, system=system, timeout=0.5).fact("packages")
    assert (
        packages.text
        == "unknown: dpkg-query exited 2: dpkg-query: error: cannot open; rpm did not answer within its time"
    )
    assert {timeout for _, timeout in runner.calls} == {0.5}


# --- this machine ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def here() -> dict[str, Fact]:
    return {fact.name: fact for fact in take().facts}


def test_this_machine_is_what_its_kernel_says(here: dict[str, Fact]) -> None:
    uname = os.uname()
    assert here["host"].value == uname.nodename
    assert here["kernel"].value == {"name": uname.sysname, "release": uname.release}
    assert here["architecture"].value == uname.machine
    assert here["cpus"].value == {"online": os.sysconf("SC_NPROCESSORS_ONLN"), "usable": len(os.sched_getaffinity(0))}
    memory = here["memory"].value
    assert isinstance(memory, dict) and memory["total_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf(
        "SC_PHYS_PAGES"
    )


def test_this_machine_booted_when_its_uptime_says(here: dict[str, Fact]) -> None:
    booted = here["booted"].value
    assert isinstance(booted, dict)
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    boot_time = datetime.fromisoformat(str(booted["boot_time"])).timestamp()
    assert abs(boot_time - (time.time() - uptime)) < 5


def test_this_machines_os_is_what_python_reads_of_os_release(here: dict[str, Fact]) -> None:
    try:
        release = platform.freedesktop_os_release()
    except OSError:
        assert here["os"].value is None
        return
    assert here["os"].text == release.get("PRETTY_NAME", here["os"].text)
    assert isinstance(here["os"].value, dict) and here["os"].value.get("id") == release.get("ID")


def test_this_machines_disk_is_its_root_filesystem(here: dict[str, Fact]) -> None:
    disk = here["disk"].value
    assert isinstance(disk, dict) and disk["total_bytes"] == shutil.disk_usage("/").total


def test_this_machines_id_and_packages_are_what_its_files_and_database_say(here: dict[str, Fact]) -> None:
    machine_id = Path("/etc/machine-id")
    expected = machine_id.read_text().strip() or None if machine_id.exists() else None
    assert here["machine-id"].value == expected
    listed = run(["dpkg-query", "-W", "-f=${Status}\\n"])
    if listed.ok:
        installed = sum(1 for line in listed.stdout.splitlines() if line.endswith(" installed"))
        assert here["packages"].value == installed


def test_an_empty_root_on_this_machine_says_what_it_holds_is_unknown(tmp_path: Path) -> None:
    inventory = take(root=tmp_path)
    assert inventory.fact("os").value is None and inventory.fact("os").source == str(tmp_path / "etc/os-release")
    assert inventory.fact("machine-id").value is None
    assert inventory.fact("packages").value is None
    assert inventory.fact("host").value == os.uname().nodename  # the running machine still is what it is
