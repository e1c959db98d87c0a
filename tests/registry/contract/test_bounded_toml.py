"""Every TOML file the programs read (the mesh file, the domains file, the settings file) is read
bounded in depth by one reader: a file nested past it is a clear error and exit 2, never a
`RecursionError` traceback nor minutes spent building a dotted key's tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.commands.cli import main
from registry.contract import TomlRefused
from registry.contract.bounded_toml import MAX_DEPTH, parse_toml

DEEP = {
    "arrays": "nodes = " + "[" * 5000 + "]" * 5000 + "\n",
    "inline tables": "nodes = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n",
    "a dotted key": "a" + ".a" * 200_000 + " = 1\n",
    "a table header": "[" + "a." * 200_000 + "a]\nx = 1\n",
    "tables and keys together": "[" + ".".join(["a"] * 30) + "]\n" + ".".join(["b"] * 30) + " = 1\n",
}


def run(which: str, path: Path, out: Path) -> int:
    argv = {
        "mesh file": ["grants", "--out", str(out), "--mesh", str(path)],
        "domains file": ["grants", "--out", str(out), "--node", "n1", "--domains-file", str(path)],
        "settings file": ["serve", "--config", str(path)],
    }[which]
    return main(argv)


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
@pytest.mark.parametrize("which", ["mesh file", "domains file", "settings file"])
def test_a_file_nested_too_deep_is_refused_with_exit_2_and_no_traceback(
    tmp_path: Path, which: str, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(text, encoding="utf-8")
    assert run(which, path, tmp_path / "out") == 2
    said = capsys.readouterr().err
    assert f"nests deeper than the {MAX_DEPTH} levels allowed" in said, said
    assert "Traceback" not in said
    assert not (tmp_path / "out" / "accounts.conf").exists()


@pytest.mark.parametrize(
    "text",
    [
        'a = "' + "[" * 100 + '"\n',
        "a = '" + "{" * 100 + "'\n",
        'a = """\n' + "[" * 100 + '\n"""\n',
        "# " + "." * 100 + "\nb = 1\n",
        "x = [" + ", ".join(["1.5"] * 100) + "]\n",
        'key = "<node>.<module>.<provision>[.<local>]"\n',
    ],
    ids=["a basic string", "a literal string", "a multi-line string", "a comment", "floats", "a key template"],
)
def test_brackets_and_dots_in_strings_comments_and_values_count_for_nothing(text: str) -> None:
    assert parse_toml(text)


def test_the_depth_allowed_is_read(tmp_path: Path) -> None:
    assert parse_toml("a = " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))
    with pytest.raises(TomlRefused):
        parse_toml("a = " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)
