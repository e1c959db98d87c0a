"""The `mesh-provisioner` command line: help, query, exit codes, settings errors."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.cli import build_parser, main
from tests.helpers import clean_environment


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["query", "--help"]])
def test_help_exits_0_and_shows_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(argv)
    assert raised.value.code == 0
    out = capsys.readouterr().out
    assert "usage: mesh-provisioner" in out
    assert "example" in out or "Exit codes" in out


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["query", "everything"], id="an unknown what"),
        pytest.param(["dev"], id="dev, now mesh-provisioner-dev"),
        pytest.param(["serve", "--log-json"], id="--log-json, now --log-format json"),
    ],
)
def test_a_usage_error_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2


async def serve(*args: str, **environ: str) -> tuple[int, str]:
    command = [sys.executable, "-m", "provisioner.cli", "serve", *args]
    result = await anyio.run_process(command, env=clean_environment() | environ, check=False)
    return result.returncode, result.stderr.decode()


@pytest.mark.parametrize(
    ("args", "environ", "says"),
    [
        pytest.param(["--compile-interval", "soon"], {}, "compile_interval: ", id="a bad flag"),
        pytest.param([], {"MESH_PROVISIONER_COMPILE_INTERVALL": "2"}, "MESH_PROVISIONER_COMPILE_INTERVALL",
                     id="a misspelt variable"),
        pytest.param([], {"NATS_TIMEOUT": "-1"}, "timeout: ", id="a bad NATS variable"),
        pytest.param(["--config", "/nonexistent.toml"], {}, "not found", id="a missing config file"),
    ],
)  # fmt: skip
async def test_a_settings_error_stops_serve_with_one_line_and_exit_2(
    args: list[str], environ: dict[str, str], says: str
) -> None:
    code, err = await serve("--nats-url", "nats://127.0.0.1:1", *args, **environ)
    last = err.strip().splitlines()[-1]
    assert code == 2
    assert last.startswith("mesh-provisioner serve: settings") or last.startswith("mesh-provisioner serve: config")
    assert says in last


async def query(url: str, *args: str) -> tuple[int, str, str]:
    command = [sys.executable, "-m", "provisioner.cli", "query", "--nats-url", url, *args]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_query_prints_the_merged_answer_as_json(server: LocalNats) -> None:
    code, out, _ = await query(server.url)
    answer = json.loads(out)
    assert code == 0
    assert answer["what"] == "registry"
    assert answer["total"]["entries"] == len(answer["entries"]) == 13


async def test_query_a_filter_that_does_not_apply_exits_3_with_one_line(server: LocalNats) -> None:
    code, out, err = await query(server.url, "registry", "--node", "n1")
    assert (code, out) == (3, "")
    [line] = err.strip().splitlines()
    assert line.startswith("mesh-provisioner query: ")
    assert line.endswith("answered 400: 'node' does not apply to what='registry'; it takes no filter")


async def test_query_without_a_reachable_nats_exits_1_with_one_line() -> None:
    code, out, err = await query("nats://127.0.0.1:1", "--wait", "0.5")
    assert (code, out) == (1, "")
    last = err.strip().splitlines()[-1]
    assert last == "mesh-provisioner query: connect to nats://127.0.0.1:1: no connection within 0.5 s"
