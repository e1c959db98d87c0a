"""Answers split into pages by bytes, and the cursors that fetch the pages after the first.

The page's shape, `total` and the cursor's rules are the verb's contract (README, "Paging"). A
page fits the connection's `max_payload` with a margin. The listing is read once, on the first
request, and its later pages are kept here, bounded in count (`max_cursors`) and bytes
(`cursor_cache_bytes`), oldest dropped first, each for `cursor_ttl` after its last use. A listing
is kept with the party that started it: a cursor is a bearer token, and another party holding it
(a node that saw it go by) must not read a listing scoped to someone else.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from provisioner.errors import CursorGone, RequestError
from registry.parties import Party

log = logging.getLogger(__name__)

# Room in a page for everything besides its items: what, page numbers, totals and the cursor.
ENVELOPE_BYTES = 512


@dataclass
class Encoded:
    """A listing as JSON pieces, each serialised once, sorted by key."""

    entries: list[bytes]
    malformed: list[bytes]


def page_budget(max_payload: int) -> int:
    """The bytes of items one page may carry: a margin below the connection's max_payload."""
    return max_payload - max(max_payload // 32, 1024) - ENVELOPE_BYTES


def build_pages(what: str, encoded: Encoded, *, budget: int, listing_id: str) -> list[bytes]:
    """The pages of a listing, each under `budget` bytes of items. Consumes `encoded`."""
    bounds = _page_bounds([len(p) for p in encoded.entries], [len(p) for p in encoded.malformed], budget)
    totals = b'{"entries":%d,"malformed":%d}' % (len(encoded.entries), len(encoded.malformed))
    head = b'{"what":' + json.dumps(what).encode()
    pages: list[bytes] = []
    for number, (e0, e1, m0, m1) in enumerate(bounds, start=1):
        following = json.dumps(cursor_for(listing_id, number + 1) if number < len(bounds) else None).encode()
        pages.append(
            head
            + b',"entries":['
            + _take(encoded.entries, e0, e1)
            + b'],"malformed":['
            + _take(encoded.malformed, m0, m1)
            + b'],"page":%d,"pages":%d,"total":%s,"next":%s}' % (number, len(bounds), totals, following)
        )
    return pages


def _take(pieces: list[bytes], start: int, end: int) -> bytes:
    joined = b",".join(pieces[start:end])
    pieces[start:end] = [b""] * (end - start)  # release each piece once it is in its page
    return joined


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


# `<listing id>.<page>`: ASCII only, so that no digit Python's `int` reads differently slips through.
CURSOR = re.compile(r"([A-Za-z0-9_-]{1,64})\.([1-9][0-9]{0,8})", re.ASCII)


def cursor_for(listing_id: str, page: int) -> str:
    return f"{listing_id}.{page}"


@dataclass
class _Kept:
    given: Mapping[str, str]
    pages: list[bytes]  # pages[0] is page 2
    size: int
    expires: float
    owner: Party | None


class PageCache:
    """The pages after the first of recent listings, by cursor. Not thread-safe; one event loop."""

    def __init__(
        self,
        *,
        ttl: timedelta = timedelta(seconds=120),
        max_listings: int = 32,
        max_bytes: int = 128 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl.total_seconds()
        self._max_listings = max_listings
        self._max_bytes = max_bytes
        self._clock = clock
        self._kept: dict[str, _Kept] = {}

    @staticmethod
    def new_listing_id() -> str:
        return secrets.token_urlsafe(16)

    @property
    def size(self) -> int:
        return sum(kept.size for kept in self._kept.values())

    def __len__(self) -> int:
        return len(self._kept)

    def keep(
        self, listing_id: str, given: Mapping[str, str], later_pages: list[bytes], owner: Party | None = None
    ) -> None:
        """Keeps pages 2.. of a listing whose first page is being sent to `owner`."""
        self._expire()
        size = sum(len(p) for p in later_pages)
        while self._kept and (len(self._kept) >= self._max_listings or self.size + size > self._max_bytes):
            dropped = next(iter(self._kept))
            del self._kept[dropped]
            log.info("page cache full: dropped an unfinished listing to keep a new one")
        if size > self._max_bytes:
            log.warning("a listing of %d bytes is kept although the page cache holds %d", size, self._max_bytes)
        self._kept[listing_id] = _Kept(dict(given), later_pages, size, self._clock() + self._ttl, owner)

    def page(self, cursor: str, given: Mapping[str, str], asker: Party | None = None) -> bytes:
        """The page `cursor` names, for the party that started its listing only (to any other it
        is unknown); the fields given with it must be those of the first request."""
        self._expire()
        parsed = CURSOR.fullmatch(cursor)
        kept = self._kept.get(parsed.group(1)) if parsed else None
        if parsed is None or kept is None or kept.owner != asker:
            raise CursorGone()
        listing_id, number = parsed.group(1), int(parsed.group(2))
        if not 2 <= number <= len(kept.pages) + 1:
            raise CursorGone()
        differing = sorted(f for f, v in given.items() if kept.given.get(f, _DEFAULTS.get(f)) != v)
        if differing:
            raise RequestError(f"{', '.join(differing)} differ from the listing the cursor continues; omit them")
        page = kept.pages[number - 2]
        if number == len(kept.pages) + 1:
            del self._kept[listing_id]
        else:
            kept.expires = self._clock() + self._ttl
        return page

    def _expire(self) -> None:
        now = self._clock()
        for listing_id in [i for i, kept in self._kept.items() if kept.expires <= now]:
            del self._kept[listing_id]


_DEFAULTS = {"what": "registry"}
