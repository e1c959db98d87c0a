"""A three-node JetStream cluster on loopback for the tests, each server started and stopped (or
killed) on its own: the cluster's faults are the tests' to cause.

Each server has its own `server_name`, store dir and `cluster { name, listen, routes }`; its
client and route ports are chosen free once, so a server restarted after a kill comes back where
its peers and clients look for it. A server is ready when it says so (`mesh_dev.local_nats`).
"""

from __future__ import annotations

import os
import random
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mesh_dev.local_nats import LocalNats, local_nats

CLUSTER = "mesh-test"


# Below the kernel's ephemeral range (32768 and up): a port the kernel gave this probe could be given
# again, to another test's connection or server, before the cluster's server binds it ("address
# already in use", seen once in a full run); one picked here is only ever taken by another pick.
PORTS = range(20000, 32000)


def _own_ports() -> range:
    """This test process's share of `PORTS`: under pytest-xdist each worker (`gw<n>`) picks from a
    slice of its own, so two workers never pick the same port between a probe and the bind that
    follows (seen: a site's server failing with "address already in use")."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    share = len(PORTS) // max(count, 1)
    return range(PORTS.start + index * share, PORTS.start + (index + 1) * share)


_HANDED_OUT: set[int] = set()  # picked by this process: not handed out twice before it is bound


def free_port() -> int:
    own = _own_ports()
    while True:
        port = random.choice(own)  # noqa: S311  # a test's port, no secret
        if port in _HANDED_OUT:
            if len(_HANDED_OUT) >= len(own) // 2:
                _HANDED_OUT.clear()  # long since bound, or let go
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port


@dataclass
class Peer:
    """One server of the cluster: where it keeps its data and listens, and its process when up."""

    name: str
    state_dir: Path
    client_port: int
    route_port: int
    running: LocalNats | None = None
    stopped: anyio.Event = field(default_factory=anyio.Event)
    exited: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def config(self, routes: list[int], extra: str = "") -> str:
        listed = ", ".join(f'"nats-route://127.0.0.1:{port}"' for port in routes)
        return (
            f'server_name: "{self.name}"\n'
            f'cluster {{ name: "{CLUSTER}", listen: "127.0.0.1:{self.route_port}", routes: [{listed}] }}\n'
            f"{extra}"
        )


class Cluster:
    """Three servers; `start(i)`, `stop(i)` and `kill(i)` one at a time, `urls` for clients."""

    def __init__(self, root: Path, tasks: TaskGroup, size: int = 3, extra: str = "") -> None:
        """`extra`: configuration every server adds (an `include` of a file in its state dir)."""
        self.tasks = tasks
        self.extra = extra
        self.peers = [Peer(f"n{i}", root / f"n{i}", free_port(), free_port()) for i in range(size)]

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(peer.url for peer in self.peers)

    async def start(self, *which: int) -> None:
        """Starts the servers `which` (all when none is named) together, each ready when it returns."""
        async with anyio.create_task_group() as starting:
            for index in which or range(len(self.peers)):
                starting.start_soon(self._start_one, self.peers[index])

    async def _start_one(self, peer: Peer) -> None:
        await self.tasks.start(partial(self._run, peer))

    async def _run(self, peer: Peer, *, task_status: TaskStatus[None]) -> None:
        routes = [other.route_port for other in self.peers if other is not peer]
        peer.stopped, peer.exited = anyio.Event(), anyio.Event()
        try:
            async with local_nats(peer.state_dir, peer.config(routes, self.extra), port=peer.client_port) as running:
                peer.running = running
                task_status.started()
                await peer.stopped.wait()
        finally:
            peer.running = None
            peer.exited.set()

    async def stop(self, index: int) -> None:
        """Stops server `index` cleanly (SIGTERM) and waits until it has exited."""
        peer = self.peers[index]
        if peer.running is not None:
            peer.stopped.set()
            await peer.exited.wait()

    async def kill(self, index: int) -> None:
        """Kills server `index` (SIGKILL: no goodbye to its peers) and waits until it has exited."""
        running = self.peers[index].running
        if running is not None:
            running.process.send_signal(signal.SIGKILL)
        await self.stop(index)


@asynccontextmanager
async def cluster(root: Path, extra: str = "") -> AsyncIterator[Cluster]:
    """A cluster whose servers are not started yet; every one still running is stopped on exit."""
    async with anyio.create_task_group() as tasks:
        servers = Cluster(root, tasks, extra=extra)
        try:
            yield servers
        finally:
            for peer in servers.peers:
                peer.stopped.set()
