"""Key shapes: every key of the project is built, parsed and narrowed here.

A shape is written as in the wire contract, tokens joined by `.`, each token a template of
`<field>`s and literal text, with optional trailing tokens in brackets:
`<node>.<module>.<provision>[.<local>]`. Each token's text is escaped with `=hex`
(`registry.contract.escaping`), so a field may hold any name, `.` and `:` included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache

from registry.contract.escaping import decode_token, encode_token
from registry.errors import KeyShapeError, TemplateError, TokenError

# nats-py's own key grammar; every key we build is checked against it.
NATS_KEY = re.compile(r"^[-/_=\.a-zA-Z0-9]+$")
# A key of plain tokens: nothing escaped, no empty token. Each token is its own name.
_PLAIN_KEY = re.compile(r"[-/_a-zA-Z0-9]+(?:\.[-/_a-zA-Z0-9]+)*")
_FIELD = re.compile(r"<([a-z][a-z0-9_-]*)>")
_SHAPE = re.compile(r"^(?P<required>[^\[\]]+)(?:\[\.(?P<optional>[^\[\]]+)\])?$")


@dataclass(frozen=True)
class _TokenTemplate:
    text: str

    @cached_property
    def fields(self) -> tuple[str, ...]:
        return tuple(_FIELD.findall(self.text))

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        parts = _FIELD.split(self.text)
        regex = ""
        for i, part in enumerate(parts):
            is_field = i % 2 == 1
            last_field = i == len(parts) - 2
            regex += f"(?P<{_group(part)}>.+{'' if last_field else '?'})" if is_field else re.escape(part)
        return re.compile(regex, re.DOTALL)

    def render(self, parts: Mapping[str, str]) -> str:
        if self._sole_field is not None:
            return parts[self._sole_field]
        return _FIELD.sub(lambda m: parts[m.group(1)], self.text)

    @cached_property
    def _sole_field(self) -> str | None:
        return self.fields[0] if len(self.fields) == 1 and self.text == f"<{self.fields[0]}>" else None

    def read(self, name: str) -> dict[str, str] | None:
        if self._sole_field is not None:  # the common token: the whole name is the field
            return {self._sole_field: name}
        match = self._pattern.fullmatch(name)
        if match is None:
            return None
        return {field: match.group(_group(field)) for field in self.fields}


def _group(field: str) -> str:
    return field.replace("-", "_")


class KeyShape:
    """One bucket's key shape: builds keys from parts and parses them back, with reasons."""

    def __init__(self, text: str) -> None:
        match = _SHAPE.fullmatch(text)
        if match is None:
            raise TemplateError(text, "expected tokens joined by '.', with optional trailing '[.<field>]'")
        self.text = text
        self.required = _tokens_of(text, match.group("required"))
        optional = match.group("optional")
        self.optional = _tokens_of(text, optional) if optional else ()
        fields = [f for token in self.tokens for f in token.fields]
        if len(fields) != len(set(fields)):
            raise TemplateError(text, "a field appears twice")

    @property
    def tokens(self) -> tuple[_TokenTemplate, ...]:
        return self.required + self.optional

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(f for token in self.tokens for f in token.fields)

    @property
    def required_fields(self) -> tuple[str, ...]:
        return tuple(f for token in self.required for f in token.fields)

    def __repr__(self) -> str:
        return f"KeyShape({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyShape) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def build(self, **parts: str) -> str:
        """The key for `parts`; the optional tail is included when all its fields are given."""
        missing = [f for f in self.required_fields if not parts.get(f)]
        if missing:
            raise KeyShapeError("", self.text, f"missing {', '.join(missing)}")
        tokens = list(self.required)
        if self.optional and all(parts.get(f) for t in self.optional for f in t.fields):
            tokens += self.optional
        key = ".".join(encode_token(token.render(parts)) for token in tokens)
        if not NATS_KEY.fullmatch(key):  # pragma: no cover - escaping guarantees it
            raise KeyShapeError(key, self.text, "not a valid NATS key")
        return key

    @cached_property
    def plain_fields(self) -> tuple[str, ...] | None:
        """The fields, when every token is one whole field: such a shape parses plain keys fast."""
        sole = [token._sole_field for token in self.tokens]
        return tuple(f for f in sole if f is not None) if all(sole) else None

    def plain_parts(self, key: str) -> tuple[tuple[str, ...], list[str]] | None:
        """The fields and tokens of `key` when each token is its field's name (a shape of whole-field
        tokens, a key of plain characters: no escape, no empty token), else None. The fast path
        of `parse`, and of a listing's encoding, which needs the names in order only."""
        fields = self.plain_fields
        if fields is None or not _PLAIN_KEY.fullmatch(key):
            return None
        tokens = key.split(".")
        if len(tokens) == len(fields):
            return fields, tokens
        if len(tokens) == len(self.required):
            return fields[: len(tokens)], tokens
        return None

    def parse(self, key: str) -> dict[str, str]:
        """The parts of `key`, or a `KeyShapeError` that says why it is out of shape."""
        plain = self.plain_parts(key)
        if plain is not None:
            return dict(zip(*plain, strict=True))
        tokens = key.split(".")
        if len(tokens) not in (len(self.required), len(self.tokens)):
            raise KeyShapeError(key, self.text, self._count_reason(len(tokens)))
        parts: dict[str, str] = {}
        for position, (token, template) in enumerate(zip(tokens, self.tokens, strict=False), start=1):
            parts.update(self._parse_token(key, position, token, template))
        return parts

    def _count_reason(self, count: int) -> str:
        expected = str(len(self.required))
        if self.optional:
            expected += f" or {len(self.tokens)}"
        return f"it has {count} token{'s' if count != 1 else ''}, the shape has {expected}"

    def _parse_token(self, key: str, position: int, token: str, template: _TokenTemplate) -> dict[str, str]:
        if not token:
            raise KeyShapeError(key, self.text, f"token {position} is empty")
        try:
            name = decode_token(token)
        except TokenError as err:
            raise KeyShapeError(key, self.text, f"token {position} {token!r}: {err.reason}") from None
        parts = template.read(name)
        if parts is None:
            raise KeyShapeError(key, self.text, f"token {position} {name!r} does not read as {template.text}")
        return parts

    def filters(self, **narrow: str | None) -> list[str]:
        """Subject filters (relative to the bucket) that keep every key under the narrowed fields.

        Keys out of shape are kept too when their narrowed tokens match: `node=n1` keeps `n1.bad`.
        """
        given = {f: v for f, v in narrow.items() if v is not None}
        unknown = set(given) - set(self.fields)
        if unknown:
            raise KeyShapeError("", self.text, f"cannot narrow by {', '.join(sorted(unknown))}")
        if not given:
            return [">"]
        prefix: list[str] = []
        for template in self.tokens:
            if not given:
                break
            prefix.append(self._filter_token(template, given))
        head = ".".join(prefix)
        return [head, f"{head}.>"]

    def _filter_token(self, template: _TokenTemplate, given: dict[str, str]) -> str:
        if template.fields == () or not any(f in given for f in template.fields):
            return "*" if template.fields else encode_token(template.text)
        if len(template.fields) != 1 or template.text != f"<{template.fields[0]}>":
            raise KeyShapeError("", self.text, f"cannot narrow by part of token {template.text}")
        return encode_token(given.pop(template.fields[0]))


