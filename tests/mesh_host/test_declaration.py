"""The declaration's vocabulary: what it reads, and everything outside it refused whole, named where."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from mesh_host.declaration import (
    MAX_CONTENT_BYTES,
    MAX_DECLARATION_BYTES,
    MAX_RESOURCES,
    Directory,
    File,
    Service,
    parse_declaration,
    read_declaration,
)
from mesh_host.errors import DeclarationRefused


def folder(path: str = "/etc/app", **more: object) -> dict[str, object]:
    return {"type": "directory", "path": path, "mode": "0755", "unknown": "module", "module": "app"} | more


def file(path: str = "/etc/app/app.toml", **more: object) -> dict[str, object]:
    return {"type": "file", "path": path, "content": "port = 1\n", "mode": "0640"} | more


def service(unit: str = "app.service", **more: object) -> dict[str, object]:
    return {"type": "service", "unit": unit, "state": "running", "enabled": True} | more


def archive(path: str = "/opt/tool", **more: object) -> dict[str, object]:
    given = {"type": "archive", "path": path, "source": "/var/lib/mesh/tool.tar.gz", "sha256": "0" * 64, "mode": "0755"}
    return {key: value for key, value in (given | more).items() if value is not None}


def declared(*resources: object, version: object = 1) -> str:
    return json.dumps({"declaration": version, "resources": list(resources)})


def refusal(text: str) -> DeclarationRefused:
    with pytest.raises(DeclarationRefused) as refused:
        parse_declaration(text, "node.json")
    return refused.value


def test_a_declaration_keeps_its_stated_order_and_each_field() -> None:
    text = declared(
        folder(owner="root:root", knows=["/etc/app/local.toml"]),
        file(owner="root"),
        service(state="stopped", enabled=False),
        folder("/var/lib/app", unknown="program", module=None),
    )
    declaration = parse_declaration(text, "node.json")
    first, second, third, fourth = declaration.resources
    assert isinstance(first, Directory) and first.mode == 0o755 and first.owner == "root:root"
    assert first.known == (PurePosixPath("/etc/app/local.toml"),) and first.unknown == "module"
    assert isinstance(second, File) and second.data == b"port = 1\n" and second.mode == 0o640
    assert isinstance(third, Service) and third.state == "stopped" and third.enabled is False
    assert isinstance(fourth, Directory) and fourth.unknown == "program" and fourth.module is None
    assert list(declaration.paths) == [PurePosixPath("/etc/app"), PurePosixPath("/etc/app/app.toml"),
                                       PurePosixPath("/var/lib/app")]  # fmt: skip


REFUSED = {
    "an unknown resource type": (declared(folder(), {"type": "package", "name": "nginx"}),
                                 "resources[1].type: 'package' is not a resource type (directory, file, archive, "
                                 "service)"),
    "a resource without a type": (declared({"path": "/etc/x"}), "resources[0].type: missing"),
    "an unknown field": (declared(file(colour="blue")),
                         "resources[0].colour: not a field of a file (its fields: id, path, content, mode, owner)"),
    "an id given twice": (declared(folder(id="app"), file(id="app")),
                          "resources[1].id: app already names resources[0]"),
    "an id not a name": (declared(folder(id="a b")), "resources[0].id: 'a b' is not an id"),
    "a problem named by its id": (declared(file(id="conf", mode="9")),
                                  "resources[0] (conf).mode: '9' is not an octal"),
    "an archive without its digest": (declared(archive(sha256=None)),
                                      "resources[0].sha256: missing: the archive's sha256"),
    "an archive's digest not hex": (declared(archive(sha256="x" * 64)), "resources[0].sha256: 'xxxx"),
    "a file inside a program archive": (declared(archive(unknown="program"), file("/opt/tool/x")),
                                        "resources[1].path: /opt/tool/x is inside /opt/tool, which resources[0]"),
    "an unknown policy": (declared(folder(unknown="delete")), "resources[0].unknown: should be 'program', 'module'"),
    "a relative path": (declared(file("etc/app.toml")), "resources[0].path: 'etc/app.toml' is relative"),
    "a path with ..": (declared(file("/etc/../root/x")), "resources[0].path: '/etc/../root/x' is not a plain"),
    "a path with //": (declared(file("/etc//x")), "resources[0].path: '/etc//x' is not a plain"),
    "the root itself": (declared(folder("/")), "resources[0].path: '/' is not a plain"),
    "a mode out of range": (declared(file(mode="17777")), "resources[0].mode: '17777' is not an octal mode"),
    "a mode not octal": (declared(file(mode="0689")), "resources[0].mode: '0689' is not an octal mode"),
    "a mode as a number": (declared(file(mode=420)), 'resources[0].mode: give the mode as an octal string'),
    "version 2": (declared(file(), version=2), "declaration: 2 is not a version: this host reads version 1"),
    "version as text": (declared(file(), version="1"), "declaration: '1' is not a version"),
    "no version": (json.dumps({"resources": []}), "declaration: missing: this host reads version 1"),
    "a field beside the resources": (json.dumps({"declaration": 1, "resources": [], "x": 1}),
                                     "x: not a field of a declaration"),
    "duplicate paths": (declared(folder(), file(), file(content="")),
                        "resources[2].path: /etc/app/app.toml is already declared by resources[1]"),
    "a directory and a file at one path": (declared(folder(), file("/etc/app")),
                                           "resources[1].path: /etc/app is already declared by resources[0]"),
    "duplicate units": (declared(service(), service(state="stopped")),
                        "resources[1].unit: app.service is already declared by resources[0]"),
    "a file inside a program directory": (declared(folder(unknown="program"), file()),
                                          "resources[1].path: /etc/app/app.toml is inside /etc/app, which "
                                          "resources[0] declares unknown: program"),
    "a directory inside a program directory": (declared(folder(unknown="program"), folder("/etc/app/sub")),
                                               "resources[1].path: /etc/app/sub is inside /etc/app"),
    "a folder declared after its file": (declared(file(), folder()),
                                         "resources[0].path: its folder /etc/app is declared later, by resources[1]"),
    "a folder declared as a file": (declared(file("/etc/app"), file("/etc/app/x")),
                                    "resources[1].path: its folder /etc/app is declared as a file by resources[0]"),
    "move-out without a module": (declared(folder(unknown="move-out", module=None)),
                                  "resources[0].module: missing: a directory with unknown move-out names its module"),
    "a known path outside its directory": (declared(folder(knows=["/etc/other"])),
                                           "resources[0].knows[0]: /etc/other is not inside /etc/app"),
    "a bad module name": (declared(folder(module="../x")), "resources[0].module: '../x' is not a module name"),
    "an owner not a name": (declared(file(owner="root:root:root")), "resources[0].owner: 'root:root:root' is not"),
    "a unit without its type": (declared(service("app")), "resources[0].unit: 'app' is not a unit name"),
    "a unit like an option": (declared(service("--force.service")), "resources[0].unit: '--force.service' is not"),
    "a state not running or stopped": (declared(service(state="up")),
                                       "resources[0].state: should be 'running' or 'stopped', not 'up'"),
    "enabled as text": (declared(service(enabled="yes")), "resources[0].enabled: should be a valid boolean"),
    "content not text": (declared(file(content=["a"])), "resources[0].content: not a string"),
    "a resource not an object": (declared([1]), "resources[0]: a resource is a JSON object with a type, not list"),
    "not JSON": ('{"declaration": 1,', "not JSON: "),
    "a key given twice": ('{"declaration": 1, "declaration": 1, "resources": []}',
                          "an object gives 'declaration' twice"),
    "not an object": ("[]", "a declaration is a JSON object"),
}  # fmt: skip


@pytest.mark.parametrize(("text", "said"), REFUSED.values(), ids=REFUSED.keys())
def test_anything_outside_the_vocabulary_is_refused_whole_naming_where(text: str, said: str) -> None:
    refused = refusal(text)
    assert any(problem.startswith(said) for problem in refused.problems), refused.problems
    assert str(refused).startswith("node.json: declaration refused whole, nothing was changed:")


def test_every_problem_is_named_not_only_the_first() -> None:
    refused = refusal(declared({"type": "package"}, file("x", mode="9"), service(state="up")))
    assert [problem.split(":")[0] for problem in refused.problems] == [
        "resources[0].type",
        "resources[1].path",
        "resources[1].mode",
        "resources[2].state",
    ]


def test_a_declaration_is_bounded_in_size_resources_and_content() -> None:
    too_many = declared(*(file(f"/etc/f{index}") for index in range(MAX_RESOURCES + 1)))
    assert refusal(too_many).problems == (f"resources: {MAX_RESOURCES + 1} of them, more than the 1000 a declaration "
                                          "may hold",)  # fmt: skip
    large = declared(file(content="x" * (MAX_CONTENT_BYTES + 1)))
    assert refusal(large).problems[0].startswith(f"resources[0].content: {MAX_CONTENT_BYTES + 1} bytes, more than")
    huge = declared(file(content=" " * MAX_DECLARATION_BYTES))
    assert "larger than the" in refusal(huge).problems[0]


def test_a_file_is_read_up_to_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_bytes(b" " * (MAX_DECLARATION_BYTES + 10))
    with pytest.raises(DeclarationRefused, match="larger than the"):
        read_declaration(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(DeclarationRefused, match="not UTF-8"):
        read_declaration(path)
    with pytest.raises(DeclarationRefused, match="cannot be read: No such file"):
        read_declaration(tmp_path / "absent.json")
    path.write_text(declared(folder()))
    assert read_declaration(path).source == str(path)


def test_a_known_path_and_nested_folders_are_fine() -> None:
    text = declared(folder(knows=["/etc/app/local.toml"]), folder("/etc/app/modules", unknown="move-out"), file())
    assert len(parse_declaration(text, "node.json").resources) == 3
