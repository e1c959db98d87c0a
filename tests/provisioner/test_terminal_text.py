"""What a node wrote reaches the operator's terminal as text, never as something the terminal acts
on: `query` and `top` escape controls, bidirectional and other format characters and line
separators in every cell; JSON to a terminal is ASCII, to a pipe as it always was. Against a real
nats-server and seat; the commands run as child processes, their stdout a pipe or a pseudo-terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.to_thread
import pytest

from mesh_dev.local_nats import LocalNats
from registry.contract import buckets, encode_token
from registry.wire import Bus, Holder, Lease, ask, node_key, put
from tests.helpers import clean_environment

NODE = "n\u202e1"
HOST = "h\u202eRTL \u2066iso \x9b1m \x1b[2J nl\nnext [red]x[/red] ls\u2028end del\x7f back\\x1b café 東京"
SHOWN_HOST = (
    "h\\u202eRTL \\u2066iso \\x9b1m \\x1b[2J nl\\x0anext [red]x[/red] ls\\u2028end del\\x7f back\\\\x1b café 東京"
)
REASON = "no value\u2066 \x1b]0;owned\x07\u2029[bold]"
SHOWN_REASON = "no value\\u2066 \\x1b]0;owned\\x07\\u2029[bold]"
# What a terminal acts on, as written into the lease, the node's name and its reason.
RAW = ("\u202e", "\u2066", "\x9b", "\x1b[2J", "\x1b]", "\x07", "\x7f", "\u2028", "\u2029")
COLUMNS = 400  # wider than any row: a cell is never wrapped, and its escapes read whole


@pytest.fixture
async def hostile(server: LocalNats, bus: Bus) -> LocalNats:
    """Node NODE holding its lease with HOST as its host, and one pending module giving REASON."""
    holder = Holder(id="h1", host=HOST, pid=7, since=datetime.now(UTC), ttl_seconds=30)
    await Lease(bus, node_key(NODE), ttl=timedelta(seconds=30), holder=holder).try_take()
    pending = {"state": "pending", "reasons": [REASON], "changed_at": "2026-01-01T00:00:00Z"}
    await put(bus, buckets.APPLIED, f"{encode_token(NODE)}.web", json.dumps(pending).encode())
    with anyio.fail_after(10):
        while not (answer := await ask(bus, {"what": "nodes"}))["entries"] or "host" not in lease_of(answer):
            await anyio.sleep(0.05)
    return server


def lease_of(answer: dict[str, Any]) -> dict[str, Any]:
    [entry] = answer["entries"]
    return cast(dict[str, Any], entry["lease"])


def json_lines(out: str) -> list[Any]:
    """Each line a document: lines end at `\n` alone (`str.splitlines` would also end one at U+2028)."""
    return [json.loads(line) for line in out.removesuffix("\n").split("\n")]


def command(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "provisioner.commands.cli", *args, "--nats-url", url]


async def through_a_pipe(url: str, *args: str) -> str:
    result = await anyio.run_process(command(url, *args), env=clean_environment(), check=False)
    assert result.returncode in (0, 4, 5), result.stderr.decode()
    return result.stdout.decode()


async def on_a_terminal(url: str, *args: str) -> str:
    """What the command wrote with its stdout a pseudo-terminal COLUMNS wide, its line ends as `\\n`."""
    terminal, child_end = pty.openpty()
    fcntl.ioctl(child_end, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
    environment = clean_environment() | {"COLUMNS": str(COLUMNS), "TERM": "xterm-256color"}
    try:
        process = await anyio.open_process(
            command(url, *args), stdin=subprocess.DEVNULL, stdout=child_end, stderr=subprocess.PIPE, env=environment
        )
    finally:
        os.close(child_end)
    async with process:
        written = await anyio.to_thread.run_sync(read_until_closed, terminal)
        assert process.stderr is not None
        errors = b"".join([chunk async for chunk in process.stderr])
        assert await process.wait() in (0, 4, 5), errors.decode()
    return written.decode().replace("\r\n", "\n")


def read_until_closed(terminal: int) -> bytes:
    """Everything written to the pseudo-terminal until its last writer closed it (Linux: EIO)."""
    chunks = []
    try:
        while chunk := os.read(terminal, 65536):
            chunks.append(chunk)
    except OSError:
        pass
    finally:
        os.close(terminal)
    return b"".join(chunks)


def raw_characters(text: str) -> list[str]:
    return [hostile for hostile in RAW if hostile in text]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["query", "nodes"], id="query nodes"),
        pytest.param(["top", "--once"], id="top"),
    ],
)
async def test_a_nodes_text_is_escaped_in_the_fleets_table(hostile: LocalNats, args: list[str]) -> None:
    out = await through_a_pipe(hostile.url, *args)
    [row] = [line for line in out.splitlines() if "held by" in line]  # the newline in the host broke no row
    assert raw_characters(out) == []
    assert row.startswith("n\\u202e1 ")
    assert f"held by {SHOWN_HOST} pid 7" in row


async def test_a_reason_is_escaped_in_the_applied_table(hostile: LocalNats) -> None:
    for args in (["query", "applied"], ["query", "applied", "--by-reason"]):
        out = await through_a_pipe(hostile.url, *args)
        assert raw_characters(out) == []
        assert SHOWN_REASON in out


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["query", "nodes"], id="query nodes"),
        pytest.param(["top", "--once"], id="top, drawn in place"),
    ],
)
async def test_on_a_terminal_the_table_shows_the_escapes_and_no_markup_is_read(
    hostile: LocalNats, args: list[str]
) -> None:
    out = await on_a_terminal(hostile.url, *args)
    assert raw_characters(out) == []  # rich's own sequences are ESC [ ... m and cursor moves, never these
    assert f"held by {SHOWN_HOST} pid 7" in out  # [red]x[/red] as written: not read as rich markup
    assert "n\\u202e1" in out


@pytest.mark.parametrize(
    ("args", "documents"),
    [
        pytest.param(["query", "nodes", "--json"], json.loads, id="--json"),
        pytest.param(["query", "nodes", "--json", "--compact"], json.loads, id="--json --compact"),
        pytest.param(["query", "nodes", "--jsonl"], json_lines, id="--jsonl"),
        pytest.param(["query", "applied", "--by-reason", "--json"], json.loads, id="--by-reason --json"),
        pytest.param(
            ["query", "applied", "--by-reason", "--jsonl"],
            json_lines,
            id="--by-reason --jsonl",
        ),
    ],
)
async def test_json_to_a_terminal_is_ascii_and_reads_as_the_same_document(
    hostile: LocalNats, args: list[str], documents: Callable[[str], Any]
) -> None:
    shown, piped = await on_a_terminal(hostile.url, *args), await through_a_pipe(hostile.url, *args)
    assert [char for char in shown if not (" " <= char <= "~" or char == "\n")] == []
    assert "\\u202e" in shown
    assert without_ages(documents(shown)) == without_ages(documents(piped))


async def test_json_to_a_pipe_is_written_as_it_always_was(hostile: LocalNats) -> None:
    out = await through_a_pipe(hostile.url, "query", "nodes", "--json")
    assert lease_of(json.loads(out))["host"] == HOST
    assert out == json.dumps(json.loads(out), indent=2, ensure_ascii=False) + "\n"  # not ASCII-escaped
    assert "\u202e" in out and "\x9b" in out


def without_ages(document: object) -> object:
    """`document` without the `because` of each node, which says how long ago its lease was renewed."""
    if isinstance(document, dict):
        return {key: without_ages(value) for key, value in document.items() if key != "because"}
    if isinstance(document, list):
        return [without_ages(value) for value in document]
    return document


async def test_remove_node_shows_the_keys_it_removes_escaped(server: LocalNats, bus: Bus) -> None:
    key = "n1.web\u202e.config.a\x1b[2J\x9b"
    await put(bus, buckets.NEEDS, key, b"{}")
    result = await anyio.run_process(
        command(server.url, "remove-node", "n1", "--yes"), env=clean_environment(), check=False
    )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert raw_characters(out) == []
    assert f"removed {buckets.NEEDS.name} n1.web\\u202e.config.a\\x1b[2J\\x9b\n" in out


async def test_an_error_quoting_a_file_is_one_escaped_line(tmp_path: Path) -> None:
    config = tmp_path / "settings.toml"
    config.write_text('[nats]\n"url\u202e\\u001b[2J\\n" = "nats://127.0.0.1:1"\n', encoding="utf-8")
    args = ["query", "--config", str(config), "--nats-url", "nats://127.0.0.1:1"]
    result = await anyio.run_process([sys.executable, "-m", "provisioner.commands.cli", *args], check=False)
    err = result.stderr.decode()
    assert result.returncode == 2
    assert raw_characters(err) == []
    [line] = err.splitlines()
    assert line.startswith("mesh-provisioner query: ") and "url\\u202e\\x1b[2J\\x0a: unknown setting" in line
