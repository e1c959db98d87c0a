"""Answers split into pages by bytes, and the cursors that fetch the pages after the first.

The page's shape, `total` and the cursor's rules are the verb's contract (README, "Paging"). A
page fits the connection's `max_payload` with a margin. A listing read whole (a narrowed one the
batch read answers) is read once, on the first request, and its later pages are kept here; a
streamed listing (`provisioner.streamed`: one too large to hold) is kept here as the state it
reads its next page from. Both are bounded in count (`max_cursors`) and bytes
(`cursor_cache_bytes`: the pages kept, the most a streamed listing may hold), oldest dropped
first, each for `cursor_ttl` after its last use. A listing is kept with the party that started
it: a cursor is a bearer token, and another party holding it (a node that saw it go by) must not
read a listing scoped to someone else.
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
from typing import TYPE_CHECKING

from provisioner.errors import CursorGone, RequestError
from registry.access import Party

if TYPE_CHECKING:
    from provisioner.streamed import StreamedListing

log = logging.getLogger(__name__)

# Room in a page for everything besides its items: what, page numbers, totals and the cursor.
ENVELOPE_BYTES = 512


@dataclass
class Encoded:
    """A listing (or a part of one) as JSON pieces, each serialised once."""

    entries: list[bytes]
    malformed: list[bytes]

    @property
    def size(self) -> int:
        """Its bytes in a page: each piece and its separator."""
        return sum(len(p) + 1 for p in self.entries) + sum(len(p) + 1 for p in self.malformed)

    def extend(self, more: Encoded) -> None:
        self.entries.extend(more.entries)
        self.malformed.extend(more.malformed)

    def __bool__(self) -> bool:
        return bool(self.entries or self.malformed)


def page_budget(max_payload: int) -> int:
    """The bytes of items one page may carry: a margin below the connection's max_payload."""
    return max_payload - max(max_payload // 32, 1024) - ENVELOPE_BYTES


def build_pages(what: str, encoded: Encoded, *, budget: int, listing_id: str) -> list[bytes]:
    """The pages of a listing, each under `budget` bytes of items. Consumes `encoded`."""
    bounds = _page_bounds([len(p) for p in encoded.entries], [len(p) for p in encoded.malformed], budget)
    total = totals(len(encoded.entries), len(encoded.malformed))
    pages: list[bytes] = []
    for number, (e0, e1, m0, m1) in enumerate(bounds, start=1):
        following = cursor_for(listing_id, number + 1) if number < len(bounds) else None
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
        b'{"what":' + json.dumps(what).encode()
        + b',"entries":[' + b",".join(items.entries)
        + b'],"malformed":[' + b",".join(items.malformed)
        + b'],"page":%d,"pages":%s,"total":%s,"next":%s}'
        % (number, json.dumps(pages).encode(), total, json.dumps(following).encode())
    )  # fmt: skip


def take_page(carried: Encoded, budget: int) -> Encoded:
    """The first page's worth of `carried` (entries first, under `budget` bytes, at least one
    piece), taken out of it."""
    used = 0
    counts = []
    for pieces in (carried.entries, carried.malformed):
        count = 0
        for piece in pieces:
            if used + len(piece) + 1 > budget and used > 0:
                break
            used, count = used + len(piece) + 1, count + 1
        counts.append(count)
        if count < len(pieces):
            counts.append(0)
            break
    e, m = counts[0], counts[1]
    page = Encoded(carried.entries[:e], carried.malformed[:m])
    del carried.entries[:e], carried.malformed[:m]
    return page


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


# `<listing id>.<page>`: ASCII only, so that no digit Python's `int` reads differently slips through.
CURSOR = re.compile(r"([A-Za-z0-9_-]{1,64})\.([1-9][0-9]{0,8})", re.ASCII)


def cursor_for(listing_id: str, page: int) -> str:
    return f"{listing_id}.{page}"


