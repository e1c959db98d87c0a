"""A listing's entries and malformed keys as JSON, split into pages.

Each entry is its key, the parts its bucket's shape names, its revision (the entry's stream
sequence: what a conditional write of that key compares against), and the stored JSON value
spliced in as it is; a key out of shape, a value that is not strict JSON (or nested deeper than
the contract's `MAX_VALUE_DEPTH` levels), or an entry larger than a page is a malformed key with
the reason instead (see docs/verb.md). A value larger than a page is not even parsed.
A collect entry of a node the seat marked gone (`provisioner.seat.gone_marks`) ends in
`"forgotten":true`: every other node's collections leave it out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from typing import Any

from provisioner.verb.pages import CursorOf, Encoded, build_pages
from provisioner.verb.request import LISTABLE
from registry.contract import MAX_VALUE_DEPTH, JsonRefused, node_token, read_json
from registry.errors import KeyShapeError
from registry.wire import KvItem

# Plain tokens: their decoded parts are substrings of the key, so neither needs JSON escaping.
_JSON_SAFE_KEY = re.compile(r"[-/_.a-zA-Z0-9]+")
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


# What ends an entry of a contribution collections forget, in place of its closing brace.
FORGOTTEN_END = b',"forgotten":true}'


def paginate_listing(
    what: str,
    items: list[KvItem],
    *,
    budget: int,
    cursor_of: CursorOf,
    forgotten: frozenset[str] = frozenset(),
    share: int | None = None,
) -> list[bytes]:
    """The pages of a listing sorted by key (consumes `items`); `forgotten`: the node tokens whose
    collect entries are marked forgotten; `share`: each node's bytes of entries (`Encoder`)."""
    encoded = encode_listing(what, items, max_item_bytes=budget, forgotten=forgotten, share=share)
    return build_pages(what, encoded, budget=budget, cursor_of=cursor_of)


def encode_listing(
    what: str,
    items: list[KvItem],
    *,
    max_item_bytes: int,
    forgotten: frozenset[str] = frozenset(),
    share: int | None = None,
) -> Encoded:
    """Each item as the JSON of an entry or of a malformed key, sorted by key. Consumes `items` to
    keep memory low."""
    items.sort(key=lambda item: item.key, reverse=True)
    encoder = Encoder(what, max_item_bytes=max_item_bytes, forgotten=forgotten, share=share)
    for item in _popped(items):
        encoder.add(item.key, item.value, item.revision)
    encoder.finish()
    return encoder.encoded


def _popped(items: list[KvItem]) -> Iterator[KvItem]:
    while items:
        yield items.pop()


def encode_items(
    what: str, items: Iterable[KvItem], *, max_item_bytes: int, forgotten: frozenset[str] = frozenset()
) -> Encoded:
    """Each item as the JSON of an entry or of a malformed key, in the order given."""
    encoder = Encoder(what, max_item_bytes=max_item_bytes, forgotten=forgotten)
    for item in items:
        encoder.add(item.key, item.value, item.revision)
    return encoder.encoded


KNOWN_VALUES = 4096  # distinct values an encoder remembers as strict JSON


