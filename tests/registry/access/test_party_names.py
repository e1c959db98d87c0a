"""Every name `grants` writes into a file is checked the same way, from a flag or the mesh file:
a newline in a provider's name wrote a user with a password into accounts.conf, a `*` widened the
provider's subjects. Refused (exit 2) before any file or seed is written; and a comment rendered
into a configuration cannot end its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.commands.cli import main
from registry.access.accounts_conf import comment

INJECTED = 'postgres"\n    users: [{user: "evil", password: "pw"}]\n  x {\n'
BAD = {
    "a newline that writes a user": ("provider", INJECTED),
    "a wildcard": ("provider", "mesh-provisioner_needs.*"),
    "a dot": ("provider", "a.b"),
    "a node's newline": ("node", "n1\nusers"),
    "an operator's escape sequence": ("operator", "ops\x1b[2J"),
    "a node's bidirectional override": ("node", "n\u202e1"),
}


def mesh_text(kind: str, name: str) -> str:
    escaped = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\x1b", "\\u001b")
    if kind == "provider":
        return f'nodes = ["n1"]\n[providers."{escaped}"]\n'
    return f'{kind}s = ["{escaped}"]\n'


@pytest.mark.parametrize("jwt", [False, True], ids=["static", "jwt"])
@pytest.mark.parametrize("source", ["flag", "mesh file"])
@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_a_bad_name_is_refused_before_anything_is_written(
    tmp_path: Path, bad: tuple[str, str], source: str, jwt: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    kind, name = bad
    out = tmp_path / "out"
    argv = ["grants", "--out", str(out), *(["--jwt"] if jwt else [])]
    if source == "flag":
        argv += [f"--{kind}", name]
    else:
        mesh = tmp_path / "mesh.toml"
        mesh.write_text(mesh_text(kind, name), encoding="utf-8")
        argv += ["--mesh", str(mesh)]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "\n" not in said.strip() and "\x1b" not in said and "\u202e" not in said, said
    assert not out.exists() or not any(out.iterdir()), "nothing is written, not even a seed"


def test_an_honest_provider_is_still_granted(tmp_path: Path) -> None:
    assert main(["grants", "--out", str(tmp_path), "--node", "n2", "--provider", "postgres@n2"]) == 0
    conf = (tmp_path / "accounts.conf").read_text(encoding="utf-8")
    assert "provider-postgres" in conf and "password" not in conf


def test_a_comment_cannot_end_its_line() -> None:
    assert comment("put into b\nusers: [{user: x}]\u2028") == "put into b\\nusers: [{user: x}]\\u2028"
