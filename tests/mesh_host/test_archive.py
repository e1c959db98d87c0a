"""The archive resource on real files under a temporary root, as root and as nobody: unpacked,
converged, put back, a new version's gone members removed, removed whole once undeclared (its own
members only), and refused whole before any change for a digest that differs or a hostile member."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from backports import zstd

from mesh_host.applying import archive as archive_module
from mesh_host.applying.footprint import OwnedArchive
from mesh_host.applying.owned import owned
from mesh_host.applying.roots import Root
from mesh_host.errors import DeclarationRefused
from tests.mesh_host.sandbox import HOME, USERS, Machine, as_user, machine_for, snapshot

SOURCE = "/var/lib/mesh/tool.tar"
Entry = tuple[str, bytes | str | None, int]  # name; content (a file), target (a link, str) or None (a folder); mode


@pytest.fixture(params=USERS)
def machine(request: pytest.FixtureRequest) -> Iterator[Machine]:
    for machine in machine_for(request.param):
        machine.folder("/opt")
        machine.folder("/var/lib/mesh")
        yield machine


def tar(*entries: Entry | tarfile.TarInfo, compress: Callable[[bytes], bytes] = lambda data: data) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as written:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                written.addfile(entry, io.BytesIO(b"x" * entry.size) if entry.isreg() else None)
                continue
            name, held, mode = entry
            info = tarfile.TarInfo(name)
            info.mode = mode
            if isinstance(held, bytes):
                info.size = len(held)
                written.addfile(info, io.BytesIO(held))
            elif isinstance(held, str):
                info.type, info.linkname = tarfile.SYMTYPE, held
                written.addfile(info)
            else:
                info.type = tarfile.DIRTYPE
                written.addfile(info)
    return compress(buffer.getvalue())


TOOL: tuple[Entry, ...] = (
    ("bin", None, 0o755),
    ("bin/tool", b"#!/bin/sh\necho tool\n", 0o755),
    ("lib/libtool.so", b"\x7fELF" + b"\0" * 100, 0o644),
    ("share/doc/README", b"the tool\n", 0o644),
    ("bin/t", "tool", 0o777),
    ("lib/current", "../lib/libtool.so", 0o777),
)


def placed(machine: Machine, data: bytes, source: str = SOURCE) -> str:
    real = machine.real(source)
    real.write_bytes(data)
    real.chmod(0o644)
    machine.give(real)
    return hashlib.sha256(data).hexdigest()


def declared(machine: Machine, data: bytes, **more: object) -> dict[str, object]:
    digest = placed(machine, data)
    resource = {"id": "tool", "type": "archive", "path": "/opt/tool", "source": SOURCE, "sha256": digest,
                "mode": "0755"} | more  # fmt: skip
    return {"declaration": 1, "resources": [resource]}


def listing(top: Path) -> dict[str, object]:
    """What is under `top`: each file's content and mode, each link's target, each folder's mode."""
    seen: dict[str, object] = {}
    for path in sorted(top.rglob("*")):
        name, st = str(path.relative_to(top)), path.lstat()
        if stat.S_ISLNK(st.st_mode):
            seen[name] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            seen[name] = ("folder", oct(stat.S_IMODE(st.st_mode)))
        else:
            seen[name] = (path.read_bytes(), oct(stat.S_IMODE(st.st_mode)))
    return seen


UNPACKED = {
    "bin": ("folder", "0o755"),
    "bin/t": ("link", "tool"),
    "bin/tool": (b"#!/bin/sh\necho tool\n", "0o755"),
    "lib": ("folder", "0o755"),
    "lib/current": ("link", "../lib/libtool.so"),
    "lib/libtool.so": (b"\x7fELF" + b"\0" * 100, "0o644"),
    "share": ("folder", "0o755"),
    "share/doc": ("folder", "0o755"),
    "share/doc/README": (b"the tool\n", "0o644"),
}


