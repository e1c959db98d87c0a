"""The verb's answer as rows and tables, for `mesh-provisioner query`.

An answer (`registry.contract.MergedAnswer`, every page joined) becomes one row per entry, with the columns
of its `what`, and one row per malformed key, marked so. `kind`, `name` and `state` are not
fields of the verb: `narrowed` keeps the entries that match them, after the verb's own narrowing
by node, module and collection, and keeps every malformed key (its parts cannot be read).
On a terminal the tables are boxed and coloured; anywhere else they are plain aligned columns
with a header line, never wrapped, for `grep` and `less`. Either way a cell shows what a node wrote
as text: every character a terminal would act on is escaped (`registry.runtime.terminal_safe`),
and no cell is read as rich markup. JSON to a terminal is ASCII, to a pipe or a file UTF-8 as written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO, TypedDict

from pydantic import JsonValue
from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from provisioner.settings import STATES
from registry.command_line import timestamp_of
from registry.contract import (
    AppliedRow,
    CollectRow,
    Entry,
    HeldLease,
    MalformedKey,
    MergedAnswer,
    NeedsRow,
    NodeRow,
    NoLease,
    RegistryRow,
    ReleasedLease,
    Row,
    Totals,
    entry_data,
    fleet,
)
from registry.runtime import json_text, terminal_safe

COLUMNS: Mapping[str, tuple[str, ...]] = {
    "registry": ("kind", "domain", "module", "via", "where"),
    "needs": ("node", "module", "kind", "name", "used in"),
    "applied": ("node", "module", "state", "digest", "reasons", "action"),
    "collect": ("node", "collection", "contributor", "items"),
    "nodes": ("node", "verdict", "lease", "applied", "pending", "changed", "why"),
}
VERDICTS = STATES["nodes"]
UNHEALTHY = ("stale", "gone", "over-quota")
VERDICT_STYLES = {"healthy": "green", "stale": "yellow", "gone": "red", "over-quota": "red"}

DIGEST_SHOWN = 12  # hex digits of a digest in the table, as `git log --oneline` shows a commit
REASON_SHOWN = 80  # characters of the first reason in the table; --json has them whole
SHORT_CELL = 10  # characters: a column whose cells are all this short is never wrapped on a terminal
PLAIN_WIDTH = 100_000  # wide enough that no plain row is ever wrapped


def narrowed(answer: MergedAnswer, **filters: str | None) -> MergedAnswer:
    """`answer` with only the entries whose `kind`, `name` or value's `state` equal the filters
    given (`None`: any), and `total` counting what is kept. No filter given: `answer` as it is."""
    given = {field: wanted for field, wanted in filters.items() if wanted is not None}
    if not given:
        return answer
    entries = [entry for entry in answer.entries if all(_filtered(entry, f) == w for f, w in given.items())]
    total = Totals(entries=len(entries), malformed=len(answer.malformed))
    return answer.model_copy(update={"entries": entries, "total": total})


def _filtered(entry: Entry, field: str) -> object:
    if isinstance(entry, NodeRow):
        return entry.verdict if field == "state" else None
    if field == "state":
        return _value(entry).get(field)
    return getattr(entry, field, None)


def rows(answer: MergedAnswer) -> list[tuple[str, ...]]:
    """One row per entry, in the columns of the answer's `what` (`COLUMNS`)."""
    return [_row(entry) for entry in answer.entries]


def _row(entry: Entry) -> tuple[str, ...]:
    match entry:
        case RegistryRow():
            return _registry_row(entry)
        case NeedsRow():
            return _needs_row(entry)
        case AppliedRow():
            return _applied_row(entry)
        case CollectRow():
            return _collect_row(entry)
        case NodeRow():
            return _nodes_row(entry)


def _registry_row(entry: RegistryRow) -> tuple[str, ...]:
    value = _value(entry)
    answer = _object(value.get("answer"))
    via, read = str(answer.get("via", "?")), answer.get("read", "value")
    where = answer.get("subject", "") if via == "verb" else f"{answer.get('bucket', '')} {answer.get('key', '')}"
    shown_via = via if via == "verb" or read == "value" else f"{via}, {read}"
    return entry.kind, _text(value.get("domain")), _text(value.get("module")), shown_via, str(where)


