"""Templates of the catalogue: how a placeholder's name splits into parts, and text built from parts.

A name pattern is fields joined by `:`, the last optionally in brackets:
`<provider>:<provision>[:<local>]`. The last field takes the rest of the name, `:` included.
A text template is literal text with `<field>`s: `<provider>_bound`, `<kind>:<name>`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from registry.errors import TemplateError

_FIELD = re.compile(r"<([a-z][a-z0-9_-]*)>")
_NAME_PATTERN = re.compile(
    r"^(?P<required><[a-z][a-z0-9_-]*>(?::<[a-z][a-z0-9_-]*>)*)(?:\[:(?P<optional><[a-z][a-z0-9_-]*>)\])?$"
)


def fields_of(template: str) -> tuple[str, ...]:
    return tuple(_FIELD.findall(template))


def render(template: str, parts: Mapping[str, str]) -> str:
    """`template` with every `<field>` replaced by its part; a missing part is an error."""
    missing = [f for f in fields_of(template) if f not in parts]
    if missing:
        raise TemplateError(template, f"no value for {', '.join(missing)}")
    return _FIELD.sub(lambda m: parts[m.group(1)], template)


class NamePattern:
    """Splits a placeholder's name into named parts."""

    def __init__(self, text: str) -> None:
        match = _NAME_PATTERN.fullmatch(text)
        if match is None:
            raise TemplateError(text, "expected <field>s joined by ':', the last optionally as [:<field>]")
        self.text = text
        self.required = fields_of(match.group("required"))
        self.optional = fields_of(match.group("optional") or "")

    @property
    def fields(self) -> tuple[str, ...]:
        return self.required + self.optional

    def split(self, name: str) -> dict[str, str]:
        """The parts of `name`; raises `TemplateError` when it has too few."""
        pieces = name.split(":", len(self.fields) - 1)
        if len(pieces) < len(self.required) or any(not p for p in pieces):
            raise TemplateError(self.text, f"name {name!r} does not read as {self.text}")
        return dict(zip(self.fields, pieces, strict=False))


@lru_cache(maxsize=256)
def pattern_of(text: str) -> NamePattern:
    """The name pattern written `text`, parsed once."""
    return NamePattern(text)
