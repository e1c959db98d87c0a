"""The one TOML reader of both programs, bounded in size and depth: the settings file, the domains
file, the mesh file.

`tomllib` parses arrays and inline tables by recursion (5,000 `[` ended `grants` with a
`RecursionError` traceback) and builds a dotted key's tables in time that grows with the square of
its parts (a key of 100,000 parts took over a minute). `read_toml` refuses, before parsing, a text
whose arrays, inline tables and dotted keys nest deeper than `max_depth` (counted outside strings
and comments), and after parsing a document deeper than that (tables and keys together); it
raises `TomlRefused`, whose reason follows the file's name and never quotes the text.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from registry.contract.bounded_file import read_bounded_text

MAX_DEPTH = 32


@cache  # compiled at the first TOML read: a program that reads none never pays for it
def _tokens() -> re.Pattern[str]:
    """What the depth count looks at: strings and comments whole (so nothing in them counts), and
    the marks that open, close or lengthen a nesting."""
    return re.compile(
        r'"""(?:[^"\\]|\\[\s\S]|"(?!""))*"""(?:"{1,2})?'
        r"|'''(?:[^']|'(?!''))*'''(?:'{1,2})?"
        r'|"(?:[^"\\\n]|\\.)*"'
        r"|'[^'\n]*'"
        r"|#[^\n]*"
        r"|[\[\]{}.=,\n]"
    )


_OPEN, _CLOSE, _RESET = "[{", "]}", "=,\n"


class TomlRefused(ValueError):
    """A TOML text that is too deep or not TOML; `reason` reads after the file's name."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def read_toml(path: Path, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The TOML file at `path`, read no further than `max_bytes` (an `OSError` saying why it cannot
    be read, as `read_bounded` raises), at most `max_depth` levels deep (`TomlRefused`)."""
    return parse_toml(read_bounded_text(path, max_bytes), max_depth=max_depth)


def parse_toml(text: str, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    import tomllib  # noqa: PLC0415 (loaded by a program that reads a TOML file, when it does)

    if _marked_depth(text, max_depth) > max_depth:
        raise TomlRefused(f"nests deeper than the {max_depth} levels allowed (arrays, inline tables, dotted keys)")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:  # its message names line and column, not the text
        raise TomlRefused(f"is not valid TOML: {err}") from None
    except RecursionError:  # unreachable after the count above; kept so no input can crash a caller
        raise TomlRefused(f"nests deeper than the {max_depth} levels allowed") from None
    if _depth(document, max_depth) > max_depth:
        raise TomlRefused(f"nests deeper than the {max_depth} levels allowed (tables and keys)")
    return document


def _marked_depth(text: str, stop_past: int) -> int:
    """How deep the brackets and dotted keys outside strings and comments go, at most `stop_past` + 1."""
    brackets = dots = deepest = 0
    for match in _tokens().finditer(text):
        mark = match.group()
        if mark in _OPEN:
            brackets, dots = brackets + 1, 0
        elif mark in _CLOSE:
            brackets, dots = brackets - 1, 0
        elif mark == ".":
            dots += 1
        elif mark in _RESET:
            dots = 0
        deepest = max(deepest, brackets + dots)
        if deepest > stop_past:
            break
    return deepest


def _depth(document: object, stop_past: int) -> int:
    """How deep tables and arrays nest in a parsed document, at most `stop_past` + 1."""
    deepest = 0
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending and deepest <= stop_past:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