@pytest.mark.parametrize(
    "compress",
    [lambda data: data, lambda data: __import__("gzip").compress(data), lzma.compress, zstd.compress],
    ids=["tar", "gzip", "xz", "zstd"],
)
def test_an_archive_is_unpacked_into_its_folder_and_its_members_are_the_footprint(
    machine: Machine, compress: Callable[[bytes], bytes]
) -> None:
    declaration = declared(machine, tar(*TOOL, compress=compress))
    report = machine.apply(declaration)
    assert [(event.where, event.subject, event.what) for event in report.changes] == [
        ("tool", "/opt/tool", "created (0755 as the host)"),
        ("tool", "/opt/tool", "unpacked 9 members (133 bytes of files)"),
    ]
    assert listing(machine.real("/opt/tool")) == UNPACKED
    (entry,) = machine.footprint().owned
    assert isinstance(entry, OwnedArchive) and entry.id == "tool" and entry.created
    assert [member.name for member in entry.members] == [
        "bin", "bin/tool", "lib", "lib/libtool.so", "share", "share/doc", "share/doc/README", "bin/t", "lib/current"
    ]  # fmt: skip


def test_applying_an_archive_twice_changes_nothing(machine: Machine) -> None:
    declaration = declared(machine, tar(*TOOL))
    machine.apply(declaration)
    before = snapshot(machine.base)
    assert machine.apply(declaration).changes == ()
    assert snapshot(machine.base) == before


def test_a_drifted_member_is_put_back(machine: Machine) -> None:
    declaration = declared(machine, tar(*TOOL))
    machine.apply(declaration)
    top = machine.real("/opt/tool")
    (top / "bin/tool").write_text("#!/bin/sh\nrm -rf /\n")
    (top / "lib/libtool.so").chmod(0o666)
    (top / "share/doc/README").unlink()
    (top / "bin/t").unlink()
    (top / "bin/t").symlink_to("/etc/passwd")
    report = machine.apply(declaration)
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/opt/tool/bin/tool", "put back (its content differed)"),
        ("/opt/tool/lib/libtool.so", "mode 0666 -> 0644"),
        ("/opt/tool/share/doc/README", "put back (it was gone)"),
        ("/opt/tool/bin/t", "put back (it led to /etc/passwd)"),
    ]
    assert listing(top) == UNPACKED
    assert machine.apply(declaration).changes == ()


def test_a_member_gone_from_a_new_version_is_removed(machine: Machine) -> None:
    machine.apply(declared(machine, tar(*TOOL)))
    newer = [entry for entry in TOOL if not entry[0].startswith(("share", "lib/current"))]
    newer.append(("bin/tool", b"#!/bin/sh\necho tool 2\n", 0o755))
    declaration = declared(machine, tar(*(e for e in newer if e[1] != b"#!/bin/sh\necho tool\n")))
    report = machine.apply(declaration)
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/opt/tool/bin/tool", "put back (its content differed)"),
        ("/opt/tool/lib/current", "removed (no longer in the archive)"),
        ("/opt/tool/share/doc/README", "removed (no longer in the archive)"),
        ("/opt/tool/share/doc", "removed (no longer in the archive)"),
        ("/opt/tool/share", "removed (no longer in the archive)"),
    ]
    assert sorted(listing(machine.real("/opt/tool"))) == ["bin", "bin/t", "bin/tool", "lib", "lib/libtool.so"]
    assert machine.real("/opt/tool/bin/tool").read_text() == "#!/bin/sh\necho tool 2\n"
    assert machine.apply(declaration).changes == ()


