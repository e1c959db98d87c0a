"""Placeholders `${<kind>:<name>}` in a module's values.

The kind is the text before the first `:`, the name the rest (it may hold further `:`).
A `$$` writes a literal `$`. Anything else that starts with `${` and does not read as a
placeholder is an error, never passed through as text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from registry.errors import PlaceholderError

_KIND = re.compile(r"^[a-z][a-z0-9_-]*$")
_TOKEN = re.compile(r"\$\$|\$\{([^}]*)\}|\$\{")


@dataclass(frozen=True, order=True)
class Placeholder:
    kind: str
    name: str

    def __str__(self) -> str:
        return f"${{{self.kind}:{self.name}}}"


def parse_placeholder(body: str) -> Placeholder:
    """The placeholder for the text between `${` and `}`."""
    kind, sep, name = body.partition(":")
    if not sep:
        raise PlaceholderError(f"${{{body}}}", "expected ${kind:name}, found no ':'")
    if not _KIND.fullmatch(kind):
        raise PlaceholderError(f"${{{body}}}", f"kind {kind!r} must be lower-case letters, digits, '-' or '_'")
    if not name:
        raise PlaceholderError(f"${{{body}}}", "the name is empty")
    return Placeholder(kind, name)


def find_placeholders(text: str) -> Iterator[Placeholder]:
    """Every placeholder in `text`, in order; raises on a malformed one."""
    for match in _TOKEN.finditer(text):
        if match.group(0) == "$$":
            continue
        if match.group(1) is None:
            raise PlaceholderError(text[match.start() : match.start() + 20], "'${' is never closed by '}'")
        yield parse_placeholder(match.group(1))


def substitute(text: str, value_of: Callable[[Placeholder], str]) -> str:
    """`text` with each placeholder replaced by `value_of(placeholder)` and `$$` by `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group(1) is None:
            raise PlaceholderError(text[match.start() : match.start() + 20], "'${' is never closed by '}'")
        return value_of(parse_placeholder(match.group(1)))

    return _TOKEN.sub(replace, text)
