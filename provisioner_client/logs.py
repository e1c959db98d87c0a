"""Logging at the edge: readable lines on a terminal, one JSON object per line with `json`."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["error"] = self.formatException(record.exc_info)
        return json.dumps(document, ensure_ascii=False)


def configure_logging(level: str, style: Literal["text", "json"]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if style == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("nats").setLevel(max(logging.WARNING, root.level))
