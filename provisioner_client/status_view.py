"""How a node's status reads: coloured marks on a terminal, plain and never wrapped anywhere else,
laid out as `systemctl status` lays out its own; what another party wrote (a hold's reason, a
record's key) shows its control and format characters as escapes (`registry.runtime.terminal_safe`).
The one module of the node client that needs rich: the status command imports it when it prints,
so a reconciling or watching client never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.text import Text

from provisioner_client.resolving.own import LEASE
from provisioner_client.status import Mark, ModuleStatus, NodeStatus
from registry.command_line import timestamp_of
from registry.contract import ActionRecord, buckets
from registry.runtime import terminal_safe

_MARKS: dict[Mark, tuple[str, str]] = {"ok": ("●", "green"), "pending": ("○", "yellow"), "bad": ("×", "red")}
_LABEL = 12  # labels are right-aligned in this width, as systemctl aligns its own
_PLAIN_WIDTH = 100_000  # plain output is never wrapped


def status_lines(status: NodeStatus) -> list[Text]:
    """The status as `systemctl status` lays its own out: a marked header, labelled facts, then
    each module and each unreadable record."""
    lines = [*_header(status), *_labelled("Client", status.client.describe(status.node))]
    lines.extend(_labelled("Settings", str(status.settings_file) if status.settings_file else "none (no file read)"))
    if status.materialize is not None:
        lines.extend(_labelled("Env files", str(status.materialize)))
    lines.extend(_refused_lines(status))
    lines.extend(_waiting_lines(status))
    for name, module in sorted(status.modules.items()):
        lines.append(Text())
        lines.extend(_module_lines(name, module))
    for key, reason in sorted(status.unreadable.items()):
        lines.extend([Text(), _marked("bad", f"{key}: unreadable: {reason}")])
    return lines


def status_text(status: NodeStatus) -> str:
    """`status_lines` without marks' colours: what a pipe gets."""
    return "\n".join(line.plain for line in status_lines(status))


def _header(status: NodeStatus) -> list[Text]:
    if status.unrecorded:
        said = f"the last reconcile could not record what it did: {buckets.APPLIED.name} refused the writes"
        older = f"; {buckets.APPLIED.name} holds older records ({status.counts()})" if status.modules else ""
        return [_marked("bad", f"node {status.node}: {said}{older}")]
    if not status.modules and not status.unreadable and status.refused is None and status.waiting is None:
        said = f"no modules recorded in {buckets.APPLIED.name} (has it reconciled? is the node name right?)"
        return [_marked("pending", f"node {status.node}: {said}")]
    return [_marked(status.mark, f"node {status.node}: {status.counts()}")]


def _refused_lines(status: NodeStatus) -> list[Text]:
    if status.refused_unknown is not None:
        return _labelled("Refused", f"unknown: {status.refused_unknown}; run status as the client's user")
    if status.refused is None:
        return []
    said = [f"{bucket} refused the writes: {why}" for bucket, why in sorted(status.refused.buckets.items())]
    return _labelled(
        "Refused", *said, f"(at the last reconcile, {status.refused.at}; the next one not refused clears this)"
    )


def _waiting_lines(status: NodeStatus) -> list[Text]:
    """What waits for the hub, since when and how the client knows; which records are not yet there."""
    if status.waiting_unknown is not None:
        return _labelled("Stale", f"unknown: {status.waiting_unknown}; run status as the client's user")
    said = []
    if status.waiting is not None:
        for name, part in sorted(status.waiting.parts.items()):
            what = "the lease" if name == LEASE else name
            keys = f"; not yet written there: {', '.join(part.keys)}" if part.keys else ""
            said.append(
                f"writes of {what} to the hub waiting since {timestamp_of(part.since)} (link down: {part.how}){keys}"
            )
    if status.read_at_site is not None:
        said.append(f"applied records read at the site: {status.read_at_site}")
    if not said:
        return []
    return _labelled("Stale", *said, "(what the hub holds of this node; the env files are as the site's data has them)")


def _module_lines(name: str, status: ModuleStatus) -> list[Text]:
    applied = status.applied
    since = f" since {timestamp_of(status.since)}" if status.since else ""
    lines = [_marked(status.mark, f"{name}: {applied.state}{since}")]
    lines.extend(_labelled("File", _file_line(status)))
    if applied.action is not None:
        lines.extend(_labelled("Action", _action_line(applied.action)))
    lines.extend(_labelled("Reason", *applied.reasons))
    return lines


def _file_line(status: ModuleStatus) -> str:
    state, recorded = status.file_state, status.applied.file
    if state == "none":
        return "none written yet"
    elsewhere = recorded is not None and status.expected_path is not None and Path(recorded) != status.expected_path
    if state == "missing" and elsewhere:
        return f"{recorded} (not in the env folder used, {status.expected_path}; wrong --materialize?)"
    if state == "unknown":
        return f"{recorded} (unknown: {status.unjudged}; run status as the client's user)"
    said = {
        "in place": "in place",
        "drifted": "drifted: not what was applied; put back by watch mode or the next reconcile",
        "missing": "missing: put back by watch mode or the next reconcile",
    }
    return f"{recorded} ({said[state]})"


def _action_line(action: ActionRecord) -> str:
    exit_code = f", exit code {action.exit_code}" if action.exit_code is not None else ""
    return f"{' '.join(action.command)}: {action.outcome}{exit_code}, finished {timestamp_of(action.finished_at)}"


def _marked(mark: Mark, text: str) -> Text:
    symbol, style = _MARKS[mark]
    return Text.assemble((symbol, style), " ", terminal_safe(text))


def _labelled(label: str, *values: str) -> list[Text]:
    """`label:` right-aligned, then the first value; the others aligned under it."""
    heads = [f"{label}:".rjust(_LABEL)] + [" " * _LABEL] * (len(values) - 1)
    return [Text(f"{head} {terminal_safe(value)}") for head, value in zip(heads, values, strict=False)]


def print_status(status: NodeStatus, out: TextIO) -> None:
    """Coloured marks on a terminal; plain, never wrapped, anywhere else."""
    console = (
        Console(file=out, force_terminal=True, highlight=False, emoji=False)
        if out.isatty()
        else Console(file=out, force_terminal=False, width=_PLAIN_WIDTH, highlight=False, emoji=False)
    )
    for line in status_lines(status):
        console.print(line, soft_wrap=True)