def _needs_row(entry: NeedsRow) -> tuple[str, ...]:
    used_in = _value(entry).get("used_in")
    shown = ", ".join(map(str, used_in)) if isinstance(used_in, list) else ""
    return entry.node, entry.module, entry.kind, entry.name, shown


def _applied_row(entry: AppliedRow) -> tuple[str, ...]:
    value = _value(entry)
    return entry.node, entry.module, _text(value.get("state")), _digest(value), _reasons(value), _action(value)


def _collect_row(entry: CollectRow) -> tuple[str, ...]:
    items = _value(entry).get("items")
    return entry.node, entry.collection, entry.contributor, str(len(items)) if isinstance(items, list) else ""


def _nodes_row(entry: NodeRow) -> tuple[str, ...]:
    return (
        entry.node,
        entry.verdict,
        _lease(entry.lease),
        str(entry.applied),
        str(entry.pending),
        _moment(entry.changed_at),
        entry.because,
    )


def _moment(text: str | None) -> str:
    """A time of the answer to the second, `2026-01-01T12:00:00Z`; as it is if it is not a time."""
    return "" if text is None else timestamp_of(text)


def _lease(lease: HeldLease | ReleasedLease | NoLease) -> str:
    """`held by <host> pid <pid>`, `released` or `none`."""
    if isinstance(lease, HeldLease) and lease.host is not None:
        return f"held by {lease.host} pid {lease.pid}"
    return lease.state


def _value(entry: Row) -> Mapping[str, JsonValue]:
    return _object(entry.value)


def _object(value: JsonValue) -> Mapping[str, JsonValue]:
    """`value` if it is a JSON object, else an empty one: a value is as a node wrote it."""
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _digest(value: Mapping[str, JsonValue]) -> str:
    digest = _text(value.get("digest"))
    return digest.rpartition(":")[2][:DIGEST_SHOWN]


def _reasons(value: Mapping[str, JsonValue]) -> str:
    reasons = value.get("reasons")
    if not isinstance(reasons, list) or not reasons:
        return ""
    first = str(reasons[0])
    return f"{len(reasons)}: {first if len(first) <= REASON_SHOWN else first[: REASON_SHOWN - 1] + '…'}"


def _action(value: Mapping[str, JsonValue]) -> str:
    action = _object(value.get("action"))
    if not action:
        return ""
    exit_code = action.get("exit_code")
    return _text(action.get("outcome")) + ("" if exit_code in (None, 0) else f" (exit {exit_code})")


@dataclass(frozen=True)
class Output:
    """How `query` prints: a table (the default), JSON (`--json`, `--compact` on one line) or JSON
    lines (`--jsonl`)."""

    as_json: bool = False
    as_jsonl: bool = False
    compact: bool = False

    def dumps(self, document: object, *, to_terminal: bool = False) -> str:
        return json_text(document, indent=None if self.compact else 2, to_terminal=to_terminal)


def print_query_answer(answer: MergedAnswer, output: Output, out: TextIO) -> None:
    """The merged answer as `output` says."""
    to_terminal = out.isatty()
    if output.as_jsonl:
        out.writelines(f"{line}\n" for line in json_lines(answer, to_terminal=to_terminal))
    elif output.as_json:
        print(output.dumps(answer.document(), to_terminal=to_terminal), file=out)
    else:
        print_answer(answer, console_for(out))


def print_reasons(answer: MergedAnswer, output: Output, out: TextIO) -> None:
    """Each reason a module is pending, with its modules (`--by-reason`), as `output` says."""
    to_terminal = out.isatty()
    if output.as_jsonl:
        out.writelines(f"{line}\n" for line in reason_lines(answer, to_terminal=to_terminal))
    elif output.as_json:
        grouped = {"reasons": by_reason(answer), "malformed": [bad.model_dump() for bad in answer.malformed]}
        print(output.dumps(grouped, to_terminal=to_terminal), file=out)
    else:
        print_by_reason(answer, console_for(out))