def test_an_archive_no_longer_declared_removes_its_members_only(machine: Machine) -> None:
    machine.apply(declared(machine, tar(*TOOL)))
    machine.stranger("/opt/tool/share/doc/NOTES", "the operator's\n")
    machine.stranger("/opt/tool/local.conf", "the operator's too\n")
    report = machine.apply({"declaration": 1, "resources": []})
    removed = [event.subject for event in report.changes]
    assert "/opt/tool/bin/tool" in removed and "/opt/tool/share/doc" not in removed
    assert sorted(listing(machine.real("/opt/tool"))) == ["local.conf", "share", "share/doc", "share/doc/NOTES"]
    assert [event.what for event in report.notes][-1].startswith("kept: it holds what is not the host's")
    machine.real("/opt/tool/share/doc/NOTES").unlink()
    machine.real("/opt/tool/local.conf").unlink()
    report = machine.apply({"declaration": 1, "resources": []})
    assert [event.subject for event in report.changes] == ["/opt/tool/share/doc", "/opt/tool/share", "/opt/tool"]
    assert not machine.real("/opt/tool").exists() and machine.footprint().owned == ()


def test_files_the_archive_did_not_unpack_follow_its_unknown(machine: Machine) -> None:
    declaration = declared(machine, tar(*TOOL), unknown="move-out", module="tool")
    machine.apply(declaration)
    machine.stranger("/opt/tool/bin/planted", "not the archive's\n")
    report = machine.apply(declaration)
    moved = f"{HOME}/.local/state/mesh-moved/tool/opt/tool/bin/planted"
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/opt/tool/bin/planted", f"moved out to {moved}")
    ]
    module = declared(machine, tar(*TOOL), unknown="module", module="tool")
    machine.apply(module)
    machine.stranger("/opt/tool/cache.db")
    holding = as_user(machine.user, lambda: owned(Root(machine.root), machine.state))
    assert holding.modules == {"/opt/tool": ("/opt/tool/cache.db",)}


def test_a_digest_that_differs_is_refused_saying_both_before_anything_changes(machine: Machine) -> None:
    declaration = declared(machine, tar(*TOOL))
    resource = declaration["resources"][0]  # type: ignore[index]
    found = resource["sha256"]
    resource["sha256"] = "0" * 64
    before = snapshot(machine.base)
    with pytest.raises(DeclarationRefused) as refused:
        machine.apply(declaration)
    assert refused.value.problems == (
        f"resources[0] (tool).source: {machine.real(SOURCE)} has sha256 {found}, the declaration says {'0' * 64}: "
        "nothing unpacked",
    )
    assert snapshot(machine.base) == before


