"""Listings too large to hold, streamed: pages read from the bucket's stream as they are asked for.

A whole listing, and a narrowed one with more keys than one batch read answers, walks the
bucket's stream in stream order (`registry.wire.walk.StreamWalk`, a pull consumer of its own). Each
message is encoded as it arrives; the first page is sent once it is full (or the stream ends),
and from then on pulls follow one another until `READ_AHEAD_PAGES` pages wait, so reading goes
on while a page travels and its asker reads it. So the seat holds, per listing, at most that
much, one pull and the last page sent (a cursor asked again, its answer lost, gets it again),
whatever the bucket's size, and the first page leaves after about one page's reading instead of
after the whole bucket's.

What a streamed listing answers (docs/verb.md, "Paging"):
- entries in stream order (the order keys were last written), not by key; a listing that fits
  one page is sorted by key, as a listing read whole is;
- a key written during the listing moves to the end of the stream: met before it moved, it is
  answered again there with its new value; a key deleted after it was answered stays answered;
- `pages` is null and `total` is `{"at_most": N}` until the last page: N is how many messages
  matched when the listing began (latest entries and delete markers), so at most N entries and
  malformed keys, besides keys written during the listing; the last page says `pages` and the
  exact `total` of what the listing answered.

A page holds every piece read below one stream sequence and none above it, so its cursor
(`provisioner.verb.cursors.Continuation`) says where the next page starts: any seat, or this one
restarted, resumes the listing there (`StreamedListing.resume`), every key it has not answered met
once, none it answered met again (unless written since). The seat that answered a page keeps the
listing, read ahead, for the cursor that follows it (`serves`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

import anyio

from provisioner.errors import CursorGone
from provisioner.verb.cursors import Continuation
from provisioner.verb.listing import Encoder
from provisioner.verb.pages import Encoded, page_json, totals
from provisioner.verb.request import LISTABLE
from registry.wire import Bus, StreamWalk, leader_floor, replicated

log = logging.getLogger(__name__)

READ_AHEAD_PAGES = 2  # encoded pages read ahead of the cursor, at most (plus the pull under way)
CONSUMER_GRACE = 10.0  # seconds the walk's consumer outlives the cursor's ttl on the server

Seal = Callable[[Continuation], str]


class StreamedListing:
    """One streamed listing: its walk, the pieces read ahead of its next page, its last page.

    Each message is encoded as it arrives (`Encoder`), and pulls follow one another while fewer
    than `READ_AHEAD_PAGES` pages are waiting, so reading goes on while a page travels and the
    asker reads it. `page(n)` answers page n once page n - 1 was answered (or n again); the
    listing is `finished` once its last page is built. Each page's `next` is `seal` of where the
    page after it starts, `begun` filled in. Not thread-safe; one event loop."""

    def __init__(
        self,
        bus: Bus,
        what: str,
        filters: Sequence[str],
        *,
        begun: Continuation,
        seal: Seal,
        budget: int,
        idle: float,
        forgotten: frozenset[str] = frozenset(),
        share: int | None = None,
    ) -> None:
        self.what = what
        self.listing_id = begun.listing
        self.budget = budget
        self.at_most = begun.at_most
        self.finished = False
        self.walk = StreamWalk(
            bus,
            LISTABLE[what].bucket,
            filters,
            sink=self._add,
            wanted=self._wanted,
            pull_bytes=budget,
            idle=idle + CONSUMER_GRACE,
        )
        self._begun = begun
        self._seal = seal
        self._encoder = Encoder(what, max_item_bytes=budget, forgotten=forgotten, share=share)
        self._order: deque[tuple[int, bool, int]] = deque()  # each piece waiting: sequence, entry?, bytes
        self._waiting = 0  # bytes encoded and not yet in a page
        self.most_waiting = 0  # the most bytes it held at once, encoded and not yet in a page
        self._ahead = budget  # bytes to read ahead: one page until the first is sent
        # The keys of page 1's entries and malformed keys, in the order encoded, to sort a listing
        # that fits it by key: the pieces, never the items (a page of malformed keys may have read
        # the node's every 64 KiB value: holding them held tens of MB, encoding them again blocked
        # the seat's event loop for up to half a second).
        self._first: tuple[list[str], list[str]] | None = ([], []) if begun.page == 1 else None
        self._answered = begun.page - 1  # pages built
        self._counts = [begun.entries, begun.malformed]  # entries, malformed answered
        self.position = max(begun.position, 1)  # the stream sequence the next page starts at
        self._last_position = 0  # the one the last page built started at
        self._last: bytes | None = None
        self._lock = anyio.Lock()

    @property
    def most_bytes(self) -> int:
        return self.most_bytes_for(self.budget)

    @staticmethod
    def most_bytes_for(budget: int) -> int:
        """The most a listing of pages of `budget` bytes holds: the pages read ahead, the pull under
        way past them (its messages are no larger encoded than stored), the pieces the page before
        did not take, and the last page sent."""
        return (READ_AHEAD_PAGES + 3) * budget

    @classmethod
    async def start(
        cls,
        bus: Bus,
        what: str,
        filters: Sequence[str],
        *,
        begun: Continuation,
        seal: Seal,
        budget: int,
        idle: float,
        forgotten: frozenset[str] = frozenset(),
        share: int | None = None,
    ) -> StreamedListing:
        """A listing of the keys of `what`'s bucket under `filters`, its walk open: never ending
        before the sequence the stream's leader held when it began; `forgotten` as `Encoder` takes it."""
        bucket = LISTABLE[what].bucket
        floor = await leader_floor(bus, bucket, filters) if await replicated(bus, bucket) else 0
        begun = replace(begun, page=1, position=1, floor=floor)
        listing = cls(
            bus, what, filters, begun=begun, seal=seal, budget=budget, idle=idle, forgotten=forgotten, share=share
        )
        listing.at_most = await listing._opened(begun)
        listing._begun = replace(begun, at_most=listing.at_most)
        return listing

    @classmethod
    async def resume(
        cls,
        bus: Bus,
        what: str,
        filters: Sequence[str],
        *,
        begun: Continuation,
        seal: Seal,
        budget: int,
        idle: float,
        forgotten: frozenset[str] = frozenset(),
        share: int | None = None,
    ) -> StreamedListing:
        """The listing `begun` continues (begun on this seat or another), its walk open at the
        sequence its next page starts at."""
        listing = cls(
            bus, what, filters, begun=begun, seal=seal, budget=budget, idle=idle, forgotten=forgotten, share=share
        )
        await listing._opened(begun)
        return listing

    async def _opened(self, begun: Continuation) -> int:
        try:
            return await self.walk.open(floor=begun.floor, start=self.position)
        except BaseException:
            await self.close()
            raise

    def serves(self, continuation: Continuation) -> bool:
        """Whether this listing, as it stands, answers the page `continuation` asks for: the next
        page from where the last ended, or the last page again."""
        if continuation.page == self._answered + 1:
            return continuation.position == self.position and not self.finished
        return continuation.page == self._answered and continuation.position == self._last_position

    async def page(self, number: int) -> bytes:
        """Page `number`: the next one, or the last one built again."""
        async with self._lock:
            if number == self._answered and self._last is not None:
                return self._last
            if number != self._answered + 1 or self.finished:
                raise CursorGone()
            self._last_position = self.position
            self._last = await self._next_page()
            self._answered = number
            return self._last

    async def close(self) -> None:
        await self.walk.close()

    def _add(self, key: str, value: bytes, revision: int, deleted: bool) -> None:
        if deleted:
            return
        entries = len(self._encoder.encoded.entries)
        size = self._encoder.add(key, value, revision)
        entry = len(self._encoder.encoded.entries) > entries
        self._waiting += size
        self._order.append((revision, entry, size))
        if self._first is not None:
            self._first[not entry].append(key)

    def _wanted(self) -> bool:
        return self._waiting < self._ahead

    def _enough(self) -> bool:
        return self._waiting >= self.budget

    async def _next_page(self) -> bytes:
        await self.walk.read(self._enough)
        if self.walk.finished:
            self._waiting += self._encoder.finish()  # what each node had past its share, once
        self.most_waiting = max(self.most_waiting, self._waiting)  # it only grows between pages
        first, self._first = self._first, None
        if first is not None and self.walk.finished and self._waiting <= self.budget:
            items = by_key(self._encoder.encoded, *first)  # one page: by key
            self._encoder.encoded, self._order = Encoded([], []), deque()
        else:
            items = self._take_page()
        self._waiting -= items.size
        self._counts[0] += len(items.entries)
        self._counts[1] += len(items.malformed)
        number = self._answered + 1
        if self.walk.finished and not self._order:
            self.finished = True
            log.debug(
                "streamed %s: %d pages, %d entries, %d malformed, at most %d bytes waiting",
                self.what,
                number,
                *self._counts,
                self.most_waiting,
            )
            total = totals(*self._counts)
            return page_json(self.what, items, number=number, pages=number, total=total, following=None)
        self._ahead = READ_AHEAD_PAGES * self.budget
        await self.walk.read_ahead()
        total = b'{"at_most":%d}' % self.at_most
        following = self._seal(self._continuation(number + 1))
        return page_json(self.what, items, number=number, pages=None, total=total, following=following)

    def _take_page(self) -> Encoded:
        """The pieces read first, in stream order, under `budget` bytes (at least one), taken out;
        `position` moves past them."""
        used = entries = malformed = 0
        last = None
        while self._order:
            sequence, entry, size = self._order[0]
            if used + size > self.budget and used > 0:
                break
            self._order.popleft()
            used, last = used + size, sequence
            entries, malformed = entries + entry, malformed + (not entry)
        encoded = self._encoder.encoded
        page = Encoded(encoded.entries[:entries], encoded.malformed[:malformed])
        del encoded.entries[:entries], encoded.malformed[:malformed]
        if self._order and last is not None:
            self.position = last + 1
        else:  # every message read is answered or skipped (a delete marker)
            self.position = max(self.position, self.walk.last_sequence + 1)
        return page

    def _continuation(self, number: int) -> Continuation:
        return replace(
            self._begun,
            page=number,
            position=self.position,
            floor=self.walk.floor,
            at_most=self.at_most,
            entries=self._counts[0],
            malformed=self._counts[1],
        )


def by_key(encoded: Encoded, entry_keys: list[str], malformed_keys: list[str]) -> Encoded:
    """The pieces of `encoded`, each list sorted by the keys it was encoded from (in its order)."""
    return Encoded(_sorted(encoded.entries, entry_keys), _sorted(encoded.malformed, malformed_keys))


def _sorted(pieces: list[bytes], keys: list[str]) -> list[bytes]:
    order = sorted(range(len(pieces)), key=keys.__getitem__)
    return [pieces[at] for at in order]
