"""Logging at the edge of both programs: key-value events, as readable lines or one JSON object each.

A log call keeps its %-style message and names what it is about through `extra`:

    log.info("registry compiled: %d kinds", count, extra=event(bucket=bucket_name, what="registry"))

renders as `... registry compiled: 13 kinds bucket=mesh-provisioner_registry what=registry` in text,
and as the fields `"bucket"` and `"what"` beside `"message"` in JSON, so a log pipeline can filter
by node or module without parsing prose. Only the names of `Event` are rendered: a field is a name
(node, module, key ...), never a value that may be a secret.

What a whole piece of work is about is said once, around it, rather than at every call:

    with log_context(request=new_log_id(), party=party.label):
        await answer(request)

adds `request=... party=...` to every line logged inside, and inside every task started from
there (a task copies the context it starts in), so the lines of one request or one reconcile join
on one id. A record's own fields win over the context's; nested contexts add to the outer one. The
fields are stamped on the record when it is made (a record factory, installed on first use), so a
handler that formats it later, elsewhere, still sees them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import sys
from collections.abc import Mapping
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Any, Literal, TextIO, TypedDict, Unpack

from registry.runtime.terminal import terminal_safe

LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

CONSOLE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# `module` and `name` are also attributes of every LogRecord (the Python module, the logger): the
# fields of `event()` travel under this one attribute instead, where no name can clash.
EVENT_ATTRIBUTE = "mesh_event"
CONTEXT_ATTRIBUTE = "mesh_context"  # the fields of `log_context` when the record was made


class Event(TypedDict, total=False):
    """The fields a log event may carry, rendered in this order."""

    node: str
    module: str
    kind: str
    name: str
    key: str
    bucket: str
    subject: str
    request: str
    party: str  # who asked: a party's label
    reconcile: str
    what: str
    code: str | int
    state: str
    signal: str
    path: str


EVENT_FIELDS: tuple[str, ...] = tuple(Event.__annotations__)


def event(**fields: Unpack[Event]) -> dict[str, Any]:
    """The `extra=` of a log call naming what the event is about; mypy refuses a name not in `Event`."""
    return {EVENT_ATTRIBUTE: {name: value for name, value in fields.items() if value is not None}}


_RECORD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's event fields in `EVENT_FIELDS` order: those of `event(...)`, and those passed
    straight as `extra={"node": ...}` where the name is not one of the record's own attributes,
    over those of the `log_context` it was made in."""
    given: dict[str, Any] = dict(getattr(record, CONTEXT_ATTRIBUTE, None) or {})
    given |= {
        name: value for name, value in vars(record).items() if name in EVENT_FIELDS and name not in _RECORD_ATTRIBUTES
    }
    given |= getattr(record, EVENT_ATTRIBUTE, None) or {}
    return {name: given[name] for name in EVENT_FIELDS if name in given}


_Fields = MappingProxyType[str, object]
_context_fields: ContextVar[_Fields] = ContextVar("mesh_log_context", default=MappingProxyType({}))
_factory_installed = False


def log_context(**fields: Unpack[Event]) -> contextlib.AbstractContextManager[None]:
    """Adds `fields` to every record made inside (and in the tasks started from inside), below the
    record's own fields; the context it was entered in is back on exit, even on an exception."""
    given: Mapping[str, object] = fields
    return _LogContext(given if None not in given.values() else {k: v for k, v in given.items() if v is not None})


def new_log_id() -> str:
    """A short random id (8 lowercase hex digits) naming one request or one reconcile in the logs.
    It names, it guards nothing: drawn without a system call (`secrets` made one per request, a
    quarter of the seat's handler time under what=registry load)."""
    return f"{random.getrandbits(32):08x}"


class _LogContext(contextlib.AbstractContextManager[None]):
    # A class, not @contextmanager: entered on every request, and a generator costs twice as much
    # (0.9 µs against 2.1 µs an enter and exit on the dev machine).
    __slots__ = ("_fields", "_token")

    def __init__(self, fields: Mapping[str, object]) -> None:
        self._fields = fields
        self._token: Token[_Fields] | None = None

    def __enter__(self) -> None:
        if not _factory_installed:
            _install_record_factory()
        outer = _context_fields.get()
        if outer:
            merged = outer.copy()  # the proxy's dict, copied at C speed (`{**outer}` goes key by key)
            merged.update(self._fields)
            self._token = _context_fields.set(MappingProxyType(merged))
        else:
            self._token = _context_fields.set(MappingProxyType(self._fields))

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._token is not None:
            _context_fields.reset(self._token)
            self._token = None


def _install_record_factory() -> None:
    """Wraps the record factory so that each record made inside a `log_context` carries its fields."""
    global _factory_installed  # noqa: PLW0603 -- installed once per process, on first use
    _factory_installed = True
    make_record = logging.getLogRecordFactory()

    def record_with_context(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        fields = _context_fields.get()
        if fields:
            setattr(record, CONTEXT_ATTRIBUTE, fields)
        return record

    logging.setLogRecordFactory(record_with_context)


class TextFormatter(logging.Formatter):
    """The console line, then `key=value` for each event field (quoted where it holds a space).
    The line is terminal-safe: a key, a host or a reason a node wrote shows its control and format
    characters as escapes (`registry.runtime.terminal`), never acts on the operator's terminal."""

    def __init__(self) -> None:
        super().__init__(CONSOLE_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        pairs = "".join(f" {name}={_text_value(value)}" for name, value in event_fields(record).items())
        return terminal_safe(super().formatMessage(record) + pairs)


def _text_value(value: object) -> str:
    text = str(value)
    needs_quotes = not text or any(c.isspace() or c in '"=' for c in text)
    return json.dumps(text, ensure_ascii=False) if needs_quotes else text


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the event fields, the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **event_fields(record),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(*, log_format: LogFormat = "text", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Sends every record to `stream` (stderr) in `log_format`; nats-py is held to warnings and above."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(max(root.level, logging.WARNING))
