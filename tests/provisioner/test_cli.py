"""The `mesh-provisioner` command line: help, query, exit codes, settings errors."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from nats.aio.client import Client
from nats.aio.msg import Msg

from mesh_dev.local_nats import LocalNats, local_nats
from provisioner.commands.cli import build_parser, main
from registry.contract import buckets
from tests.helpers import clean_environment, in_own_task, serving


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["serve", "--help"],
        ["query", "--help"],
        ["top", "--help"],
        ["remove-node", "--help"],
        ["grants", "--help"],
    ],
    ids=" ".join,
)
def test_help_exits_0_and_shows_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(argv)
    assert raised.value.code == 0
    out = capsys.readouterr().out
    assert "usage: mesh-provisioner" in out
    assert "example" in out or "exit codes" in out


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["query", "everything"], id="an unknown what"),
        pytest.param(["dev"], id="dev, now mesh-provisioner-dev"),
        pytest.param(["serve", "--log-json"], id="--log-json, now --log-format json"),
        pytest.param(["query", "--json", "--jsonl"], id="query's --json and --jsonl together"),
        pytest.param(["query", "nodes", "--state", "asleep"], id="a state no entry has"),
        pytest.param(["top", "--once", "yes"], id="a value after a switch"),
        pytest.param(["remove-node"], id="remove-node without a node"),
        pytest.param(["grants", "--node", "n1"], id="grants without --out"),
    ],
)
def test_a_usage_error_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param(["query", "--wait", "0"], "wait: ", id="query without time to wait"),
        pytest.param(["query", "nodes", "--stale-after", "nan"], "stale_after: ", id="query a NaN threshold"),
        pytest.param(["top", "--wait", "-1"], "wait: ", id="top without time to wait"),
        pytest.param(["remove-node", "n1", "--wait", "PT0S"], "wait: ", id="remove-node without time to wait"),
    ],
)
def test_a_commands_wrong_argument_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--nats-url", "nats://127.0.0.1:1"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"mesh-provisioner {argv[0]}: settings (the command line): {says}")


async def serve(*args: str, **environ: str) -> tuple[int, str]:
    command = [sys.executable, "-m", "provisioner.commands.cli", "serve", *args]
    result = await anyio.run_process(command, env=clean_environment() | environ, check=False)
    return result.returncode, result.stderr.decode()


@pytest.mark.parametrize(
    ("args", "environ", "says"),
    [
        pytest.param(["--compile-interval", "soon"], {}, "compile_interval: ", id="a bad flag"),
        pytest.param(
            [],
            {"MESH_PROVISIONER_COMPILE_INTERVALL": "2"},
            "MESH_PROVISIONER_COMPILE_INTERVALL",
            id="a misspelt variable",
        ),
        pytest.param([], {"NATS_TIMEOUT": "-1"}, "timeout: ", id="a bad NATS variable"),
        pytest.param(["--config", "/nonexistent.toml"], {}, "not found", id="a missing config file"),
    ],
)
async def test_a_settings_error_stops_serve_with_one_line_and_exit_2(
    args: list[str], environ: dict[str, str], says: str
) -> None:
    code, err = await serve("--nats-url", "nats://127.0.0.1:1", *args, **environ)
    last = err.strip().splitlines()[-1]
    assert code == 2
    assert last.startswith("mesh-provisioner serve: settings") or last.startswith("mesh-provisioner serve: config")
    assert says in last


async def query(url: str, *args: str) -> tuple[int, str, str]:
    command = [sys.executable, "-m", "provisioner.commands.cli", "query", "--nats-url", url, *args]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_query_prints_the_merged_answer_as_json(server: LocalNats) -> None:
    code, out, _ = await query(server.url, "--json")
    answer = json.loads(out)
    assert code == 0
    assert answer["what"] == "registry"
    assert answer["total"]["entries"] == len(answer["entries"]) == 13


async def test_query_a_filter_that_does_not_apply_exits_5_with_one_line(server: LocalNats) -> None:
    code, out, err = await query(server.url, "registry", "--node", "n1")
    assert (code, out) == (5, "")
    [line] = err.strip().splitlines()
    assert line.startswith("mesh-provisioner query: ")
    assert line.endswith("answered 400: 'node' does not apply to what='registry'; it takes no filter")


async def test_query_without_a_reachable_nats_exits_3_with_one_line() -> None:
    code, out, err = await query("nats://127.0.0.1:1", "--wait", "0.5s")
    assert (code, out) == (3, "")
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "mesh-provisioner query: connect: no NATS server at nats://127.0.0.1:1 (from the command line)"
    )


class Serving:
    """`mesh-provisioner serve` as a child process, its stderr read line by line."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.lines: list[str] = []
        assert process.stderr is not None
        self._stream = TextReceiveStream(process.stderr)
        self._buffer = ""

    async def until_logged(self, text: str, within: float = 20) -> None:
        with anyio.fail_after(within):
            while not any(text in line for line in self.lines):
                chunk = await self._stream.receive()
                *complete, self._buffer = (self._buffer + chunk).split("\n")
                self.lines.extend(complete)

    async def exit_code(self, within: float = 20) -> int:
        with anyio.fail_after(within):
            async for chunk in self._stream:
                self.lines.extend((self._buffer + chunk).split("\n"))
                self._buffer = ""
            return await self.process.wait()