def json_lines(answer: MergedAnswer, *, to_terminal: bool = False) -> Iterator[str]:
    """One JSON object per entry, as the answer has it, then one per malformed key, marked
    `"malformed": true`."""
    return _lines((entry_data(entry) for entry in answer.entries), answer.malformed, to_terminal)


def reason_lines(answer: MergedAnswer, *, to_terminal: bool = False) -> Iterator[str]:
    """One JSON object per reason (`by_reason`), then one per malformed key, marked so."""
    return _lines(by_reason(answer), answer.malformed, to_terminal)


def _lines(
    documents: Iterable[Mapping[str, object]], malformed: Iterable[MalformedKey], to_terminal: bool
) -> Iterator[str]:
    for document in documents:
        yield json_text(document, to_terminal=to_terminal)
    for bad in malformed:
        yield json_text({**bad.model_dump(), "malformed": True}, to_terminal=to_terminal)


def console_for(out: TextIO) -> Console:
    """A console writing to `out`: a terminal's own, or a plain one that never wraps."""
    if out.isatty():
        return Console(file=out, force_terminal=True, highlight=False)
    return Console(file=out, force_terminal=False, width=PLAIN_WIDTH, highlight=False, emoji=False)


class Giver(TypedDict):
    node: str
    module: str


class ReasonGroup(TypedDict):
    """A reason the applied entries give: how many modules give it, and which."""

    reason: str
    count: int
    modules: list[Giver]


def by_reason(answer: MergedAnswer) -> list[ReasonGroup]:
    """Each reason the applied entries give, with the modules giving it (`{"node", "module"}`, in
    key order) and how many: most modules first, then by reason. A rollout's reasons are grouped by
    their class (`rollout: waiting for a slot`, whatever each node says after it: its place in the
    queue), `registry.contract.fleet.reason_group`."""
    modules: dict[str, list[Giver]] = {}
    for entry in answer.entries:
        if not isinstance(entry, AppliedRow):
            continue
        reasons = _value(entry).get("reasons")
        for reason in dict.fromkeys(map(fleet.reason_group, map(str, reasons))) if isinstance(reasons, list) else ():
            modules.setdefault(reason, []).append({"node": entry.node, "module": entry.module})
    ordered = sorted(modules.items(), key=lambda item: (-len(item[1]), item[0]))
    return [{"reason": reason, "count": len(which), "modules": which} for reason, which in ordered]


def print_answer(answer: MergedAnswer, console: Console) -> None:
    """The entries' table, the malformed keys' table (when there are any) and a count line."""
    header = [column.upper() for column in COLUMNS[answer.what]]
    if answer.what == "nodes":
        body = [_verdict_styled(row) for row in rows(answer)]
        _print_listing(console, header, body, answer.malformed, fleet_summary(answer))
        return
    _print_listing(console, header, rows(answer), answer.malformed, _count(len(answer.entries), "entry", "entries"))


def node_rows(answer: MergedAnswer) -> list[NodeRow]:
    """The entries of a `nodes` answer."""
    return [entry for entry in answer.entries if isinstance(entry, NodeRow)]


def unhealthy(answer: MergedAnswer) -> list[str]:
    """The nodes of a `nodes` answer that are stale, gone or over quota."""
    return [entry.node for entry in node_rows(answer) if entry.verdict in UNHEALTHY]


def fleet_summary(answer: MergedAnswer) -> str:
    """`3 nodes: 1 healthy, 1 stale, 1 gone; modules: 4 applied, 1 pending` (and `, 1 over-quota`
    after `gone` when a node is)."""
    entries = node_rows(answer)
    counts = {verdict: sum(e.verdict == verdict for e in entries) for verdict in VERDICTS}
    verdicts = ", ".join(f"{n} {v}" for v, n in counts.items() if n or v != "over-quota")
    applied, pending = sum(e.applied for e in entries), sum(e.pending for e in entries)
    return f"{_count(len(entries), 'node', 'nodes')}: {verdicts}; modules: {applied} applied, {pending} pending"


