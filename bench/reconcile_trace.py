"""`python -m bench.reconcile_trace`: which of the node client's modules one reconcile walks through.

A local nats-server with the seat (`mesh_dev.loop.run_dev`), the demo's stand-ins, and node
`node-1` reconciling the demo's example manifests (`deploy/examples/`) twice: the first time, then
with nothing to do. Over each reconcile a profile hook (`sys.setprofile`) counts a call as an entry
when it enters a `provisioner_client` module from another module (of the client or outside it,
the event loop resuming a task included), and a re-entry when that module was entered before in
the same reconcile. Printed for each: the modules visited, the entries and re-entries by module,
and how many of the entries resumed a suspended coroutine (an `await` returning into the client
from the event loop or the wire layer) rather than called a function.
"""

from __future__ import annotations

import io
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import anyio

from mesh_dev.demo import NODE, seed_examples
from mesh_dev.loop import run_dev
from mesh_dev.standins import stand_ins
from provisioner.seat.settings import ServerSettings
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.contract import buckets
from registry.wire import Bus, BusOptions, bucket_config, connect, snapshot

PACKAGE = "provisioner_client"


@dataclass
class Trace:
    """The client's modules entered during one reconcile, each entry from another module counted."""

    entries: Counter[str] = field(default_factory=Counter)
    reentries: Counter[str] = field(default_factory=Counter)
    resumed: Counter[str] = field(default_factory=Counter)
    frames: dict[int, FrameType] = field(default_factory=dict)  # held, so that no id is reused meanwhile

    def called(self, frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        module = _module_of(frame)
        if module is None or not module.startswith(PACKAGE):
            return
        caller = _module_of(frame.f_back)
        if caller == module:
            return
        if module in self.entries:
            self.reentries[module] += 1
        self.entries[module] += 1
        if id(frame) in self.frames:
            self.resumed[module] += 1
        self.frames[id(frame)] = frame

    def lines(self, title: str) -> list[str]:
        total, again, resumed = sum(self.entries.values()), sum(self.reentries.values()), sum(self.resumed.values())
        lines = [
            f"{title}: {len(self.entries)} modules visited, {total} entries, {again} re-entries, "
            f"{resumed} of the entries resumptions"
        ]
        for module, count in self.entries.most_common():
            lines.append(
                f"  {module:<44} {count:>5} entries {self.reentries[module]:>5} re-entries "
                f"{self.resumed[module]:>5} resumptions"
            )
        return lines


def _module_of(frame: FrameType | None) -> str | None:
    return None if frame is None else frame.f_globals.get("__name__")


@contextmanager
def traced(trace: Trace) -> Iterator[None]:
    sys.setprofile(trace.called)
    try:
        yield
    finally:
        sys.setprofile(None)


async def _traced(call: Callable[[], Awaitable[object]]) -> Trace:
    trace = Trace()
    with traced(trace):
        await call()
    return trace


async def _registry_written(bus: Bus) -> None:
    while not (all([await bucket_config(bus, b) for b in buckets.OWN]) and await snapshot(bus, buckets.REGISTRY)):
        await anyio.sleep(0.05)


async def trace_reconciles(url: str, state: Path) -> tuple[Trace, Trace]:
    """One reconcile of the demo's examples traced, then one with nothing to do."""
    plan = ClientPlan(node=NODE, manifests=state / "manifests", materialize=state / "env")
    seed_examples(plan.manifests, state / "seeded")
    async with connect(BusOptions(servers=(url,), name="reconcile trace")) as bus:
        with anyio.fail_after(60):
            await _registry_written(bus)
        async with stand_ins(bus, NODE, fixed_bound=True):
            first = await _traced(lambda: reconcile(bus, plan))
            again = await _traced(lambda: reconcile(bus, plan))
    return first, again


async def run() -> tuple[Trace, Trace]:
    stop = anyio.Event()
    found: list[tuple[Trace, Trace]] = []
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder)

        async def client(url: str) -> None:
            try:
                found.append(await trace_reconciles(url, state / "demo"))
            finally:
                stop.set()

        await run_dev(state_dir=state, settings=ServerSettings(), stop=stop, participants=[client], out=io.StringIO())
    return found[0]


def main() -> None:
    first, again = anyio.run(run)
    print("\n".join([*first.lines("first reconcile"), "", *again.lines("nothing to do")]))


if __name__ == "__main__":
    main()
