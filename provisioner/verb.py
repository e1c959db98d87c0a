"""The provisioning verb's answers: from memory where it can, else by listing the bucket.

A kept page and the registry (kept by `RegistryView`) are answered at once, in the service's
handler; anything else reads the bucket under the query's narrowing (server-side subject filters
of its key shape, so a query for one node never reads the whole bucket). A narrowed listing that
one batch read answers is read whole, encoded and its pages after the first kept under a cursor;
a larger one, and a whole listing, is streamed (`provisioner.streamed`): each page is read from
the bucket's stream when its cursor comes, so the seat's memory does not grow with the bucket and
listings need not take turns. The contract of requests and answers is in the README.

Who asks comes from the bus: with a `PartyMap` (the grants the controller issued), the header
`Nats-Request-Info` names the asking account, and the query is scoped to that party
(`provisioner.request.scoped`). Without one, every request is answered about the mesh, as on a
single-account development bus.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

import anyio
import anyio.to_thread

from provisioner.errors import Forbidden, Unavailable
from provisioner.listing import paginate_listing
from provisioner.nodes import FleetView, first_page, fleet_of
from provisioner.paging import PageCache, page_budget
from provisioner.registry_view import RegistryView
from provisioner.request import LISTABLE, Asked, Query, parse_request, scoped
from provisioner.streamed import StreamedListing
from registry.access import Party, PartyMap, UnknownAccount
from registry.errors import BusError, NoResponders
from registry.wire import Bus, KvItem, TooManyKeys, current_snapshot

log = logging.getLogger(__name__)

IN_THREAD_FROM = 2000  # items; below this a thread costs more than it spares the loop


class Verb:
    """Answers validated queries; raises `RequestError` for one the verb refuses."""

    def __init__(
        self, bus: Bus, cache: PageCache, registry: RegistryView | None = None, parties: PartyMap | None = None,
        nodes: FleetView | None = None,
    ) -> None:  # fmt: skip
        self.bus = bus
        self.cache = cache
        self.registry = registry
        self.parties = parties
        self.nodes = nodes
        # The fleet is read whole one reading at a time (what=nodes before its view is filled).
        # Listings need not take turns: a streamed one reads a pull at a time, bounded.
        self.whole_listings = anyio.CapacityLimiter(1)

    def asked(self, body: bytes, headers: Mapping[str, str]) -> Asked:
        """The request validated and scoped to the party the bus says sent it; `Forbidden` for an
        account no grant was issued to, or a node asking about another node."""
        party = self.who_asks(headers)
        return Asked(scoped(parse_request(body), party), party)

    def who_asks(self, headers: Mapping[str, str]) -> Party | None:
        if self.parties is None:
            return None
        try:
            return self.parties.who_asks(headers)
        except UnknownAccount as err:
            raise Forbidden(str(err)) from None

    def from_memory(self, asked: Asked) -> bytes | None:
        """The answer when no bucket needs reading (a kept page, the registry), else None."""
        query = asked.query
        if query.cursor is not None:
            kept = self.cache.page(query.cursor, query.given(), asked.party)
            return kept if isinstance(kept, bytes) else None  # a streamed listing's page: read it
        if query.what == "registry" and self.registry is not None:
            return self.registry.answer(page_budget(self.bus.max_payload))
        if query.what == "nodes" and self.nodes is not None and self.nodes.ready:
            return first_page(self.nodes, asked, self.cache, page_budget(self.bus.max_payload))
        return None

    async def by_listing(self, asked: Asked) -> bytes:
        """The first page of a new listing, its later pages kept (or its stream followed) under a
        cursor for the party that asked; or a streamed listing's next page."""
        query = asked.query
        try:
            if query.cursor is not None:
                return await self.continued(asked)
            return await self.listed(asked)
        finally:
            await self.cache.close_dropped()

    async def listed(self, asked: Asked) -> bytes:
        query = asked.query
        if query.what == "nodes":  # no view kept, or not filled yet
            fleet = await fleet_of(self.bus, self.nodes, query.node, self.whole_listings)
            return first_page(fleet, asked, self.cache, page_budget(self.bus.max_payload))
        items = await read_narrowed(self.bus, query) if query.narrowing() else None
        if items is None:
            return await self.streamed(asked)
        listing_id = self.cache.new_listing_id()
        budget = page_budget(self.bus.max_payload)
        paginate = partial(paginate_listing, query.what, items, budget=budget, listing_id=listing_id)
        # A large listing is encoded in a worker thread so that the event loop keeps answering others.
        pages = await anyio.to_thread.run_sync(paginate) if len(items) > IN_THREAD_FROM else paginate()
        log.debug("listed %s %s: %d pages", query.what, query.narrowing() or "everything", len(pages),
                  extra={"what": query.what})  # fmt: skip
        if len(pages) > 1:
            self.cache.keep(listing_id, query.given(), pages[1:], asked.party)
        return pages[0]

    async def streamed(self, asked: Asked) -> bytes:
        """The first page of a streamed listing; kept under a cursor unless it was the last."""
        query = asked.query
        bucket = LISTABLE[query.what].bucket
        filters = bucket.shape.filters(**query.narrowing())
        listing_id = self.cache.new_listing_id()
        budget = page_budget(self.bus.max_payload)
        try:
            listing = await StreamedListing.start(self.bus, query.what, filters, listing_id=listing_id, budget=budget,
                                                  idle=self.cache.ttl)  # fmt: skip
        except BusError as err:
            raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err
        page = await self._read(listing, 1)
        if not listing.finished:
            self.cache.keep_streamed(listing_id, query.given(), listing, asked.party)
        return page

    async def continued(self, asked: Asked) -> bytes:
        """The page a cursor names: kept, or read from its listing's stream."""
        query = asked.query
        assert query.cursor is not None
        kept = self.cache.page(query.cursor, query.given(), asked.party)
        if isinstance(kept, bytes):
            return kept
        listing, number = kept
        page = await self._read(listing, number)
        if listing.finished:
            self.cache.forget(listing.listing_id)
        return page

    async def _read(self, listing: StreamedListing, number: int) -> bytes:
        """Page `number` of `listing`; a listing that fails is forgotten (its cursor then 410)."""
        try:
            page = await listing.page(number)
        except BusError as err:
            self.cache.forget(listing.listing_id)
            await listing.close()
            bucket = LISTABLE[listing.what].bucket
            raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err
        if listing.finished:
            await listing.close()
        return page


async def read_narrowed(bus: Bus, query: Query) -> list[KvItem] | None:
    """The current keys of the query's bucket under its narrowing (server-side filters) by one
    batch read, flat in the bucket's size; None when it has more keys than a batch read answers
    (or the bucket has no direct get): such a listing is streamed."""
    bucket = LISTABLE[query.what].bucket
    filters = bucket.shape.filters(**query.narrowing())
    try:
        return await current_snapshot(bus, bucket, filters, batch_only=True)
    except (TooManyKeys, NoResponders):
        return None
    except BusError as err:
        raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err