@asynccontextmanager
async def serve_process(url: str, *args: str, **environ: str) -> AsyncIterator[Serving]:
    command = [sys.executable, "-m", "provisioner.commands.cli", "serve", "--nats-url", url, *args]
    async with await anyio.open_process(command, env=clean_environment() | environ) as process:
        try:
            yield Serving(process)
        finally:
            if process.returncode is None:
                process.kill()


async def test_plain_seconds_and_a_toml_string_are_durations_for_serve(nats_server: LocalNats, tmp_path: Path) -> None:
    """These made `serve` exit 2."""
    config = tmp_path / "server.toml"
    config.write_text('compile_interval = "5"\n')
    environ = {"MESH_PROVISIONER_SHUTDOWN_TIMEOUT": "2", "MESH_PROVISIONER_CURSOR_TTL": "0.5"}
    async with serve_process(nats_server.url, "--config", str(config), **environ) as seat:
        await seat.until_logged(f"serving {buckets.VERB_SUBJECT}")
        seat.process.send_signal(signal.SIGTERM)
        assert await seat.exit_code() == 0
    async with serve_process(nats_server.url, MESH_PROVISIONER_COMPILE_INTERVAL="2") as seat:
        await seat.until_logged(f"serving {buckets.VERB_SUBJECT}")
        seat.process.send_signal(signal.SIGTERM)
        assert await seat.exit_code() == 0


@pytest.fixture
async def nats_with_a_password(tmp_path: Path) -> AsyncIterator[LocalNats]:
    users = "authorization { users = [ {user: seat, password: first} ] }"
    async with in_own_task(local_nats(tmp_path / "nats", users)) as server:
        yield server


async def test_serve_exits_4_when_nats_closes_its_connection_for_good(nats_with_a_password: LocalNats) -> None:
    """An authorization violation (here: the seat's password changed, the server reloaded) makes
    nats-py close the connection and never reconnect; the seat exits for its supervisor to restart it."""
    server = nats_with_a_password
    async with serve_process(server.url, NATS_USER="seat", NATS_PASSWORD="first") as seat:
        await seat.until_logged(f"serving {buckets.VERB_SUBJECT}")
        server.config.write_text(server.config.read_text().replace("password: first", "password: second"))
        server.process.send_signal(signal.SIGHUP)
        assert await seat.exit_code() == 4
    last = [line for line in seat.lines if line.strip()][-1]
    assert last == "mesh-provisioner serve: serve: nats closed the connection for good; restart the server"


async def test_query_waits_for_a_seat_that_answers_within_the_wait(nats_server: LocalNats, nc: Client) -> None:
    """A query asked while no seat answers is asked again until one does."""
    asked = anyio.Event()

    async def silent(msg: Msg) -> None:  # a seat that hangs: the query's first attempt times out
        asked.set()

    listener = await nc.subscribe(buckets.VERB_SUBJECT, cb=silent)
    command = [sys.executable, "-m", "provisioner.commands.cli", "query", "--json", "--nats-url", nats_server.url]
    command += ["--wait", "60"]
    async with await anyio.open_process(command, env=clean_environment()) as process:
        with anyio.fail_after(20):
            await asked.wait()
        await listener.unsubscribe()
        async with serving(nats_server.url):
            with anyio.fail_after(60):
                code = await process.wait()
            assert process.stdout is not None
            out = await process.stdout.receive(1 << 20)
    assert code == 0
    assert len(json.loads(out)["entries"]) == 13


async def test_query_with_no_seat_says_so_and_exits_4(nats_server: LocalNats) -> None:
    """One account (no accounts configured): nothing in it serves the verb, the seat included."""
    code, out, err = await query(nats_server.url, "--wait", "1")
    assert (code, out) == (4, "")
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"mesh-provisioner query: ask {buckets.VERB_SUBJECT}: no answer from the seat within 1 s")
    assert last.endswith(
        f"(last: nobody answers {buckets.VERB_SUBJECT}: account $G neither imports it nor serves it (nats-server's "
        "trace of the request): the grants do not give it to this party (a node name its key does not cover, or "
        "grants not yet loaded), or the seat (mesh-provisioner serve) is not running)"
    )


@pytest.mark.parametrize(
    ("given", "refused"),
    [
        (["serve", "--compile-interval", "ten minutes"], "--compile-interval"),
        (["query", "--wait", "1x"], "--wait"),
        (["top", "--interval", "5 s"], "--interval"),
    ],
    ids=" ".join,
)
def test_a_duration_without_its_unit_is_refused_saying_what_is_taken(
    given: list[str], refused: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*given, "--nats-url", "nats://127.0.0.1:1"]) == 2
    said = capsys.readouterr().err
    assert "not a duration: expected a duration with its unit: 500ms, 90s, 10m, 1h" in said and refused in said
    assert "Input should be" not in said  # pydantic's own words
