"""The provisioning verb's answers: from memory where it can, else by listing the bucket.

A cursor's page and the registry (kept by `RegistryView`) are answered at once, in the service's
handler; anything else reads the bucket under the query's narrowing (server-side subject filters
of its key shape, so a query for one node never reads the whole bucket), encodes it and keeps the
pages after the first under a cursor. The contract of requests and answers is in the README.

Who asks comes from the bus: with a `PartyMap` (the grants the controller issued), the header
`Nats-Request-Info` names the asking account, and the query is scoped to that party
(`provisioner.request.scoped`). Without one, every request is answered about the mesh, as on a
single-account development bus.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import nullcontext
from functools import partial

import anyio
import anyio.to_thread

from provisioner.errors import Forbidden, Unavailable
from provisioner.listing import paginate_listing
from provisioner.nodes import FleetView, first_page, read_fleet
from provisioner.paging import PageCache, page_budget
from provisioner.registry_view import RegistryView
from provisioner.request import LISTABLE, Asked, Query, parse_request, scoped
from registry.bus import Bus
from registry.errors import BusError
from registry.kv import KvItem, current_snapshot
from registry.parties import Party, PartyMap, UnknownAccount

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
        # Whole listings are read one at a time: several pushed at once over the seat's one
        # connection outran it (three of 200,000 keys: nats-server cut the connection as a slow
        # consumer and every listing lost messages). Narrowed listings are batch reads: unaffected.
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
        """The answer when no bucket needs reading (a cursor's page, the registry), else None."""
        query = asked.query
        if query.cursor is not None:
            return self.cache.page(query.cursor, query.given(), asked.party)
        if query.what == "registry" and self.registry is not None:
            return self.registry.answer(page_budget(self.bus.max_payload))
        if query.what == "nodes" and self.nodes is not None and self.nodes.ready:
            return first_page(self.nodes, asked, self.cache, page_budget(self.bus.max_payload))
        return None

    async def by_listing(self, asked: Asked) -> bytes:
        """The first page of a new listing; the pages after it are kept under a cursor for the
        party that asked."""
        query = asked.query
        if query.what == "nodes":  # no view kept, or not filled yet
            async with self.whole_listings if query.node is None else nullcontext():
                fleet = await read_fleet(self.bus, query.node)
            return first_page(fleet, asked, self.cache, page_budget(self.bus.max_payload))
        if query.narrowing():
            items = await list_keys(self.bus, query)
        else:
            async with self.whole_listings:
                items = await list_keys(self.bus, query)
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


async def list_keys(bus: Bus, query: Query) -> list[KvItem]:
    """The current keys of the query's bucket under its narrowing (server-side filters): a narrowed
    listing by a batch read (flat in the bucket's size) when it has at most 1,024 keys, a whole
    one by a consumer."""
    bucket = LISTABLE[query.what].bucket
    narrowing = query.narrowing()
    filters = bucket.shape.filters(**narrowing)
    try:
        return await current_snapshot(bus, bucket, filters, by_batch=bool(narrowing))
    except BusError as err:
        raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err