@dataclass
class _Kept:
    given: Mapping[str, str]
    pages: list[bytes]  # pages[0] is page 2; none for a streamed listing
    size: int
    expires: float
    owner: Party | None
    streamed: StreamedListing | None = None


class PageCache:
    """Recent listings by cursor: the pages after the first of those read whole, the state of
    those streamed. Not thread-safe; one event loop."""

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
        self._dropped: list[StreamedListing] = []

    @staticmethod
    def new_listing_id() -> str:
        return secrets.token_urlsafe(16)

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def size(self) -> int:
        return sum(kept.size for kept in self._kept.values())

    def __len__(self) -> int:
        return len(self._kept)

    def keep(
        self, listing_id: str, given: Mapping[str, str], later_pages: list[bytes], owner: Party | None = None
    ) -> None:
        """Keeps pages 2.. of a listing whose first page is being sent to `owner`."""
        size = sum(len(p) for p in later_pages)
        self._make_room(size)
        if size > self._max_bytes:
            log.warning("a listing of %d bytes is kept although the page cache holds %d", size, self._max_bytes)
        self._kept[listing_id] = _Kept(dict(given), later_pages, size, self._clock() + self._ttl, owner)

    def keep_streamed(
        self, listing_id: str, given: Mapping[str, str], streamed: StreamedListing, owner: Party | None = None
    ) -> None:
        """Keeps a streamed listing whose first page is being sent to `owner`, until its last page
        is sent (`forget`), it expires or it is dropped for room (then closed by `close_dropped`).
        It counts as the most bytes it may hold (`StreamedListing.most_bytes`)."""
        size = streamed.most_bytes
        self._make_room(size)
        self._kept[listing_id] = _Kept(dict(given), [], size, self._clock() + self._ttl, owner, streamed)

    def _make_room(self, size: int) -> None:
        self._expire()
        while self._kept and (len(self._kept) >= self._max_listings or self.size + size > self._max_bytes):
            self._drop(next(iter(self._kept)))
            log.info("page cache full: dropped an unfinished listing to keep a new one")

    def page(
        self, cursor: str, given: Mapping[str, str], asker: Party | None = None
    ) -> bytes | tuple[StreamedListing, int]:
        """The page `cursor` names, for the party that started its listing only (to any other it
        is unknown); the fields given with it must be those of the first request. For a streamed
        listing, the listing and the page number asked, for the caller to read it."""
        self._expire()
        parsed = CURSOR.fullmatch(cursor)
        kept = self._kept.get(parsed.group(1)) if parsed else None
        if parsed is None or kept is None or kept.owner != asker:
            raise CursorGone()
        listing_id, number = parsed.group(1), int(parsed.group(2))
        if kept.streamed is None and not 2 <= number <= len(kept.pages) + 1:
            raise CursorGone()
        differing = sorted(f for f, v in given.items() if kept.given.get(f, _DEFAULTS.get(f)) != v)
        if differing:
            raise RequestError(f"{', '.join(differing)} differ from the listing the cursor continues; omit them")
        kept.expires = self._clock() + self._ttl
        if kept.streamed is not None:
            return kept.streamed, number
        page = kept.pages[number - 2]
        if number == len(kept.pages) + 1:
            del self._kept[listing_id]
        return page

    def forget(self, listing_id: str) -> None:
        """Forgets a streamed listing whose last page was sent (its caller closes it)."""
        self._kept.pop(listing_id, None)

    async def close_dropped(self) -> None:
        """Closes the streamed listings dropped or expired since the last call."""
        self._expire()
        dropped, self._dropped = self._dropped, []
        for streamed in dropped:
            await streamed.close()

    def _expire(self) -> None:
        now = self._clock()
        for listing_id in [i for i, kept in self._kept.items() if kept.expires <= now]:
            self._drop(listing_id)

    def _drop(self, listing_id: str) -> None:
        kept = self._kept.pop(listing_id)
        if kept.streamed is not None:
            self._dropped.append(kept.streamed)


_DEFAULTS = {"what": "registry"}
