"""A page of the verb's answer: its shape, the bytes of items it may carry, and its cursor.

The page's shape, `total` and the cursor's rules are the verb's contract (docs/verb.md, "Paging"). A
page fits the connection's `max_payload` with a margin (`page_budget`). The bottom of the seat's
listing modules: `provisioner.verb.listing` encodes items into `Encoded` pieces, `build_pages` and
`provisioner.verb.streamed` lay them out in pages, `provisioner.verb.cursors` seals their cursors, and
`provisioner.verb.paging` keeps what a seat holds of a listing in memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

# Room in a page for everything besides its items: what, page numbers, totals and the cursor.
ENVELOPE_BYTES = 512

CursorOf = Callable[[int], str]  # the cursor of a listing's page n


@dataclass
class Encoded:
    """A listing (or a part of one) as JSON pieces, each serialised once."""

    entries: list[bytes]
    malformed: list[bytes]

    @property
    def size(self) -> int:
        """Its bytes in a page: each piece and its separator."""
        return sum(len(p) + 1 for p in self.entries) + sum(len(p) + 1 for p in self.malformed)

    def __bool__(self) -> bool:
        return bool(self.entries or self.malformed)


def page_budget(max_payload: int) -> int:
    """The bytes of items one page may carry: a margin below the connection's max_payload."""
    return max_payload - max(max_payload // 32, 1024) - ENVELOPE_BYTES


def build_pages(what: str, encoded: Encoded, *, budget: int, cursor_of: CursorOf) -> list[bytes]:
    """The pages of a listing, each under `budget` bytes of items, page n's `next` being
    `cursor_of(n + 1)`. Consumes `encoded`."""
    bounds = _page_bounds([len(p) for p in encoded.entries], [len(p) for p in encoded.malformed], budget)
    total = totals(len(encoded.entries), len(encoded.malformed))
    pages: list[bytes] = []
    for number, (e0, e1, m0, m1) in enumerate(bounds, start=1):
        following = cursor_of(number + 1) if number < len(bounds) else None
        items = Encoded(_take(encoded.entries, e0, e1), _take(encoded.malformed, m0, m1))
        pages.append(page_json(what, items, number=number, pages=len(bounds), total=total, following=following))
    return pages


def totals(entries: int, malformed: int) -> bytes:
    return b'{"entries":%d,"malformed":%d}' % (entries, malformed)


def page_json(
    what: str, items: Encoded, *, number: int, pages: int | None, total: bytes, following: str | None
) -> bytes:
    """One page: its items, its number, how many pages (None: not known yet), `total` (JSON) and
    the cursor of the next page (None on the last)."""
    return (
        b'{"what":'
        + json.dumps(what).encode()
        + b',"entries":['
        + b",".join(items.entries)
        + b'],"malformed":['
        + b",".join(items.malformed)
        + b'],"page":%d,"pages":%s,"total":%s,"next":%s}'
        % (number, json.dumps(pages).encode(), total, json.dumps(following).encode())
    )


def _take(pieces: list[bytes], start: int, end: int) -> list[bytes]:
    taken = pieces[start:end]
    pieces[start:end] = [b""] * (end - start)  # release each piece once it is in its page
    return taken


def _page_bounds(entries: list[int], malformed: list[int], budget: int) -> list[tuple[int, int, int, int]]:
    """Greedy split: (entries start, end, malformed start, end) per page; at least one page."""
    bounds: list[tuple[int, int, int, int]] = []
    e0 = e = m0 = m = 0
    used = 0
    while e < len(entries) or m < len(malformed):
        size = (entries[e] if e < len(entries) else malformed[m]) + 1
        if used + size > budget and used > 0:
            bounds.append((e0, e, m0, m))
            e0, m0, used = e, m, 0
        used += size
        if e < len(entries):
            e += 1
        else:
            m += 1
    bounds.append((e0, e, m0, m))
    return bounds
