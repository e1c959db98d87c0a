"""A module swapping a folder for a link while the host works in it, thousands of times, on real
files: a concurrent process renames `sub` away, links `sub` to a victim folder outside the declared
one, and back, while the host lists, moves out, sets modes and owners, unpacks an archive and removes. Judged by the
victim's entries, contents, modes and owners, compared before and after."""

from __future__ import annotations

import contextlib
import hashlib
import io
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from mesh_host.applying import safe_fs
from mesh_host.applying.apply import ApplyFailed
from mesh_host.applying.owned import owned
from mesh_host.applying.roots import Root
from mesh_host.applying.safe_fs import closing
from tests.mesh_host.sandbox import Machine, machine_for, snapshot

SWAPS = 5000  # the attacker's renames to a link and back
MIN_STEPS = 20  # the host's steps racing them, at least
SWAPPER = """
import os, sys
sub, victim, swaps = sys.argv[1], sys.argv[2], int(sys.argv[3])
away = sub + ".away"
for _ in range(swaps):
    for step in (lambda: os.rename(sub, away), lambda: os.symlink(victim, sub),
                 lambda: os.unlink(sub), lambda: os.rename(away, sub)):
        try:
            step()
        except OSError:
            pass
print(swaps)
"""


@pytest.fixture
def machine() -> Iterator[Machine]:
    yield from machine_for("root")


def victim(machine: Machine) -> Path:
    """Outside the declared folder, in the root (the link `sub -> /etc` leads there, as on a machine):
    the files an attacker would have the host move, chmod or remove."""
    folder = machine.real("/etc")
    folder.mkdir(mode=0o700)
    for name, mode in (("passwd", 0o644), ("shadow", 0o600), ("x.conf", 0o644)):
        (folder / name).write_text("x\n" if name == "x.conf" else f"{name}\n")
        (folder / name).chmod(mode)
    return folder


def seen_from(folder: Path) -> tuple[object, ...]:
    """The victim's entries (inode, mode, owner, size, times), and its own mode and owner."""
    own = folder.lstat()
    return snapshot(folder), own.st_mode, own.st_uid, own.st_gid, own.st_ctime_ns


def declared(*resources: Mapping[str, object]) -> dict[str, object]:
    app = {"type": "directory", "path": "/srv/app", "mode": "0755", "unknown": "move-out", "module": "app",
           "knows": ["/srv/app/sub/keep.conf"]}  # fmt: skip
    return {"declaration": 1, "resources": [app, *resources]}


