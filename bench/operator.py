"""The soak's honest operator (`bench.soak`): it asks the seat `what=registry` every 0.1 s, the
bare echo in its own account beside it (the floor: nats-server and a Python responder on the same
machine), and `what=nodes` every 2 s, each timed, phase by phase (idle, then the soak)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus
from nats.aio.client import Client

from bench.harness import Latency
from bench.observe import nodes_shown
from registry.contract import buckets
from registry.errors import BusError
from registry.wire import ERROR_CODE_HEADER, Bus

ECHO_SUBJECT = "bench.soak.echo"
REGISTRY_REQUEST = b'{"what": "registry"}'
ANSWER_WAIT = 10.0
REASON_CHARS = 120


@dataclass
class Samples:
    """The operator's answers in one phase: `what=registry`, the echo, `what=nodes`, and failures."""

    registry: list[float] = field(default_factory=list)
    echo: list[float] = field(default_factory=list)
    nodes: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)

    def of(self, which: str) -> Latency:
        samples: list[float] = getattr(self, which)
        return Latency.of(samples or [0.0])


class Operator:
    """The honest operator: `what=registry` then the echo every `every` seconds, `what=nodes`
    every `nodes_every` seconds, each timed, into the `Samples` of the phase under way."""

    def __init__(self, nc: Client, ops: Bus, *, every: float, nodes_every: float) -> None:
        self.nc = nc
        self.ops = ops
        self.every = every
        self.nodes_every = nodes_every
        self.samples = Samples()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._registry)
            tg.start_soon(self._nodes)
            task_status.started()

    def phase(self) -> Samples:
        """The samples so far; those after go to a new phase."""
        done, self.samples = self.samples, Samples()
        return done

    async def _registry(self) -> None:
        next_at = anyio.current_time()
        while True:
            await anyio.sleep_until(next_at)
            next_at = max(next_at + self.every, anyio.current_time())
            for subject, kept in ((buckets.VERB_SUBJECT, "registry"), (ECHO_SUBJECT, "echo")):
                await self._timed(subject, kept)

    async def _timed(self, subject: str, kept: str) -> None:
        samples = self.samples
        started = time.perf_counter()
        try:
            msg = await self.nc.request(subject, REGISTRY_REQUEST, timeout=ANSWER_WAIT)
        except Exception as err:  # a timeout or a lost connection is a figure of the soak
            samples.failures[f"{kept}: {type(err).__name__}"] += 1
            return
        code = (msg.headers or {}).get(ERROR_CODE_HEADER)
        if code is not None:
            samples.failures[f"{kept}: answered {code}"] += 1
            return
        getattr(samples, kept).append(time.perf_counter() - started)

    async def _nodes(self) -> None:
        while True:
            samples = self.samples
            started = time.perf_counter()
            try:
                await nodes_shown(self.ops)
                samples.nodes.append(time.perf_counter() - started)
            except BusError as err:
                samples.failures[f"nodes: {err.reason[:REASON_CHARS]}"] += 1
            await anyio.sleep(self.nodes_every)
