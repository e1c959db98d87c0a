"""Log lines are key-value events: readable text with `key=value`, or JSON with the same fields."""

from __future__ import annotations

import io
import json
import logging

from registry.runtime import LogFormat, configure_logging, event

log = logging.getLogger("registry.test_logs")


def logged(log_format: LogFormat, message: str, *args: object, **extra: object) -> str:
    stream = io.StringIO()
    configure_logging(log_format=log_format, level="INFO", stream=stream)
    log.info(message, *args, extra=extra)
    return stream.getvalue().strip()


def test_text_puts_the_events_fields_after_the_message_in_a_fixed_order() -> None:
    line = logged("text", "module %s applied", "web", **event(module="web", node="n1", state="applied"))
    assert line.endswith("registry.test_logs: module web applied node=n1 module=web state=applied")


def test_text_quotes_a_value_with_spaces_or_equals_signs() -> None:
    line = logged("text", "changed", **event(key="a=b", module="my module"))
    assert line.endswith('changed module="my module" key="a=b"')


def test_text_shows_what_a_node_wrote_as_escapes_on_one_line() -> None:
    """A host or key a node wrote, holding a bidirectional override, ESC and a newline, cannot
    rewrite the operator's terminal nor forge a second log line."""
    line = logged("text", "lease of %s taken", "evil\u202e\x1b[2J\nFAKE", **event(node="n\u20661"))
    assert line.endswith("lease of evil\\u202e\\x1b[2J\\x0aFAKE taken node=n\\u20661")
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line


def test_json_carries_the_fields_beside_the_message() -> None:
    entry = json.loads(logged("json", "kind %s written", "config", **event(kind="config", code=3)))
    assert {k: entry[k] for k in ("level", "logger", "message", "kind", "code")} == {
        "level": "info",
        "logger": "registry.test_logs",
        "message": "kind config written",
        "kind": "config",
        "code": 3,
    }


def test_fields_passed_straight_as_extra_count_and_other_extras_are_left_out() -> None:
    entry = json.loads(logged("json", "asked", node="n1", password="hunter2"))
    assert entry["node"] == "n1"
    assert "password" not in entry and "hunter2" not in json.dumps(entry)