class Encoder:
    """Items encoded one at a time into `encoded`, as they come.

    A value it has found to be strict JSON is remembered (up to `KNOWN_VALUES` distinct ones) and
    not parsed again: in a mesh the same module's needs repeat the same values on every node, and
    parsing was a fifth of a whole listing's time in the seat."""

    def __init__(
        self, what: str, *, max_item_bytes: int, forgotten: frozenset[str] = frozenset(), share: int | None = None
    ) -> None:
        """`forgotten`: the node tokens whose entries are marked forgotten (collect's alone);
        `share`: the bytes of entries each node's keys may take, those past it left out and said
        once per node by `finish` (a shared collection's listing, `registry.contract.SHARE_BYTES`)."""
        self.shape = LISTABLE[what].bucket.shape
        self.max_item_bytes = max_item_bytes
        self.forgotten = forgotten if what == "collect" else frozenset()
        self.share = share
        self._spent: dict[str, int] = {}
        self._past: dict[str, tuple[str, int, int]] = {}  # node token: first key left out, keys, bytes
        self.encoded = Encoded([], [])
        self._known: set[bytes] = set()
        fields = self.shape.plain_fields
        self._formats = {len(fields): _head_format(fields)} if fields is not None else {}

    def add(self, key: str, value: bytes, revision: int) -> int:
        """Encodes a key's entry, or the key as malformed; its bytes in a page (with a separator)."""
        plain = self.shape.plain_parts(key)
        if plain is not None:  # a plain key and its names need no JSON escaping
            fields, tokens = plain
            head = ((self._formats.get(len(fields)) or _head_format(fields)) % (key, *tokens, revision)).encode()
        else:
            try:
                parts = self.shape.parse(key)
            except KeyShapeError as err:
                return self._malformed(key, err.reason)
            head = _head(key, parts, revision)
        if value not in self._known:
            problem = _too_large("value", len(value), self.max_item_bytes) or json_problem(value)
            if problem is not None:
                return self._malformed(key, problem)
            if len(self._known) >= KNOWN_VALUES:
                self._known.clear()
            self._known.add(value)
        forgotten = self.forgotten and node_token(key) in self.forgotten
        piece = head + value.strip() + (FORGOTTEN_END if forgotten else b"}")
        if len(piece) > self.max_item_bytes:
            return self._malformed(key, _too_large("entry", len(piece), self.max_item_bytes) or "")
        if self.share is not None and not self._within_share(key, len(piece)):
            return 0
        self.encoded.entries.append(piece)
        return len(piece) + 1

    def _within_share(self, key: str, size: int) -> bool:
        """Whether `key`'s entry fits its node's share; else it is counted as left out."""
        node = node_token(key)
        spent = self._spent.get(node, 0)
        if spent + size <= (self.share or 0):  # in the listing's order: a later, smaller one may fit
            self._spent[node] = spent + size
            return True
        first, keys, size_past = self._past.get(node, (key, 0, 0))
        self._past[node] = (min(first, key), keys + 1, size_past + size)
        return False

    def finish(self) -> int:
        """Says, as one malformed key per node, what of its entries was left out past its share;
        the bytes added to a page."""
        added = 0
        for node, (first, keys, size) in sorted(self._past.items()):
            reason = (
                f"left out with {keys - 1} more of node {node}'s contributions ({size} bytes): past a node's "
                f"share of a shared collection, {self.share} bytes of this listing"
            )
            added += self._malformed(first, reason)
        self._past.clear()
        return added

    def _malformed(self, key: str, reason: str) -> int:
        piece = malformed(key, reason)
        self.encoded.malformed.append(piece)
        return len(piece) + 1


def _too_large(what: str, size: int, max_item_bytes: int) -> str | None:
    if size <= max_item_bytes:
        return None
    return f"the {what} is {size} bytes, more than one answer message carries ({max_item_bytes})"


def json_problem(value: bytes) -> str | None:
    """Why `value` is not strict JSON (nested at most `MAX_VALUE_DEPTH` levels), or None when it is."""
    try:
        read_json(value, max_bytes=len(value), max_depth=MAX_VALUE_DEPTH)
    except JsonRefused as err:
        return f"the value {err.reason.removeprefix('it ')}"
    return None


def _head(key: str, parts: Mapping[str, str], revision: int) -> bytes:
    """An entry's JSON up to its value: `{"key":...,<parts>,"revision":N,"value":`."""
    if _JSON_SAFE_KEY.fullmatch(key):  # the key and its parts need no JSON escaping: skip the encoder
        return (_head_format(tuple(parts)) % (key, *parts.values(), revision)).encode()
    return _dumps({"key": key, **parts, "revision": revision})[:-1] + b',"value":'


@cache
def _head_format(fields: tuple[str, ...]) -> str:
    """`{"key":"%s","<field>":"%s",...,"revision":%d,"value":` for a shape's fields (plain names)."""
    return '{"key":"%s"' + "".join(f',"{field}":"%s"' for field in fields) + ',"revision":%d,"value":'


def malformed(key: str, reason: str) -> bytes:
    return _dumps({"key": key, "reason": reason})


def _dumps(document: Mapping[str, Any]) -> bytes:
    return _COMPACT_JSON.encode(document).encode("utf-8")
