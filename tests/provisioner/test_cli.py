"""The `mesh-provisioner` command line: help, query, exit codes."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from provisioner.cli import build_parser, main
from registry.local_nats import LocalNats
from tests.provisioner.test_shutdown import clean_environment


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["dev", "--help"], ["query", "--help"]])
def test_help_exits_0_and_shows_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(argv)
    assert raised.value.code == 0
    out = capsys.readouterr().out
    assert "usage: mesh-provisioner" in out
    assert "example" in out or "Exit codes" in out


def test_an_unknown_what_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as raised:
        main(["query", "everything"])
    assert raised.value.code == 2


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
    assert err.strip().splitlines() == ["mesh-provisioner query: the verb answered 400: 'node' does not apply to "
                                        "what='registry'; it takes no filter"]  # fmt: skip


async def test_query_without_a_reachable_nats_exits_1_with_one_line() -> None:
    code, out, err = await query("nats://127.0.0.1:1", "--wait", "0.5")
    assert (code, out) == (1, "")
    last = err.strip().splitlines()[-1]
    assert last == "mesh-provisioner query: connect to nats://127.0.0.1:1: no connection within 0.5 s"
