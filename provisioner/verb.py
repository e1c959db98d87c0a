"""The provisioning verb's answers: from memory where it can, else by listing the bucket.

A cursor's page and the registry (kept by `RegistryView`) are answered at once, in the service's
handler; anything else reads the bucket under the query's narrowing (server-side subject filters
of its key shape, so a query for one node never reads the whole bucket), encodes it and keeps the
pages after the first under a cursor. The contract of requests and answers is in the README.
"""

from __future__ import annotations

import logging
from functools import partial

import anyio
import anyio.to_thread

from provisioner.errors import Unavailable
from provisioner.listing import paginate_listing
from provisioner.paging import PageCache, page_budget
from provisioner.registry_view import RegistryView
from provisioner.request import LISTABLE, Query
from registry.bus import Bus
from registry.errors import BusError
from registry.kv import KvItem, snapshot

log = logging.getLogger(__name__)

IN_THREAD_FROM = 2000  # items; below this a thread costs more than it spares the loop


class Verb:
    """Answers validated queries; raises `RequestError` for one the verb refuses."""

    def __init__(self, bus: Bus, cache: PageCache, registry: RegistryView | None = None) -> None:
        self.bus = bus
        self.cache = cache
        self.registry = registry

    def from_memory(self, query: Query) -> bytes | None:
        """The answer when no bucket needs reading (a cursor's page, the registry), else None."""
        if query.cursor is not None:
            return self.cache.page(query.cursor, query.given())
        if query.what == "registry" and self.registry is not None:
            return self.registry.answer(page_budget(self.bus.max_payload))
        return None

    async def by_listing(self, query: Query) -> bytes:
        """The first page of a new listing; the pages after it are kept under a cursor."""
        items = await list_keys(self.bus, query)
        listing_id = self.cache.new_listing_id()
        budget = page_budget(self.bus.max_payload)
        paginate = partial(paginate_listing, query.what, items, budget=budget, listing_id=listing_id)
        # A large listing is encoded in a worker thread so that the event loop keeps answering others.
        pages = await anyio.to_thread.run_sync(paginate) if len(items) > IN_THREAD_FROM else paginate()
        log.debug("listed %s %s: %d pages", query.what, query.narrowing() or "everything", len(pages),
                  extra={"what": query.what})  # fmt: skip
        if len(pages) > 1:
            self.cache.keep(listing_id, query.given(), pages[1:])
        return pages[0]


async def list_keys(bus: Bus, query: Query) -> list[KvItem]:
    """The current keys of the query's bucket under its narrowing (server-side filters)."""
    bucket = LISTABLE[query.what].bucket
    filters = bucket.shape.filters(**query.narrowing())
    try:
        return await snapshot(bus, bucket, filters)
    except BusError as err:
        raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err
