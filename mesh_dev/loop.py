"""The development loop: a local nats-server with JetStream under a state folder, then the server.

Further participants (the node client's demo, say) are started in the same task group once the
server is ready; each is called with the NATS URL and cancelled when the server is asked to stop.
`mesh-provisioner-dev` (`mesh_dev.cli`) runs it until SIGTERM or SIGINT.

While its nats-server runs, the loop tells the tools where it is: it writes the `nats` CLI
context `mesh-provisioner-dev` (its URL and this process's id) and removes it on the way out, so
`mesh-provisioner query` and `mesh-provisioner-client status` in another shell find it without
flags, and `nats --context mesh-provisioner-dev` too. The dev bus has no accounts: the context
holds no credentials. A loop killed before it could remove the context leaves it behind; the
tools pass over it once its process is gone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import anyio

from mesh_dev.local_nats import local_nats
from mesh_dev.ownership import owned
from mesh_dev.shell import new_terminal
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from registry.access import PartyMap
from registry.contract import buckets
from registry.edge import DEV_CONTEXT, NatsContext, NatsContexts
from registry.errors import RegistryError
from registry.wire import BusOptions

log = logging.getLogger(__name__)

Participant = Callable[[str], Coroutine[Any, Any, None]]


async def run_dev(
    *,
    state_dir: Path,
    settings: ServerSettings,
    stop: anyio.Event,
    participants: Sequence[Participant] = (),
    out: TextIO | None = None,
    contexts: NatsContexts | None = None,
) -> None:
    """Runs nats-server and the server until `stop` is set; participants start once the server is
    ready. With `contexts`, the context `mesh-provisioner-dev` names the server while it runs.
    Raises `StateInUse`, having changed nothing, when another loop runs on `state_dir`."""
    with owned(state_dir) as lock:
        async with local_nats(state_dir / "nats", keep_fds=(lock,)) as nats_server:
            await _serve(
                nats_server.url,
                state_dir=state_dir,
                settings=settings,
                stop=stop,
                participants=participants,
                out=out,
                contexts=contexts,
            )


async def _serve(
    url: str,
    *,
    state_dir: Path,
    settings: ServerSettings,
    stop: anyio.Event,
    participants: Sequence[Participant],
    out: TextIO | None,
    contexts: NatsContexts | None,
) -> None:
    bus_options = BusOptions(servers=(url,), name=buckets.SEAT)
    with advertised(contexts, url, state_dir):
        async with anyio.create_task_group() as tasks:
            serve = partial(
                run_server, bus_options=bus_options, settings=settings, stop=stop, parties=_parties(settings)
            )
            await tasks.start(serve)
            if out is not None:
                out.write(welcome(url, state_dir, contexts))
                out.flush()
            async with anyio.create_task_group() as others:
                for participant in participants:
                    others.start_soon(participant, url)
                await stop.wait()
                others.cancel_scope.cancel()


def _parties(settings: ServerSettings) -> PartyMap | None:
    """Who the seat answers besides its own account: nobody, on the dev bus (it has no accounts:
    every program is in the seat's), unless a grants file was given."""
    return PartyMap({}) if settings.grants_file is None else None


@contextmanager
def advertised(contexts: NatsContexts | None, url: str, state_dir: Path) -> Iterator[None]:
    """The context `mesh-provisioner-dev` naming `url` for the block (none without `contexts`)."""
    if contexts is None:
        yield
        return
    context = NatsContext(
        description=f"mesh-provisioner-dev, data under {state_dir}", url=url, mesh_provisioner_dev_pid=os.getpid()
    )
    path = contexts.write(DEV_CONTEXT, context)
    log.debug("wrote the nats context %s: %s", DEV_CONTEXT, path)
    try:
        yield
    finally:
        contexts.remove_own(DEV_CONTEXT, os.getpid())


def welcome(url: str, state_dir: Path, contexts: NatsContexts | None = None) -> str:
    return f"""
mesh-provisioner-dev is running.
  NATS:   {url}   (JetStream data under {state_dir / "nats"})
  verb:   {buckets.VERB_SUBJECT}
{_found_by(url, contexts)}
Ask it from another terminal:
  {new_terminal()}
  mesh-provisioner query{_flag(url, contexts)}
  mesh-provisioner query needs --node node-1{_flag(url, contexts)}
  mesh-provisioner query collect --collection shell:zsh:normal{_flag(url, contexts)}
  mesh-provisioner query applied{_flag(url, contexts)}

Ctrl-C stops it.
"""


def _found_by(url: str, contexts: NatsContexts | None) -> str:
    if contexts is None:
        return f"  no nats context names it: give the tools --server {url}\n"
    told = f"  the tools find it through the nats context {DEV_CONTEXT} ({contexts.path(DEV_CONTEXT)}), until Ctrl-C"
    selected = _selected(contexts)
    if selected not in (None, DEV_CONTEXT):
        told += f";\n  the nats CLI's selected context {selected!r} comes first: they are given --context {DEV_CONTEXT}"
    return told + "\n"


def _flag(url: str, contexts: NatsContexts | None) -> str:
    if contexts is None:
        return f" --server {url}"
    return "" if _selected(contexts) in (None, DEV_CONTEXT) else f" --context {DEV_CONTEXT}"


def _selected(contexts: NatsContexts) -> str | None:
    try:
        return contexts.selected()
    except RegistryError:
        return None
