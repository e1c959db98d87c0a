"""The development loop: a local nats-server with JetStream under a state folder, then the server.

Further participants (the node client's demo, say) are started in the same task group once the
server is ready; each is called with the NATS URL and cancelled when the server is asked to stop.
`mesh-provisioner-dev` (`mesh_dev.cli`) runs it until SIGTERM or SIGINT.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import anyio

from mesh_dev.local_nats import local_nats
from provisioner.server import run_server
from provisioner.settings import ServerSettings
from registry import buckets
from registry.bus import BusOptions

log = logging.getLogger(__name__)

Participant = Callable[[str], Coroutine[Any, Any, None]]


async def run_dev(
    *,
    state_dir: Path,
    settings: ServerSettings,
    stop: anyio.Event,
    participants: Sequence[Participant] = (),
    out: TextIO | None = None,
) -> None:
    """Runs nats-server and the server until `stop` is set; participants start once the server is ready."""
    async with local_nats(state_dir / "nats") as nats_server:
        bus_options = BusOptions(servers=(nats_server.url,), name=buckets.SEAT)
        async with anyio.create_task_group() as tasks:
            await tasks.start(partial(run_server, bus_options=bus_options, settings=settings, stop=stop))
            if out is not None:
                out.write(welcome(nats_server.url, state_dir))
                out.flush()
            async with anyio.create_task_group() as others:
                for participant in participants:
                    others.start_soon(participant, nats_server.url)
                await stop.wait()
                others.cancel_scope.cancel()


def welcome(url: str, state_dir: Path) -> str:
    return f"""
mesh-provisioner-dev is running.
  NATS:   {url}   (JetStream data under {state_dir / "nats"})
  verb:   {buckets.VERB_SUBJECT}

Ask it from another terminal:
  mesh-provisioner query --nats-url {url}
  mesh-provisioner query needs --node node-1 --nats-url {url}
  mesh-provisioner query collect --collection shell:zsh:normal --nats-url {url}
  NATS_URL={url} mesh-provisioner query applied

Ctrl-C stops it.
"""
