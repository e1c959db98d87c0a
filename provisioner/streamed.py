"""Listings too large to hold, streamed: each page read from the bucket's stream when it is asked for.

A whole listing, and a narrowed one with more keys than one batch read answers, walks the
bucket's stream in stream order (`registry.walk.StreamWalk`, a pull consumer of its own). Each
page is built when its cursor comes: the messages of the pull sent after the previous page (they
arrived while that page travelled), encoded, and what does not fit carried over to the next
page. So the seat holds, per listing, about one pull, the pieces carried over and the last page
sent (a cursor asked again, its answer lost, gets it again), whatever the bucket's size, and the
first page is sent after one pull instead of after the whole bucket.

What a streamed listing answers (README, "Paging"):
- entries in stream order (the order keys were last written), not by key; a listing the first
  pull reads whole (about twice `max_payload` of stored messages) is sorted by key, as a narrowed
  listing is;
- a key written during the listing moves to the end of the stream: met before it moved, it is
  answered again there with its new value; a key deleted after it was answered stays answered;
- `pages` is null and `total` is `{"at_most": N}` until the last page: N is how many messages
  matched when the listing began (latest entries and delete markers), so at most N entries and
  malformed keys, besides keys written during the listing; the last page says `pages` and the
  exact `total` of what the listing answered.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

import anyio
import anyio.to_thread

from provisioner.errors import CursorGone
from provisioner.listing import encode_items
from provisioner.paging import Encoded, cursor_for, page_json, take_page, totals
from provisioner.request import LISTABLE
from registry.bus import Bus
from registry.feed import KvItem
from registry.kv import leader_floor
from registry.walk import StreamWalk

log = logging.getLogger(__name__)

PULL_PAGES = 2  # a pull asks for this many pages' worth of bytes: a stored message is larger than its entry
IN_THREAD_FROM = 2000  # items; below this a thread costs more than it spares the loop
CONSUMER_GRACE = 10.0  # seconds the walk's consumer outlives the cursor's ttl on the server


class StreamedListing:
    """One streamed listing: its walk, the pieces carried to its next page, its last page.

    `page(n)` answers page n once the page before it was answered (or n again); the listing is
    `finished` once its last page is built. Not thread-safe; one event loop."""

    def __init__(self, what: str, walk: StreamWalk, *, listing_id: str, budget: int, at_most: int) -> None:
        self.what = what
        self.walk = walk
        self.listing_id = listing_id
        self.budget = budget
        self.at_most = at_most
        self.finished = False
        self._answered = 0  # pages built
        self._carried = Encoded([], [])
        self._counts = [0, 0]  # entries, malformed answered
        self._last: bytes | None = None
        self._lock = anyio.Lock()

    @classmethod
    async def start(
        cls, bus: Bus, what: str, filters: Sequence[str], *, listing_id: str, budget: int, idle: float
    ) -> StreamedListing:
        """A listing of the keys of `what`'s bucket under `filters`, its walk open: never ending
        before the sequence the stream's leader held when it began."""
        bucket = LISTABLE[what].bucket
        floor = await leader_floor(bus, bucket, filters)
        walk = StreamWalk(bus, bucket, filters, idle=idle + CONSUMER_GRACE)
        try:
            at_most = await walk.open(floor=floor)
        except BaseException:
            await walk.close()
            raise
        return cls(what, walk, listing_id=listing_id, budget=budget, at_most=at_most)

    @property
    def _pull_bytes(self) -> int:
        return PULL_PAGES * self.budget

    async def page(self, number: int) -> bytes:
        """Page `number`: the next one, or the last one built again."""
        async with self._lock:
            if number == self._answered and self._last is not None:
                return self._last
            if number != self._answered + 1 or self.finished:
                raise CursorGone()
            self._last = await self._next_page()
            self._answered = number
            return self._last

    async def close(self) -> None:
        await self.walk.close()

    async def _next_page(self) -> bytes:
        while self._carried.size < self.budget and not self.walk.finished:
            pulled = await self.walk.pulled(self._pull_bytes)
            live = [item for item in pulled.items if not item.deleted]
            if self._answered == 0 and pulled.finished and not self._carried:
                live.sort(key=lambda item: item.key)  # the whole listing in one read: by key
            self._carried.extend(await _encoded(self.what, live, self.budget))
        items = take_page(self._carried, self.budget)
        self._counts[0] += len(items.entries)
        self._counts[1] += len(items.malformed)
        number = self._answered + 1
        if self.walk.finished and not self._carried:
            self.finished = True
            total = totals(*self._counts)
            return page_json(self.what, items, number=number, pages=number, total=total, following=None)
        if self._carried.size < self.budget:
            await self.walk.pull(self._pull_bytes)  # its messages arrive while this page travels
        total = b'{"at_most":%d}' % self.at_most
        following = cursor_for(self.listing_id, number + 1)
        return page_json(self.what, items, number=number, pages=None, total=total, following=following)


async def _encoded(what: str, items: list[KvItem], budget: int) -> Encoded:
    encode = partial(encode_items, what, items, max_item_bytes=budget)
    # A large pull is encoded in a worker thread so that the event loop keeps answering others.
    return await anyio.to_thread.run_sync(encode) if len(items) > IN_THREAD_FROM else encode()
