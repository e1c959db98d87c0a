"""What the one-shot commands say when they cannot connect, against a real nats-server: a URL
whose scheme nats-py does not connect with is refused at once (it waited the connect timeout,
then said a DNS error)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from tests.helpers import clean_environment, serving

BIN = Path(sys.executable).parent

ONE_SHOT = {
    "query": ["mesh-provisioner", "query"],
    "top --once": ["mesh-provisioner", "top", "--once"],
    "remove-node": ["mesh-provisioner", "remove-node", "n1", "--yes"],
    "client status": ["mesh-provisioner-client", "status", "--node", "n1"],
    "client reconcile": ["mesh-provisioner-client", "reconcile", "--node", "n1"],
}


async def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """A console script of this environment: its exit status, its stderr and how long it took."""
    started = time.monotonic()
    done = await anyio.run_process([str(BIN / argv[0]), *argv[1:]], env=env or clean_environment(), check=False)
    return done.returncode, done.stderr.decode(), time.monotonic() - started


@pytest.mark.parametrize("argv", ONE_SHOT.values(), ids=ONE_SHOT.keys())
async def test_a_scheme_nats_py_does_not_take_is_a_usage_error_at_once(nats_server: LocalNats, argv: list[str]) -> None:
    code, stderr, took = await run([*argv, "--server", f"nat://127.0.0.1:{nats_server.port}"])
    assert "the scheme nat:// is not one nats-py connects with: nats://, tls://, ws:// or wss://" in stderr
    assert "NATS server URL (from the command line)" in stderr
    assert code == 2
    assert took < 3, "refused before any connection is tried (it waited the 5 s connect timeout)"


async def test_the_same_url_with_its_scheme_right_connects(nats_server: LocalNats) -> None:
    """The premise: the server above is there, only the scheme was wrong."""
    async with serving(nats_server.url):
        code, stderr, _ = await run(["mesh-provisioner-client", "status", "--node", "n1", "-s", nats_server.url])
    assert code in (0, 1), stderr  # 1: nothing applied on this empty bus; never 2 or 3
