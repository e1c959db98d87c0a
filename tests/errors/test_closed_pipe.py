"""Every console script, its stdout's reader gone before it writes (`... | head -1` once head has
its line): it ends quietly, with no traceback and no "Exception ignored" at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from registry.command_line import EXIT_CLOSED_PIPE
from tests.helpers import clean_environment, in_own_task, serving

BIN = Path(sys.executable).parent


async def run_with_closed_stdout(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """The console script `argv[0]` of this environment, its stdout a pipe nobody reads: its exit
    status and what it wrote to stderr."""
    reading, writing = os.pipe()
    os.close(reading)
    try:
        done = await anyio.run_process(
            [str(BIN / argv[0]), *argv[1:]], stdout=writing, env=env or clean_environment(), check=False
        )
    finally:
        os.close(writing)
    return done.returncode, done.stderr.decode()


def assert_quiet(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr
    assert "BrokenPipeError" not in stderr, stderr


@pytest.fixture
async def seat(nats_server: LocalNats) -> AsyncIterator[str]:
    async with in_own_task(serving(nats_server.url)):
        yield nats_server.url


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["mesh-provisioner", "query"], id="mesh-provisioner query (a table)"),
        pytest.param(["mesh-provisioner", "query", "--jsonl"], id="mesh-provisioner query --jsonl"),
        pytest.param(["mesh-provisioner", "top", "--once"], id="mesh-provisioner top --once"),
        pytest.param(["mesh-provisioner-client", "status", "--node", "n1", "--json"], id="client status --json"),
    ],
)
async def test_a_command_printing_to_a_closed_pipe_exits_141_saying_nothing(seat: str, argv: list[str]) -> None:
    code, stderr = await run_with_closed_stdout([*argv, "--server", seat])
    assert_quiet(stderr)
    assert code == EXIT_CLOSED_PIPE


async def test_the_dev_loop_ends_quietly_when_its_banner_finds_the_pipe_closed(tmp_path: Path) -> None:
    environ = clean_environment() | {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    with anyio.fail_after(60):
        code, stderr = await run_with_closed_stdout(
            ["mesh-provisioner-dev", "--no-demo", "--state-dir", str(tmp_path / "state")], environ
        )
    assert_quiet(stderr)
    assert "mesh-provisioner-dev is running" not in stderr
    assert code == EXIT_CLOSED_PIPE


@pytest.mark.parametrize(
    "script", ["mesh-provisioner", "mesh-provisioner-client", "mesh-provisioner-dev", "mesh-postgres-provisioner"]
)
async def test_help_into_a_closed_pipe_says_nothing(script: str) -> None:
    """argparse writes --help and exits; a reader gone before is no failure (the postgres
    provisioner prints nothing else to stdout: its log is on stderr)."""
    code, stderr = await run_with_closed_stdout([script, "--help"])
    assert (code, stderr) in ((0, ""), (EXIT_CLOSED_PIPE, ""))


def test_the_console_scripts_are_this_environments() -> None:
    """The premise: the scripts run above are the ones installed from this clone."""
    done = subprocess.run(
        [str(BIN / "mesh-provisioner"), "--help"], capture_output=True, text=True, check=False, cwd=os.sep
    )
    assert done.returncode == 0 and "usage: mesh-provisioner" in done.stdout
