"""`mesh-host inventory`: what this machine is, and what it holds, each fact with where it came from.

The running machine (host name, kernel, architecture, CPUs, memory, boot) is read from /proc and /sys
under `system`; what is installed (the OS, its machine id, its packages, the disk it stands on) is
read under `root`, the same prefix `--root` gives every path of an apply: building an image, it is
the image's. Every file is read capped; a fact that cannot be read says why, and the rest stand.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mesh_host.describing.detect.probe import read_capped, why_not_read
from mesh_host.runner import Runner, run

INVENTORY_TIMEOUT = 10.0  # seconds a package database may take to count what it holds
GIB = 1024**3
OS_FIELDS = ("ID", "NAME", "VERSION", "VERSION_ID", "PRETTY_NAME")  # of os-release, in the JSON

JSONValue = str | int | float | Mapping[str, "str | int | float"] | None


@dataclass(frozen=True)
class Fact:
    name: str
    value: JSONValue  # machine-readable (bytes, counts, ISO times); None when it could not be read
    text: str  # as a person reads it, or why it could not be read
    source: str  # where it came from: a file, a call, a command


class Unread(Exception):
    """A fact could not be read: `source` says where it was looked for, the message why."""

    def __init__(self, source: str, why: str) -> None:
        super().__init__(why)
        self.source = source


@dataclass(frozen=True)
class Inventory:
    facts: list[Fact]

    def fact(self, name: str) -> Fact:
        return next(fact for fact in self.facts if fact.name == name)

    def render(self) -> str:
        name_width = max((len(fact.name) for fact in self.facts), default=0)
        text_width = max((len(fact.text) for fact in self.facts), default=0)
        return "".join(f"{f.name:<{name_width}}  {f.text:<{text_width}}  {f.source}\n" for f in self.facts)

    def as_json(self) -> dict[str, object]:
        return {fact.name: {"value": fact.value, "text": fact.text, "source": fact.source} for fact in self.facts}


@dataclass(frozen=True)
class Where:
    runner: Runner
    root: Path  # what is installed
    system: Path  # the running machine's /proc and /sys
    timeout: float

    def under_root(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def read_system(self, absolute: str) -> str:
        try:
            return read_capped(self.system / absolute.lstrip("/")).strip()
        except OSError as err:
            raise Unread(absolute, why_not_read(err)) from err


Reading = tuple[JSONValue, str, str]  # value, text, source
Reader = Callable[[Where], Reading]


def parsing(source: str) -> Callable[[Reader], Reader]:
    """A reader of a file not written as the kernel writes it raises `Unread` saying so, not ValueError."""

    def wrap(reader: Reader) -> Reader:
        def read(where: Where) -> Reading:
            try:
                return reader(where)
            except (ValueError, IndexError) as err:
                raise Unread(source, f"cannot parse it ({type(err).__name__}: {err})") from err

        return read

    return wrap


def take(
    runner: Runner = run, root: Path = Path("/"), *, system: Path = Path("/"), timeout: float = INVENTORY_TIMEOUT
) -> Inventory:
    where = Where(runner, root, system, timeout)
    return Inventory([_fact(name, reader, where) for name, reader in READERS])


def _fact(name: str, reader: Reader, where: Where) -> Fact:
    try:
        value, text, source = reader(where)
    except Unread as unread:
        return Fact(name, None, f"unknown: {unread}", unread.source)
    return Fact(name, value, text, source)


def _host(where: Where) -> Reading:
    name = where.read_system("/proc/sys/kernel/hostname")
    return name, name, "/proc/sys/kernel/hostname"


def _os(where: Where) -> Reading:
    for candidate in ("/etc/os-release", "/usr/lib/os-release"):  # os-release(5)'s order
        path = where.under_root(candidate)
        try:
            fields = parse_os_release(read_capped(path))
        except OSError:
            continue
        named = fields.get("PRETTY_NAME") or " ".join(filter(None, (fields.get("NAME"), fields.get("VERSION"))))
        value = {key.lower(): fields[key] for key in OS_FIELDS if key in fields}
        return value, named or "unnamed", str(path)
    raise Unread(str(where.under_root("/etc/os-release")), "neither it nor /usr/lib/os-release is there")


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines, values quoted as in a shell (os-release(5)); lines that are not are skipped."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, equals, quoted = line.strip().partition("=")
        if not equals or not key.isidentifier():
            continue
        try:
            words = shlex.split(quoted)
        except ValueError:
            continue
        fields[key] = " ".join(words)
    return fields


def _kernel(where: Where) -> Reading:
    name = where.read_system("/proc/sys/kernel/ostype")
    release = where.read_system("/proc/sys/kernel/osrelease")
    return {"name": name, "release": release}, f"{name} {release}", "/proc/sys/kernel/ostype, osrelease"


def _architecture(where: Where) -> Reading:
    try:
        machine, source = where.read_system("/proc/sys/kernel/arch"), "/proc/sys/kernel/arch"
    except Unread:  # kernels before 6.1 have no such file; uname(2) says the same
        machine, source = os.uname().machine, "uname(2)"
    return machine, machine, source


@parsing("/sys/devices/system/cpu/online")
def _cpus(where: Where) -> Reading:
    online = count_cpus(where.read_system("/sys/devices/system/cpu/online"))
    usable = len(os.sched_getaffinity(0))
    text = f"{online} online" + ("" if usable == online else f", {usable} usable by this process")
    return {"online": online, "usable": usable}, text, "/sys/devices/system/cpu/online, sched_getaffinity(2)"


def count_cpus(listed: str) -> int:
    """How many CPUs a kernel CPU list names: `0-3,8,10-11` is 7."""
    count = 0
    for part in filter(None, listed.strip().split(",")):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


@parsing("/proc/meminfo")
def _memory(where: Where) -> Reading:
    kib = {}
    for line in where.read_system("/proc/meminfo").splitlines():
        key, _, amount = line.partition(":")
        if key in ("MemTotal", "MemAvailable") and amount.split():
            kib[key] = int(amount.split()[0])
    if "MemTotal" not in kib:
        raise Unread("/proc/meminfo", "it has no MemTotal")
    total, available = kib["MemTotal"] * 1024, kib.get("MemAvailable", 0) * 1024
    text = f"{total / GIB:.1f} GiB total, {available / GIB:.1f} GiB available"
    return {"total_bytes": total, "available_bytes": available}, text, "/proc/meminfo"


def _disk(where: Where) -> Reading:
    try:
        stat = os.statvfs(where.root)
    except OSError as err:
        raise Unread(f"statvfs({where.root})", why_not_read(err)) from err
    free, total = stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize  # free: what a non-root user may use
    text = f"{free / GIB:.1f} GiB free of {total / GIB:.1f} GiB under {where.root}"
    return {"free_bytes": free, "total_bytes": total}, text, f"statvfs({where.root})"


@parsing("/proc/stat btime, /proc/uptime")
def _booted(where: Where) -> Reading:
    btime = next(
        (line.split()[1] for line in where.read_system("/proc/stat").splitlines() if line.startswith("btime ")), ""
    )
    if not btime.isdigit():
        raise Unread("/proc/stat", "it has no btime line")
    uptime = float(where.read_system("/proc/uptime").split()[0])
    booted = datetime.fromtimestamp(int(btime), UTC)
    moment = f"{booted:%Y-%m-%dT%H:%M:%SZ}"  # RFC 3339 in UTC, as every program prints a time
    text = f"{moment}, up {_lasted(uptime)}"
    return {"boot_time": moment, "uptime_seconds": uptime}, text, "/proc/stat btime, /proc/uptime"


def _lasted(seconds: float) -> str:
    days, rest = divmod(timedelta(seconds=int(seconds)).total_seconds(), 86400)
    hours, rest = divmod(rest, 3600)
    return (f"{int(days)} d " if days else "") + f"{int(hours)} h {int(rest // 60)} min"


def _machine_id(where: Where) -> Reading:
    path = where.under_root("/etc/machine-id")
    try:
        machine_id = read_capped(path, 64).strip()
    except OSError as err:
        raise Unread(str(path), why_not_read(err)) from err
    if not machine_id:
        raise Unread(str(path), "it is empty (not yet set up)")
    return machine_id, machine_id, str(path)


def _packages(where: Where) -> Reading:
    failures = []
    for query in _package_queries(where.root):
        ran = where.runner(query.argv, timeout=where.timeout)
        installed = query.count(ran.stdout) if ran.ok else 0
        if installed:
            return installed, f"{installed} installed", query.said
        if ran.ok:  # a database that is not there answers as an empty one
            failures.append(f"{query.argv[0]} found no package installed under {where.root}")
        elif not ran.missing:
            failures.append(ran.said())
    raise Unread("dpkg-query, rpm, apk", "; ".join(failures) or "none of them is installed")


@dataclass(frozen=True)
class PackageQuery:
    argv: tuple[str, ...]
    said: str  # the source, as a person reads it
    count: Callable[[str], int]  # the installed packages in what it printed


def _package_queries(root: Path) -> list[PackageQuery]:
    rooted = () if root == Path("/") else ("--root", str(root))
    admindir = f"--admindir={root / 'var/lib/dpkg'}"
    return [
        PackageQuery(
            ("dpkg-query", admindir, "--show", "--showformat=${db:Status-Status}\n"),
            f"dpkg-query {admindir} --show",
            lambda printed: sum(1 for line in printed.splitlines() if line.strip() == "installed"),
        ),
        PackageQuery(
            ("rpm", *rooted, "--query", "--all", "--queryformat=.\n"), " ".join(("rpm", *rooted, "-qa")), _lines
        ),
        PackageQuery(("apk", *rooted, "info"), " ".join(("apk", *rooted, "info")), _lines),
    ]


def _lines(printed: str) -> int:
    return sum(1 for line in printed.splitlines() if line.strip())


READERS: tuple[tuple[str, Reader], ...] = (
    ("host", _host),
    ("os", _os),
    ("kernel", _kernel),
    ("architecture", _architecture),
    ("cpus", _cpus),
    ("memory", _memory),
    ("disk", _disk),
    ("booted", _booted),
    ("machine-id", _machine_id),
    ("packages", _packages),
)
