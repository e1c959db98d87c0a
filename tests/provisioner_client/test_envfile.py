"""Env files: quoting that sh and systemd read back, atomic 0600 writes, the ledger."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner_client.errors import MaterializeError
from provisioner_client.materializing.envfile import EnvFolder, quote, render

_SHELL_NEED_ESCAPE = '"\\`$'
values = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=40)


def systemd_reads(content: str) -> dict[str, str]:
    """systemd's EnvironmentFile= parser (src/basic/env-file.c), for the lines `render` writes:
    comment lines, then `KEY="..."` with backslash escapes inside the double quotes."""
    found: dict[str, str] = {}
    state, key, value = "pre_key", "", ""
    for char in content:
        if state == "pre_key":
            state, key, value = ("comment", "", "") if char in "#;" else ("key", char, "")
        elif state == "comment":
            state = "pre_key" if char in "\n\r" else "comment"
        elif state == "key":
            state, key = ("pre_value", key) if char == "=" else ("key", key + char)
        elif state == "pre_value":
            if char == '"':
                state = "quoted"
            elif char in "\n\r":
                found[key], state = value, "pre_key"
            else:
                raise AssertionError(f"unexpected {char!r} after a closing quote")
        elif state == "quoted":
            state, value = (
                ("pre_value", value) if char == '"' else ("escape", value) if char == "\\" else ("quoted", value + char)
            )
        elif state == "escape":
            value += char if char in _SHELL_NEED_ESCAPE else "" if char == "\n" else "\\" + char
            state = "quoted"
    return found


def sh_reads(path: Path, names: list[str]) -> dict[str, str]:
    script = f'. "{path}"; ' + "; ".join(f'printf "%s\\0" "${name}"' for name in names)
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True).stdout.decode()
    return dict(zip(names, out.split("\0")[:-1], strict=True))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), values, min_size=1, max_size=4))
def test_every_value_reads_back_the_same_in_sh_and_systemd(
    tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]
) -> None:
    path = tmp_path_factory.mktemp("env") / "m.env"
    content = render("m", env)
    path.write_bytes(content)
    assert systemd_reads(content.decode()) == env
    assert sh_reads(path, sorted(env)) == env


@pytest.mark.parametrize(
    ("value", "written"),
    [
        pytest.param("plain", '"plain"', id="plain text"),
        pytest.param('say "hi"', '"say \\"hi\\""', id="double quotes"),
        pytest.param("$HOME and `cmd`", '"\\$HOME and \\`cmd\\`"', id="expansions"),
        pytest.param("a\\b", '"a\\\\b"', id="a backslash"),
        pytest.param("# not a comment 'x'", "\"# not a comment 'x'\"", id="hash and single quotes"),
        pytest.param("two\nlines", '"two\nlines"', id="a newline"),
        pytest.param("café ✓", '"café ✓"', id="unicode"),
    ],
)
def test_quoting(value: str, written: str) -> None:
    assert quote(value) == written


def test_a_file_is_written_0600_once_and_a_foreign_file_is_never_touched(tmp_path: Path) -> None:
    folder = EnvFolder(tmp_path / "env")
    first = folder.materialize("app", b"A=1\n")
    assert first.written and (first.path.stat().st_mode & 0o777) == 0o600
    stamp = first.path.stat().st_ino, first.path.stat().st_mtime_ns
    assert not folder.materialize("app", b"A=1\n").written
    assert (first.path.stat().st_ino, first.path.stat().st_mtime_ns) == stamp
    foreign = tmp_path / "env" / "other.env"
    foreign.write_text("MINE=1\n")
    with pytest.raises(MaterializeError, match="was not written by this client"):
        folder.materialize("other", b"B=2\n")
    assert foreign.read_text() == "MINE=1\n"
    assert folder.remove_except(set()) == [first.path]
    assert foreign.exists()
    assert sorted(p.name for p in (tmp_path / "env").iterdir()) == [
        ".mesh-provisioner-client.json",
        ".mesh-provisioner-client.key",
        "other.env",
    ]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("swapped_in", ["a link to /dev/zero", "a FIFO", "a link to the same bytes"])
def test_a_file_swapped_for_something_that_never_ends_or_a_link_is_judged_not_read(
    tmp_path: Path, swapped_in: str
) -> None:
    """status and reconcile judge an env file without following a link or reading a FIFO or an
    endless device: each would have blocked or filled memory (the folder is the client's, but a
    program never trusts what it reads to end)."""
    folder = EnvFolder(tmp_path / "env")
    written = folder.materialize("app", b"A=1\n")
    wanted = folder.digest_on_disk("app")
    assert wanted is not None and folder.intact("app", wanted)
    written.path.unlink()
    if swapped_in == "a FIFO":
        os.mkfifo(written.path, 0o600)
    elif swapped_in == "a link to /dev/zero":
        written.path.symlink_to("/dev/zero")
    else:
        same = tmp_path / "same.env"
        same.write_bytes(b"A=1\n")
        same.chmod(0o600)
        written.path.symlink_to(same)
    assert folder.digest_on_disk("app") is None
    assert not folder.intact("app", wanted)
    assert folder.materialize("app", b"A=1\n").written  # put back as a regular file of its own
    assert folder.intact("app", wanted)
