"""The declaration as the mesh-host documents show it, applied under a temporary --root with
--dry-run and for real: the output, each line naming its resource by its id, is the one
`docs/mesh-host.md` shows, word for word (the root said as /tmp/image)."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from mesh_host.cli import EXIT_OK, EXIT_WOULD_CHANGE, main
from tests.mesh_host.sandbox import USERS, Machine, as_user, machine_for

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "mesh-host.md"
SHOWN_ROOT = "/tmp/image"
DOCUMENTED = """\
{"declaration":1,"resources":[
  {"id":"demo-etc","type":"directory","path":"/etc/demo","mode":"0755"},
  {"id":"node-conf","type":"file","path":"/etc/demo/node.conf","content":"role = anchor\\n","mode":"0640"},
  {"id":"journal","type":"service","unit":"systemd-journald.service","state":"running"}
]}
"""


@pytest.fixture(params=USERS)
def machine(request: pytest.FixtureRequest) -> Iterator[Machine]:
    for machine in machine_for(request.param):
        machine.folder("/etc")
        yield machine


def shown(machine: Machine, *argv: str) -> tuple[int, str]:
    """`$ mesh-host ARGV` and what it printed, as the documentation shows it."""
    where = ["--root", SHOWN_ROOT, "--state", "/tmp/state"]

    def task() -> tuple[int, str]:
        out = io.StringIO()
        with redirect_stdout(out):
            code = main([*argv, "--root", str(machine.root), "--state", str(machine.state)])
        return code, out.getvalue()

    code, out = as_user(machine.user, task)
    return code, f"$ mesh-host {' '.join([*argv, *where])}\n" + out.replace(str(machine.root), SHOWN_ROOT)


def test_the_documented_declaration_is_applied_as_written_and_the_docs_show_it_verbatim(machine: Machine) -> None:
    declared = machine.base / "node.json"
    declared.write_text(DOCUMENTED)
    os.chmod(declared, 0o644)
    dry_code, dry_run = shown(machine, "apply", str(declared), "--dry-run")
    assert dry_code == EXIT_WOULD_CHANGE and not (machine.root / "etc/demo").exists()
    code, applied = shown(machine, "apply", str(declared))
    assert code == EXIT_OK
    assert (machine.root / "etc/demo/node.conf").read_text() == "role = anchor\n"
    (machine.root / "etc/demo/node.conf").chmod(0o644)
    code, returned = shown(machine, "apply", str(declared))
    assert code == EXIT_OK
    code, again = shown(machine, "apply", str(declared))
    assert code == EXIT_OK and again.endswith("\nnothing to change: the machine matches\n")
    code, owned = shown(machine, "owned")
    session = (dry_run + applied + returned + owned).replace(str(declared), "node.json")
    document = DOCUMENT.read_text()
    assert f"```json\n{DOCUMENTED}```" in document
    blocks = re.findall(r"```text\n(\$ mesh-host apply node.json .*?)```", document, re.DOTALL)
    assert blocks == [session]