def node_token(key: str) -> str:
    """The first token of a node-keyed key (`<node>.<...>`), as the key holds it (escaped)."""
    return key.partition(".")[0]


def under(*names: str) -> str:
    """The subject filter (relative to a bucket) of every key below the tokens of `names`:
    `under("n1")` is `n1.>`, `under("a.b")` is `a=2Eb.>`."""
    return ".".join([*(encode_token(name) for name in names), ">"])


def subject_matches(subject_filter: str, subject: str) -> bool:
    """Whether `subject` lies under `subject_filter`, as nats-server matches them: `*` is one
    token, `>` one or more at the end."""
    wanted, tokens = subject_filter.split("."), subject.split(".")
    for i, want in enumerate(wanted):
        if want == ">":
            return len(tokens) > i
        if i >= len(tokens) or want not in ("*", tokens[i]):
            return False
    return len(tokens) == len(wanted)


@lru_cache(maxsize=256)
def shape_of(text: str) -> KeyShape:
    """The shape written `text`, parsed once: registry answers name their shapes as text."""
    return KeyShape(text)


def _tokens_of(shape: str, text: str) -> tuple[_TokenTemplate, ...]:
    tokens = tuple(_TokenTemplate(t) for t in text.split("."))
    for token in tokens:
        if not token.text:
            raise TemplateError(shape, "an empty token")
        if "<" in _FIELD.sub("", token.text) or ">" in _FIELD.sub("", token.text):
            raise TemplateError(shape, f"token {token.text!r} has a field that is not <lower-case-name>")
    return tokens


REGISTRY = KeyShape("<kind>")
NEEDS = KeyShape("<node>.<module>.<kind>.<name>")
APPLIED = KeyShape("<node>.<module>")
COLLECT = KeyShape("<node>.<collection>.<contributor>")
BOUND = KeyShape("<node>.<module>.<provision>[.<local>]")
