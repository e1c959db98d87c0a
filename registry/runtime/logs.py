"""Logging at the edge of both programs: key-value events, as readable lines or one JSON object each.

A log call keeps its %-style message and names what it is about through `extra`:

    log.info("registry compiled: %d kinds", count, extra=event(bucket=bucket_name, what="registry"))

renders as `... registry compiled: 13 kinds bucket=mesh-provisioner_registry what=registry` in text,
and as the fields `"bucket"` and `"what"` beside `"message"` in JSON, so a log pipeline can filter
by node or module without parsing prose. Only the names of `Event` are rendered: a field is a name
(node, module, key ...), never a value that may be a secret.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO, TypedDict, Unpack

from registry.runtime.terminal import terminal_safe

LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

CONSOLE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# `module` and `name` are also attributes of every LogRecord (the Python module, the logger): the
# fields of `event()` travel under this one attribute instead, where no name can clash.
EVENT_ATTRIBUTE = "mesh_event"


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
    straight as `extra={"node": ...}` where the name is not one of the record's own attributes."""
    given: dict[str, Any] = {
        name: value for name, value in vars(record).items() if name in EVENT_FIELDS and name not in _RECORD_ATTRIBUTES
    }
    given |= getattr(record, EVENT_ATTRIBUTE, None) or {}
    return {name: given[name] for name in EVENT_FIELDS if name in given}


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
