"""`mesh-provisioner top`: the fleet at a glance, asked of the verb (`what=nodes`) every few seconds.

Each frame is a summary line (nodes healthy, stale, gone and over quota; modules applied and pending),
a line per module whose rollout is held (paused or aborted: `rollout.<module>` of the fleet bucket,
read by one batch get, `provisioner.commands.rollout_command`), over the nodes' table, those not
healthy first. The seat answers from the view it keeps of the leases and applied buckets, so a
refresh reads no bucket but the fleet's holds; an operator's account may ask the verb and read the
fleet, nothing else, so the frames refresh on a timer, not on the buckets' changes. On a terminal the frame is
redrawn in place (`rich.live`), with a progress bar while a paged answer is read; anywhere else
each frame is printed after the last, with the time it was taken. A seat that does not answer is
said in the frame, and asked again at the next tick; a connection closed for good (by nats-server)
ends it with the error (exit 1). `once` prints one frame and returns.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import anyio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.text import Text

from provisioner.commands import tables
from provisioner.commands.rollout_command import held_rollouts
from provisioner.settings import TopArguments
from registry.command_line import timestamp
from registry.contract import MergedAnswer
from registry.contract.fleet import Hold
from registry.errors import BusError, ServiceError
from registry.runtime import json_text, terminal_safe
from registry.wire import Bus, BusOptions, OnPage, answer_of, connect_within

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopOptions:
    interval: timedelta = timedelta(seconds=2)
    stale_after: timedelta | None = None
    node: str | None = None
    once: bool = False
    reply_wait: timedelta = timedelta(seconds=10)
    as_json: bool = False

    @classmethod
    def of(cls, arguments: TopArguments) -> TopOptions:
        """The options `mesh-provisioner top` was given; it waits as long for an answer as to connect."""
        return cls(
            interval=arguments.interval,
            stale_after=arguments.stale_after,
            node=arguments.node,
            once=arguments.once,
            reply_wait=arguments.wait,
            as_json=arguments.as_json,
        )

    def request(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"what": "nodes"}
        if self.node is not None:
            asked["node"] = self.node
        if self.stale_after is not None:
            asked["stale_after"] = self.stale_after.total_seconds()
        return asked


async def fleet(bus: Bus, options: TopOptions, on_page: OnPage) -> MergedAnswer:
    """The whole `what=nodes` answer, every page followed, `on_page` told after each."""
    return await answer_of(bus, options.request(), reply_wait=options.reply_wait, on_page=on_page)


HOLD_STYLES = {"paused": "yellow", "aborted": "red"}


def frame(
    answer: MergedAnswer | None,
    problem: str | None,
    console: Console,
    taken: datetime,
    held: Sequence[tuple[str, Hold]] = (),
) -> Group:
    """One frame: the time, the summary, the rollouts `held`, the nodes; the problem when the seat
    did not answer."""
    parts: list[RenderableType] = []
    when = timestamp(taken)
    if answer is not None:
        malformed = len(answer.malformed)
        summary = tables.fleet_summary(answer) + (f"; {malformed} malformed" if malformed else "")
        parts.append(Text(f"{when}  {summary}", style="bold" if console.is_terminal else ""))
    for module, hold in held:
        style = HOLD_STYLES.get(hold.state, "") if console.is_terminal else ""
        parts.append(Text(f"{when}  {terminal_safe(held_line(module, hold))}", style=style))
    if problem is not None:
        parts.append(Text(f"{when}  {terminal_safe(problem)}", style="red" if console.is_terminal else ""))
    if answer is not None:
        parts.append(tables.nodes_table(answer, console))
    return Group(*parts)


def held_line(module: str, hold: Hold) -> str:
    """`rollout of web paused by seat since 2026-01-01T12:00:00Z (node n1: change c1 failed: exit 3)`."""
    since = timestamp(hold.since)
    why = f"node {hold.node}: {hold.reason}" if hold.node else hold.reason
    return f"rollout of {module} {hold.state} by {hold.by} since {since}" + (f" ({why})" if why else "")


async def holds_or_none(bus: Bus) -> list[tuple[str, Hold]]:
    """The rollouts held; none when the fleet bucket cannot be read (said in the debug log)."""
    try:
        return await held_rollouts(bus)
    except BusError as err:
        log.debug("top: the fleet's holds not read: %s", err)
        return []


async def run_top(bus: Bus, options: TopOptions, out: TextIO, stop: anyio.Event) -> MergedAnswer | None:
    """Shows frames until `stop` is set (or one, with `options.once`); the last answer, if any."""
    if options.once and options.as_json:
        return await print_json_frame(bus, options, out)
    console = tables.console_for(out)
    screen = Screen(console)
    last: MergedAnswer | None = None
    with screen:
        while True:
            problem = None
            try:
                last = await fleet(bus, options, screen.on_page)
            except (BusError, ServiceError) as err:
                if options.once or bus.closed.is_set():  # closed for good: no tick would answer
                    raise
                problem = f"no answer from the seat: {err}; asking again in {options.interval.total_seconds():g} s"
            held = await holds_or_none(bus)
            screen.show(frame(last, problem, console, datetime.now(UTC), held))
            if options.once:
                return last
            with anyio.move_on_after(options.interval.total_seconds()):
                await stop.wait()
            if stop.is_set():
                return last


async def print_json_frame(bus: Bus, options: TopOptions, out: TextIO) -> MergedAnswer:
    """One frame as JSON: the answer as `query nodes --json` prints it, and the rollouts held."""
    answer = await fleet(bus, options, lambda read, pages: None)
    held = await holds_or_none(bus)
    document = {**answer.document(), "held": {module: hold.model_dump(mode="json") for module, hold in held}}
    print(json_text(document, indent=2, to_terminal=out.isatty()), file=out)
    return answer


async def watch_fleet(bus_options: BusOptions, options: TopOptions, stop: anyio.Event) -> MergedAnswer | None:
    """`run_top` on stdout, over a connection of its own; the last answer, None if none came."""
    async with connect_within(bus_options, options.reply_wait) as bus:
        return await run_top(bus, options, sys.stdout, stop)


class Screen:
    """Where frames go: redrawn in place on a terminal, printed one after another elsewhere."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = Live(console=console, auto_refresh=False, transient=False) if console.is_terminal else None
        self.progress = Progress(TextColumn("reading the fleet"), BarColumn(), MofNCompleteColumn(), console=console)
        self.task = self.progress.add_task("pages", total=None)
        self._shown: RenderableType = Text("asking the seat...")

    def __enter__(self) -> Screen:
        if self.live is not None:
            self.live.start()
            self.live.update(self._shown, refresh=True)
        return self

    def __exit__(self, *_: object) -> None:
        if self.live is not None:
            self.live.stop()

    def on_page(self, read: int, pages: int | None) -> None:
        if self.live is None or pages == 1:
            return
        self.progress.update(self.task, completed=read, total=pages)
        self.live.update(Group(self._shown, self.progress), refresh=True)

    def show(self, shown: RenderableType) -> None:
        self._shown = shown
        if self.live is not None:
            self.live.update(shown, refresh=True)
            return
        tables.print_plain(self.console, shown)
        self.console.file.write("\n")
        self.console.file.flush()
