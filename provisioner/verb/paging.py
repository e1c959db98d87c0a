"""What a seat holds in memory of the listings it answered, by listing id.

A page's shape is `provisioner.verb.pages`, its cursor `provisioner.verb.cursors` (sealed: it says
which listing and page, for whom). A listing of `what=nodes` is read once, on the first request,
and its later pages are kept here; a streamed listing (`provisioner.verb.streamed`) is kept here
as the state it reads its next page from, read ahead, so that the cursor that follows a page is
answered at once by the seat that answered it (any other seat resumes the listing from its cursor).
Both are bounded in count (`max_cursors`) and bytes (`cursor_cache_bytes`: the pages kept, the most
a streamed listing may hold), each for `cursor_ttl` after its last use. A listing is kept with the
party that started it, and found for that party only.

Room is shared fairly: each party may keep at most `max_cursors_per_party` listings and
`cursor_cache_bytes_per_party` bytes, and a party over its share drops its own oldest listing,
never another's. So one party asking without end cannot take another's listings away; only when
several parties together fill the whole cache is a listing of the party holding the most dropped.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from provisioner.errors import CursorGone
from provisioner.verb.cursors import CursorSeal
from provisioner.verb.streamed import StreamedListing
from registry.access import Party

log = logging.getLogger(__name__)


@dataclass
class _Kept:
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
        party_listings: int = 8,
        party_bytes: int = 32 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
        seal: CursorSeal | None = None,
    ) -> None:
        """`seal`: how its cursors are sealed (default: a key of this process alone)."""
        self.seal = seal if seal is not None else CursorSeal(secrets.token_bytes(32), ttl)
        self._ttl = ttl.total_seconds()
        self._max_listings = max_listings
        self._max_bytes = max_bytes
        self._party_listings = min(party_listings, max_listings)
        self._party_bytes = min(party_bytes, max_bytes)
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

    def held(self) -> tuple[int, int, int]:
        """The listings kept now (not expired) with their `pages`, those `streamed`, and their bytes."""
        now = self._clock()
        live = [kept for kept in self._kept.values() if kept.expires > now]
        streamed = sum(1 for kept in live if kept.streamed is not None)
        return len(live) - streamed, streamed, sum(kept.size for kept in live)

    def keep(self, listing_id: str, later_pages: list[bytes], owner: Party | None = None) -> None:
        """Keeps pages 2.. of a listing whose first page is being sent to `owner`."""
        size = sum(len(p) for p in later_pages)
        self._make_room(size, owner)
        if size > self._max_bytes:
            log.warning("a listing of %d bytes is kept although the page cache holds %d", size, self._max_bytes)
        self._kept[listing_id] = _Kept(later_pages, size, self._clock() + self._ttl, owner)

    def keep_streamed(self, listing_id: str, streamed: StreamedListing, owner: Party | None = None) -> None:
        """Keeps a streamed listing whose page is being sent to `owner` (in place of one this seat
        held under the same id), until its last page is sent (`forget`), it expires or it is
        dropped for room (then closed by `close_dropped`). It counts as the most bytes it may hold
        (`StreamedListing.most_bytes`)."""
        if listing_id in self._kept:
            self._drop(listing_id)
        size = streamed.most_bytes
        self._make_room(size, owner)
        self._kept[listing_id] = _Kept([], size, self._clock() + self._ttl, owner, streamed)

    def _make_room(self, size: int, owner: Party | None) -> None:
        """Drops the owner's oldest listings while it is over its share, then, while the whole
        cache is full, the oldest of the party holding the most."""
        self._expire()
        own = [listing_id for listing_id, kept in self._kept.items() if kept.owner == owner]  # oldest first
        while own and (len(own) >= self._party_listings or self._size_of(own) + size > self._party_bytes):
            self._drop(own.pop(0))
            log.info("%s keeps as many listings as it may: dropped its oldest unfinished one", _named(owner))
        while self._kept and (len(self._kept) >= self._max_listings or self.size + size > self._max_bytes):
            heaviest = self._heaviest()
            self._drop(next(i for i, kept in self._kept.items() if kept.owner == heaviest))
            log.info(
                "page cache full: dropped the oldest unfinished listing of %s, which holds the most", _named(heaviest)
            )

    def _size_of(self, listing_ids: list[str]) -> int:
        return sum(self._kept[listing_id].size for listing_id in listing_ids)

    def _heaviest(self) -> Party | None:
        """The party whose kept listings hold the most bytes (then the most listings)."""
        held: dict[Party | None, tuple[int, int]] = {}
        for kept in self._kept.values():
            size, count = held.get(kept.owner, (0, 0))
            held[kept.owner] = (size + kept.size, count + 1)
        return max(held, key=held.__getitem__)

    def page(self, listing_id: str, number: int, asker: Party | None = None) -> bytes:
        """Page `number` of a listing whose pages are kept, for the party that started it only (to
        any other it is unknown)."""
        kept = self._found(listing_id, asker)
        if kept.streamed is not None or not 2 <= number <= len(kept.pages) + 1:
            raise CursorGone()
        page = kept.pages[number - 2]
        if number == len(kept.pages) + 1:
            del self._kept[listing_id]
        return page

    def streamed(self, listing_id: str, asker: Party | None = None) -> StreamedListing | None:
        """The streamed listing this seat holds under `listing_id` for `asker`, if it does."""
        try:
            kept = self._found(listing_id, asker)
        except CursorGone:
            return None
        return kept.streamed

    def _found(self, listing_id: str, asker: Party | None) -> _Kept:
        self._expire()
        kept = self._kept.get(listing_id)
        if kept is None or kept.owner != asker:
            raise CursorGone()
        kept.expires = self._clock() + self._ttl
        return kept

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


def _named(party: Party | None) -> str:
    return "the seat's own account" if party is None else f"{party.kind.value} {party.name}"