def racing(
    machine: Machine, step: Callable[[], None], swapped: str = "/srv/app/sub", at_least: int = MIN_STEPS
) -> None:
    """Runs `step` (an apply, failing or not) while the swapper swaps SWAPS times, and again until
    `step` ran `at_least` times. The link leads to the victim, in the root."""
    steps = 0
    while steps < at_least:
        swapper = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(machine.real(swapped)), str(machine.real("/etc")), str(SWAPS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        while swapper.poll() is None:
            with contextlib.suppress(ApplyFailed):  # a step refused mid-race is an outcome: what changed counts
                step()
            steps += 1
        assert swapper.communicate()[0].strip() == str(SWAPS)


def strays_in(machine: Machine) -> None:
    """The module's files in sub, written as the host writes (by descriptor): the test itself must
    not write through the link it races with."""
    with contextlib.suppress(OSError), closing(safe_fs.open_folder(machine.root, ["srv", "app"])) as app:
        if safe_fs.stat_at(app, "sub") is None:
            safe_fs.make_folder(app, "sub", 0o755)
        with closing(safe_fs.open_child(app, "sub")) as sub:
            for name in ("passwd", "shadow", "keep.conf"):
                safe_fs.write_at(sub, name, b"the module's\n", 0o644, None)


def drift(machine: Machine, path: str) -> None:
    """`path`'s mode changed by hand (by descriptor, as above), for the host to set back."""
    *folders, name = path.strip("/").split("/")
    with contextlib.suppress(OSError), closing(safe_fs.open_folder(machine.root, folders)) as folder:
        safe_fs.set_attributes(folder, name, 0o755, None, folder=name == "sub")


def test_move_out_moves_nothing_through_a_link_swapped_in(machine: Machine) -> None:
    folder = victim(machine)
    machine.folder("/srv/app/sub")
    before = seen_from(folder)

    def move_out() -> None:
        strays_in(machine)
        machine.apply(declared())

    racing(machine, move_out)
    assert seen_from(folder) == before


def test_strays_never_lists_through_a_link_swapped_in(machine: Machine) -> None:
    victim(machine)
    machine.folder("/srv/app/sub")
    machine.apply(declared())
    strays_in(machine)
    seen: set[str] = set()

    def listing() -> None:
        try:
            holding = owned(Root(machine.root), machine.state)
        except OSError:
            return
        seen.update(holding.modules.get("/srv/app", ()))

    racing(machine, listing)
    assert not any(path.endswith("x.conf") for path in seen)


@pytest.mark.parametrize(
    "attributes",
    [{"mode": "0700"}, {"mode": "0700", "owner": "nobody:nogroup"}],
    ids=["mode", "mode and owner"],
)
def test_a_mode_or_owner_is_never_set_through_a_link_swapped_in(machine: Machine, attributes: dict[str, str]) -> None:
    folder = victim(machine)
    machine.folder("/srv/app/sub")
    sub = {"type": "directory", "path": "/srv/app/sub", "unknown": "module", "module": "app"} | attributes
    conf = {"type": "file", "path": "/srv/app/sub/x.conf", "content": "x\n", "mode": "0600"} | attributes
    before = seen_from(folder)

    def drift_then_apply() -> None:
        drift(machine, "/srv/app/sub")
        drift(machine, "/srv/app/sub/x.conf")
        machine.apply(declared(sub, conf))

    racing(machine, drift_then_apply)
    assert seen_from(folder) == before


def test_a_file_no_longer_declared_is_never_removed_through_a_link_swapped_in(machine: Machine) -> None:
    folder = victim(machine)  # its x.conf holds what the host writes: a digest alone would not tell them apart
    machine.folder("/srv/app/sub")
    conf = {"type": "file", "path": "/srv/app/sub/x.conf", "content": "x\n", "mode": "0644"}
    before = seen_from(folder)

    def write_then_remove() -> None:
        try:
            machine.apply(declared(conf))
        finally:
            machine.apply(declared())

    racing(machine, write_then_remove)
    assert seen_from(folder) == before


def archive_of(machine: Machine, *files: str) -> dict[str, object]:
    """An archive unpacked into /srv/app/tool, its files in its folder `bin`, named as the victim's
    (x.conf holding what the victim's holds: a digest alone would not tell them apart)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as written:
        folder = tarfile.TarInfo("bin")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        written.addfile(folder)
        for name in files:
            data = b"x\n" if name == "x.conf" else b"the archive's\n"  # x.conf: the victim's content
            info = tarfile.TarInfo(f"bin/{name}")
            info.size, info.mode = len(data), 0o644
            written.addfile(info, io.BytesIO(data))
    source = machine.real("/var/lib/mesh/tool.tar")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    return {"type": "archive", "path": "/srv/app/tool", "source": "/var/lib/mesh/tool.tar", "sha256": digest,
            "mode": "0755"}  # fmt: skip


def test_an_archive_is_never_unpacked_nor_removed_through_a_link_swapped_in(machine: Machine) -> None:
    folder = victim(machine)
    machine.folder("/srv/app")
    tool = archive_of(machine, "passwd", "shadow", "x.conf")
    before = seen_from(folder)

    def unpack_then_remove() -> None:
        try:
            machine.apply(declared(tool))
        finally:
            machine.apply(declared())

    racing(machine, unpack_then_remove, swapped="/srv/app/tool/bin", at_least=150)
    assert seen_from(folder) == before