def _info(name: str, kind: bytes, *, linkname: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size, info.mode = kind, linkname, size, 0o644
    return info


HOSTILE = {
    "an absolute path": ((_info("/etc/cron.d/x", tarfile.REGTYPE, size=3),), "'/etc/cron.d/x': an absolute path"),
    "..": ((_info("bin/../../../etc/x", tarfile.REGTYPE, size=3),), "'..' in its path"),
    "a link leading out": ((_info("bin/sh", tarfile.SYMTYPE, linkname="../../../etc/passwd"),), "outside"),
    "an absolute link": ((_info("bin/sh", tarfile.SYMTYPE, linkname="/etc/passwd"),), "is a link to an absolute"),
    "a hard link leading out": ((_info("x", tarfile.LNKTYPE, linkname="../etc/passwd"),), "outside"),
    "a link out through the archive's own links": (
        (_info("d", tarfile.SYMTYPE, linkname="."), _info("e", tarfile.SYMTYPE, linkname="d/..")),
        "'e': a link to 'd/..', which leads out of the archive's folder",
    ),
    "a member inside a link": (
        (_info("to-share", tarfile.SYMTYPE, linkname="share"), _info("to-share/x", tarfile.REGTYPE, size=1)),
        "'to-share/x': inside the link member 'to-share'",
    ),
    "a character device": ((_info("dev/null", tarfile.CHRTYPE),), "is a special file"),
    "a block device": ((_info("dev/sda", tarfile.BLKTYPE),), "is a special file"),
    "a FIFO": ((_info("run/pipe", tarfile.FIFOTYPE),), "is a special file"),
    "a member given twice": ((_info("x", tarfile.REGTYPE, size=1), _info("x", tarfile.REGTYPE, size=2)), "twice"),
}  # fmt: skip


@pytest.mark.parametrize(("entries", "said"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_member_refuses_the_declaration_whole_before_anything_changes(
    machine: Machine, entries: tuple[tarfile.TarInfo, ...], said: str
) -> None:
    machine.apply(declared(machine, tar(*TOOL)))
    hostile = declared(machine, tar(*TOOL, *entries))
    hostile["resources"].append(  # type: ignore[attr-defined]
        {"type": "directory", "path": "/opt/other", "mode": "0755"}
    )
    before = snapshot(machine.base)
    with pytest.raises(DeclarationRefused) as refused:
        machine.apply(hostile)
    (problem,) = refused.value.problems
    assert problem.startswith("resources[0] (tool).source: member ") and said in problem, problem
    assert snapshot(machine.base) == before


def test_more_bytes_or_members_than_the_bounds_refuse_the_declaration(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive_module, "MAX_UNPACKED_BYTES", 64 * 1024)
    big = declared(machine, tar(("big", b"\0" * (128 * 1024), 0o644), compress=lzma.compress))
    with pytest.raises(DeclarationRefused, match="unpacks to more than the 65536 bytes an archive may hold"):
        machine.apply(big)
    monkeypatch.setattr(archive_module, "MAX_MEMBERS", 3)
    many = declared(machine, tar(*TOOL))
    with pytest.raises(DeclarationRefused, match="more than the 3 members an archive may hold"):
        machine.apply(many)
    monkeypatch.setattr(archive_module, "MAX_NAMES_CHARS", 20)
    with pytest.raises(DeclarationRefused, match="its names take more than the 20 characters"):
        machine.apply(declared(machine, tar(*TOOL)))
    assert not machine.real("/opt/tool").exists() and not machine.state.exists()


def test_a_pax_header_claiming_gigabytes_is_refused_without_being_read(machine: Machine) -> None:
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, 4 << 30
    data = header.tobuf(tarfile.USTAR_FORMAT) + b"\0" * 1024
    with pytest.raises(DeclarationRefused, match="a member's header of more than"):
        machine.apply(declared(machine, data))


def test_a_dry_run_says_what_it_would_unpack_and_changes_nothing(machine: Machine) -> None:
    declaration = declared(machine, tar(*TOOL))
    before = snapshot(machine.base)
    report = machine.apply(declaration, dry_run=True)
    assert [event.what for event in report.changes] == [
        "would be created (0755 as the host)",
        "would be unpacked (9 members, 133 bytes of files)",
    ]
    assert snapshot(machine.base) == before
    machine.apply(declaration)
    machine.real("/opt/tool/bin/tool").write_text("changed\n")
    before = snapshot(machine.base)
    report = machine.apply(declaration, dry_run=True)
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/opt/tool/bin/tool", "would be put back (its content differed)")
    ]
    assert snapshot(machine.base) == before


def test_a_path_declared_where_a_member_goes_refuses_the_declaration(machine: Machine) -> None:
    declaration = declared(machine, tar(*TOOL))
    declaration["resources"].append(  # type: ignore[attr-defined]
        {"id": "tool-bin", "type": "file", "path": "/opt/tool/bin/tool", "content": "x", "mode": "0644"}
    )
    with pytest.raises(DeclarationRefused) as refused:
        machine.apply(declaration)
    assert refused.value.problems == (
        "resources[0] (tool): /opt/tool/bin/tool is declared by tool-bin and is a member of this archive",
    )


def test_the_footprint_names_each_member_as_json(machine: Machine) -> None:
    machine.apply(declared(machine, tar(*TOOL)))
    data = json.loads((machine.state / "footprint.json").read_text())
    tool = data["owned"][0]
    assert (tool["type"], tool["id"], tool["source"]) == ("archive", "tool", SOURCE)
    digest = hashlib.sha256(b"#!/bin/sh\necho tool\n").hexdigest()
    assert tool["members"][1] == {
        "name": "bin/tool", "kind": "file", "mode": 0o755, "sha256": digest, "target": None, "created": True
    }  # fmt: skip


def test_a_member_folder_swapped_for_a_link_mid_unpack_leads_no_write_outside(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module writing in the folder renames `bin` away and links `bin` to a folder outside
    between the host's look and its write: the write goes where the descriptor was opened, never
    through the link."""
    declaration = declared(machine, tar(*TOOL))
    machine.apply(declaration)
    machine.real("/opt/tool/bin/tool").write_text("drifted\n")
    outside = machine.folder("/srv/outside")
    before = snapshot(outside)
    writing = archive_module._write_file

    def swapped(folder: int, base: str, data: object, member: object, ids: object) -> None:
        top = machine.real("/opt/tool")
        (top / "bin").rename(top / "bin.away")
        (top / "bin").symlink_to(outside)
        writing(folder, base, data, member, ids)  # type: ignore[arg-type]

    monkeypatch.setattr(archive_module, "_write_file", swapped)
    machine.apply(declaration)
    assert snapshot(outside) == before and sorted(p.name for p in outside.iterdir()) == []
    assert machine.real("/opt/tool/bin.away/tool").read_bytes() == b"#!/bin/sh\necho tool\n"
    monkeypatch.setattr(archive_module, "_write_file", writing)
    report = machine.apply(declaration)  # the link is the archive's member drifted: put back, not followed
    assert (report.changes[0].subject, report.changes[0].what) == ("/opt/tool/bin", "put back (a link stood there)")
    unpacked = listing(machine.real("/opt/tool"))
    assert {name: held for name, held in unpacked.items() if not name.startswith("bin.away")} == UNPACKED
    assert snapshot(outside) == before


def test_a_hard_link_member_is_unpacked_as_a_copy_of_its_file(machine: Machine) -> None:
    hard = _info("bin/tool-again", tarfile.LNKTYPE, linkname="bin/tool")
    declaration = declared(machine, tar(*TOOL, hard))
    machine.apply(declaration)
    again = machine.real("/opt/tool/bin/tool-again")
    assert again.read_bytes() == machine.real("/opt/tool/bin/tool").read_bytes() == b"#!/bin/sh\necho tool\n"
    again.write_text("drifted\n")  # the copy alone drifts: put back, the other untouched
    report = machine.apply(declaration)
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/opt/tool/bin/tool-again", "put back (its content differed)")
    ]
    assert again.read_bytes() == b"#!/bin/sh\necho tool\n"


def test_an_archive_renamed_under_its_id_is_moved_whole_and_owned_names_it(machine: Machine) -> None:
    machine.apply(declared(machine, tar(*TOOL)))
    moved = declared(machine, tar(*TOOL))
    moved["resources"][0]["path"] = "/opt/tool-1"  # type: ignore[index]
    report = machine.apply(moved)
    assert [(event.where, event.subject, event.what) for event in report.changes] == [
        ("tool", "/opt/tool-1", "moved from /opt/tool")
    ]
    assert listing(machine.real("/opt/tool-1")) == UNPACKED and not machine.real("/opt/tool").exists()
    holding = as_user(machine.user, lambda: owned(Root(machine.root), machine.state))
    assert holding.render().startswith(f"archive    tool  /opt/tool-1  created 0755  9 members of {SOURCE} (sha256 ")


def test_a_declared_owner_is_given_to_every_member(machine: Machine) -> None:
    if not machine.privileged:
        pytest.skip("only root gives files away")
    machine.apply(declared(machine, tar(*TOOL), owner="nobody:nogroup"))
    top = machine.real("/opt/tool")
    assert {(path.lstat().st_uid, path.lstat().st_gid) for path in [top, *top.rglob("*")]} == {(65534, 65534)}
    os.chown(top / "bin/tool", 0, 0)
    report = machine.apply(declared(machine, tar(*TOOL), owner="nobody:nogroup"))
    assert [(event.subject, event.what) for event in report.changes] == [
        ("/opt/tool/bin/tool", "owner root:root -> nobody:nogroup")
    ]