def print_by_reason(answer: MergedAnswer, console: Console) -> None:
    """`by_reason` as a table (reason, how many modules, which), then the malformed keys."""
    groups = by_reason(answer)
    body = [
        (g["reason"], str(g["count"]), ", ".join(f"{m['node']}/{m['module']}" for m in g["modules"])) for g in groups
    ]
    giving = len({(e["node"], e["module"]) for g in groups for e in g["modules"]})
    count = f"{_count(len(groups), 'reason', 'reasons')}, given by {_count(giving, 'module', 'modules')}"
    _print_listing(console, ["REASON", "MODULES", "WHICH"], body, answer.malformed, count)


def print_listing(console: Console, header: Sequence[str], body: Sequence[Sequence[str | Text]], count: str) -> None:
    """A table of `body` under `header`, then the `count` line: as `query` prints its tables."""
    _print_listing(console, header, body, (), count)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _print_listing(
    console: Console,
    header: Sequence[str],
    body: Sequence[Sequence[str | Text]],
    malformed: Sequence[MalformedKey],
    count: str,
) -> None:
    print_plain(console, _table(header, body, console))
    if malformed:
        console.print()
        bad_rows = [("malformed", _bad_key(bad), bad.reason) for bad in malformed]
        print_plain(console, _table(["", "MALFORMED KEY", "REASON"], bad_rows, console, style="red"))
    console.print()
    console.print(Text(count + (f", {len(malformed)} malformed" if malformed else "")))


def _bad_key(bad: MalformedKey) -> str:
    """The key, after its bucket where an answer reads several (`nodes`)."""
    return f"{bad.bucket} {bad.key}" if bad.bucket is not None else bad.key


def _table(header: Sequence[str], body: Sequence[Sequence[str | Text]], console: Console, style: str = "") -> Table:
    terminal = console.is_terminal
    cells = [[_cell(cell) for cell in row] for row in body]
    table = Table(box=box.SIMPLE_HEAD if terminal else None, pad_edge=terminal, show_edge=terminal)
    for column, title in enumerate(header):
        short = max((row[column].cell_len for row in cells), default=0) <= SHORT_CELL  # counts, verdicts: never wrapped
        table.add_column(
            Text(title),
            header_style="bold" if terminal else "",
            style=style if terminal else "",
            no_wrap=short,
            min_width=len(title) if short else None,
        )
    for row in cells:
        table.add_row(*row)
    return table


def _cell(cell: str | Text) -> Text:
    """A text cell as rich text, never read as markup, with what a terminal acts on escaped: cells
    show what nodes wrote (a key, a lease's host, a reason). A `Text` is a cell already made."""
    return Text(terminal_safe(cell)) if isinstance(cell, str) else cell


def _verdict_styled(row: Sequence[str]) -> list[str | Text]:
    """A nodes row with its verdict coloured (on a terminal; plain output drops the style)."""
    return [row[0], Text(terminal_safe(row[1]), style=VERDICT_STYLES.get(row[1], "")), *row[2:]]


def nodes_table(answer: MergedAnswer, console: Console) -> Table:
    """The nodes of an answer as a table: over quota, gone and stale first, then by name (for `top`)."""
    order = {verdict: rank for rank, verdict in enumerate(("over-quota", "gone", "stale", "healthy"))}
    ordered = sorted(node_rows(answer), key=lambda e: (order.get(e.verdict, -1), e.node))
    header = [column.upper() for column in COLUMNS["nodes"]]
    return _table(header, [_verdict_styled(_nodes_row(entry)) for entry in ordered], console)


def print_plain(console: Console, shown: RenderableType) -> None:
    """`shown` printed; anywhere but a terminal without the padding rich leaves at line ends."""
    if console.is_terminal:
        console.print(shown)
        return
    with console.capture() as captured:
        console.print(shown)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
