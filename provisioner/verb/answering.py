"""How each request of the verb is answered: the one place that decides (`Answering.answer`).

    at once, in the service's handler: memory holds the answer
        REGISTRY_VIEW   what=registry: the registry view's answer, when it fits one page
        KEPT_PAGE       a cursor of a what=nodes listing: its page, kept by this seat
    queued under the service's concurrency limit, in the asking party's turn
        OWN_PAGE        what=needs or what=applied of one node: its page kept since the node's
                        last write, after one get of the node's stamp (a node reads its own
                        writes, `provisioner.verb.own_pages`); else read as NARROWED_READ, and kept
        NODES_VIEW      what=nodes: the fleet view, once it is filled, its rows made a few
                        hundred at a time (the whole fleet's in one step held every other request)
        STREAMED_PAGE   a cursor of a streamed listing: its next page, read from the stream by
                        the listing this seat holds, else resumed where the cursor says
        FLEET_LISTED    what=nodes without a filled view: the leases and applied buckets listed
        NARROWED_READ   a narrowed listing: one batch read answering one page; streamed when
                        it has more keys than one batch read answers, or more than a page
        STREAMED        anything else, a whole listing: read from the bucket's stream a page at
                        a time (`provisioner.verb.streamed`)

A narrowed listing reads under server-side subject filters of its key shape, so a query for one
node never reads the whole bucket. A collect listing marks the entries of nodes the seat marked
gone as forgotten (`"forgotten":true`): the marks as the fleet view follows them, else read by one
batch (`forgotten_tokens`). A streamed listing's memory does not grow with the bucket,
and listings need not take turns. The contract of requests and answers is docs/verb.md.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Protocol

import anyio
import anyio.to_thread

from provisioner.errors import Unavailable
from provisioner.verb.cursors import Continuation, party_of
from provisioner.verb.listing import paginate_listing
from provisioner.verb.nodes import FleetView, first_page, fleet_of
from provisioner.verb.own_pages import OWN_LISTINGS, OwnListing, OwnPages, lowest_revision
from provisioner.verb.pages import page_budget
from provisioner.verb.paging import PageCache
from provisioner.verb.registry_view import RegistryView
from provisioner.verb.request import LISTABLE, Asked, Query
from provisioner.verb.streamed import Seal, StreamedListing
from registry.access import Party
from registry.contract import SHARE_BYTES, encode_token, fleet, under
from registry.errors import BusError, KeyShapeError, NoResponders
from registry.wire import Bus, KvItem, TooManyKeys, current_snapshot, get_last_many, last_stamp

log = logging.getLogger(__name__)

IN_THREAD_FROM = 2000  # items; below this a thread costs more than it spares the loop


class StartWalk(Protocol):
    """`StreamedListing.start` or `StreamedListing.resume`."""

    def __call__(
        self,
        bus: Bus,
        what: str,
        filters: Sequence[str],
        *,
        begun: Continuation,
        seal: Seal,
        budget: int,
        idle: float,
        forgotten: frozenset[str] = ...,
        share: int | None = ...,
    ) -> Awaitable[StreamedListing]: ...


class Way(Enum):
    """How a request is answered (the module's docstring draws them)."""

    REGISTRY_VIEW = "registry view"
    OWN_PAGE = "own page"
    NODES_VIEW = "nodes view"
    KEPT_PAGE = "kept page"
    STREAMED_PAGE = "streamed page"
    FLEET_LISTED = "fleet listed"
    NARROWED_READ = "narrowed read"
    STREAMED = "streamed"


@dataclass(frozen=True, slots=True)
class AtOnce:
    """An answer memory holds: `page`, sent from the service's handler."""

    way: Way
    what: str
    page: bytes
    party: Party | None = None  # who asked


@dataclass(frozen=True, slots=True)
class Reading:
    """An answer that reads a bucket: `read()` once the turn of `party` (who asked) comes;
    `charged` when its bytes were charged to the party already (`provisioner.verb.budgets`)."""

    way: Way
    what: str
    read: Callable[[], Awaitable[bytes]]
    party: Party | None = None
    charged: bool = False


Answer = AtOnce | Reading


class Answering:
    """Decides how each request is answered, and reads the buckets for those memory cannot answer."""

    def __init__(
        self,
        bus: Bus,
        cache: PageCache,
        registry: RegistryView | None = None,
        nodes: FleetView | None = None,
        own: OwnPages | None = None,
    ) -> None:
        self.bus = bus
        self.cache = cache
        self.registry = registry
        self.nodes = nodes
        self.own = own
        # The fleet is read whole one reading at a time (what=nodes before its view is filled).
        # Listings need not take turns: a streamed one reads a pull at a time, bounded.
        self.whole_listings = anyio.CapacityLimiter(1)
        self._readers: dict[Way, Callable[[Asked], Awaitable[bytes]]] = {
            Way.NODES_VIEW: self._nodes_view,
            Way.OWN_PAGE: self._own_page,
            Way.FLEET_LISTED: self._fleet_listed,
            Way.NARROWED_READ: self._narrowed,
            Way.STREAMED: self._streamed,
        }

    @property
    def budget(self) -> int:
        """The bytes of items a page carries, read per request: a reconnect may reach a server of
        another max_payload."""
        return page_budget(self.bus.max_payload)

    def answer(self, asked: Asked) -> Answer:
        """How `asked` is answered: at once when memory holds its page, else by reading a bucket.
        Raises `RequestError` for a request the verb refuses."""
        cursor = asked.query.cursor
        if cursor is not None:
            return self._by_cursor(asked, cursor)
        at_once = self._from_views(asked)
        if at_once is not None:
            return at_once
        return self._reading(self._listing_way(asked.query), asked)

    def _listing_way(self, query: Query) -> Way:
        if query.what == "nodes":
            return Way.NODES_VIEW if self.nodes is not None and self.nodes.ready else Way.FLEET_LISTED
        if (
            query.what in OWN_LISTINGS
            and self.own is not None
            and self.own.ready
            and query.narrowing().keys() == {"node"}
        ):
            return Way.OWN_PAGE
        return Way.NARROWED_READ if query.narrowing() else Way.STREAMED

    def _by_cursor(self, asked: Asked, cursor: str) -> Answer:
        continuation = self.cache.seal.open(cursor, asked.query.given(), asked.party)
        what = str(continuation.given.get("what", "registry"))
        if continuation.streamed:
            read = partial(self._closing_dropped, partial(self._continued, continuation), asked)
            return Reading(Way.STREAMED_PAGE, what, read, asked.party)
        page = self.cache.page(continuation.listing, continuation.page, asked.party)
        return AtOnce(Way.KEPT_PAGE, what, page, asked.party)

    def _from_views(self, asked: Asked) -> AtOnce | None:
        what = asked.query.what
        if what == "registry" and self.registry is not None:
            page = self.registry.answer(self.budget)
            return AtOnce(Way.REGISTRY_VIEW, what, page, asked.party) if page is not None else None
        return None

    def _reading(self, way: Way, asked: Asked) -> Reading:
        read = partial(self._closing_dropped, self._readers[way], asked)
        return Reading(way, asked.query.what, read, asked.party)

    async def _closing_dropped(self, read: Callable[[Asked], Awaitable[bytes]], asked: Asked) -> bytes:
        try:
            return await read(asked)
        finally:
            await self.cache.close_dropped()

    async def _nodes_view(self, asked: Asked) -> bytes:
        assert self.nodes is not None  # the way is chosen only with a filled view
        return await first_page(self.nodes, asked, self.cache, self.budget)

    async def _fleet_listed(self, asked: Asked) -> bytes:
        fleet = await fleet_of(self.bus, self.nodes, asked.query.node, self.whole_listings)
        return await first_page(fleet, asked, self.cache, self.budget)

    async def _own_page(self, asked: Asked) -> bytes:
        """One node's own listing: its page kept under the node's stamp, else read and kept."""
        assert self.own is not None  # the way is chosen only with kept pages
        own, what, node = self.own, asked.query.what, str(asked.query.narrowing()["node"])
        try:
            stamp = await last_stamp(self.bus, OWN_LISTINGS[what], under(node))
        except BusError as err:  # no direct get (an old copy), say: read, and kept by no stamp
            log.debug("%s of %s: no stamp (%s); read", what, node, err)
            return await self._narrowed(asked)
        listing = OwnListing(what, node, stamp, self.budget)
        page = own.page(listing)
        return page if page is not None else await self._narrowed(asked, keep=partial(own.keep, listing))

    async def _narrowed(self, asked: Asked, keep: Callable[[int, bytes], None] | None = None) -> bytes:
        """The one page of a listing one batch read answers, sorted by key; streamed instead when
        one batch read does not answer it, or it takes more than a page (so that any seat
        continues it). A one-page answer is handed to `keep` with its entries' lowest revision."""
        query = asked.query
        items = await read_narrowed(self.bus, query, max_bytes=self.budget)
        if items is None:
            return await self._streamed(asked)
        lowest = lowest_revision(items)
        forgotten = await self.forgotten_tokens(query.what)
        paginate = partial(
            paginate_listing,
            query.what,
            items,
            budget=self.budget,
            cursor_of=str,
            forgotten=forgotten,
            share=self.share_of(query),
        )
        # A large listing is encoded in a worker thread so that the event loop keeps answering others.
        pages = await anyio.to_thread.run_sync(paginate) if len(items) > IN_THREAD_FROM else paginate()
        if len(pages) > 1:
            log.debug("%s %s takes %d pages: streamed", query.what, query.narrowing(), len(pages))
            return await self._streamed(asked)
        if keep is not None:
            keep(lowest, pages[0])
        return pages[0]

    async def _streamed(self, asked: Asked) -> bytes:
        """The first page of a streamed listing; kept under a cursor unless it was the last."""
        begun = Continuation(self.cache.new_listing_id(), 1, asked.query.given(), party_of(asked.party))
        listing = await self._walking(StreamedListing.start, asked.query, begun)
        page = await self._page_of(listing, 1)
        if not listing.finished:
            self.cache.keep_streamed(begun.listing, listing, asked.party)
        return page

    async def _walking(self, how: StartWalk, query: Query, begun: Continuation) -> StreamedListing:
        """A streamed listing of `query` begun (or resumed) `how`, its walk open."""
        bucket = LISTABLE[query.what].bucket
        try:
            return await how(
                self.bus,
                query.what,
                bucket.shape.filters(**query.narrowing()),
                begun=begun,
                seal=self.cache.seal.seal,
                budget=self.budget - self.cache.seal.room(begun),
                idle=self.cache.ttl,
                forgotten=await self.forgotten_tokens(query.what),
                share=self.share_of(query),
            )
        except BusError as err:
            raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err

    def share_of(self, query: Query) -> int | None:
        """Each node's share of a listing of a collection the registry shares, every node's; None
        for any other listing."""
        if query.what != "collect" or query.node is not None or query.collection is None or self.registry is None:
            return None
        return SHARE_BYTES if query.collection in self.registry.shared_collections() else None

    async def forgotten_tokens(self, what: str) -> frozenset[str]:
        """The node tokens whose collect entries are forgotten: the fleet view's marks, else the
        fleet bucket's read now (none when it cannot be read: the listing is answered without)."""
        if what != "collect":
            return frozenset()
        if self.nodes is not None:
            return frozenset(encode_token(node) for node in self.nodes.forgotten)
        try:
            marks = await get_last_many(self.bus, fleet.FLEET, f"{fleet.GONE}.>")
        except BusError as err:
            log.debug("collect listing: gone marks not read (%s); answered without them", err)
            return frozenset()
        return frozenset(encode_token(node) for node in _gone_nodes(marks))

    async def _continued(self, continuation: Continuation, asked: Asked) -> bytes:
        """The page a streamed listing's cursor names: from the listing this seat holds when it
        answered the page before (looked up now that its turn came: it may have been dropped or
        have expired while the request waited), else resumed from the cursor (begun on another
        seat, or before this one restarted)."""
        listing = self.cache.streamed(continuation.listing, asked.party)
        if listing is None or not listing.serves(continuation):
            query = Query.model_validate(continuation.given)
            listing = await self._walking(StreamedListing.resume, query, continuation)
            self.cache.keep_streamed(continuation.listing, listing, asked.party)
        page = await self._page_of(listing, continuation.page)
        if listing.finished:
            self.cache.forget(continuation.listing)
        return page

    async def _page_of(self, listing: StreamedListing, number: int) -> bytes:
        """Page `number` of `listing`; a listing that fails is forgotten (its cursor, asked again,
        resumes it afresh)."""
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


async def read_narrowed(bus: Bus, query: Query, *, max_bytes: int) -> list[KvItem] | None:
    """The current keys of the query's bucket under its narrowing (server-side filters) by one
    batch read, flat in the bucket's size; None when it has more keys than a batch read answers,
    more than `max_bytes` of values (one page: a node's own 1,024 values of 64 KiB sent to the
    seat's connection at once, four at a time, got it closed by nats-server as a slow consumer)
    or the bucket has no direct get: such a listing is streamed, a bounded pull at a time."""
    bucket = LISTABLE[query.what].bucket
    filters = bucket.shape.filters(**query.narrowing())
    try:
        return await current_snapshot(bus, bucket, filters, batch_only=True, max_bytes=max_bytes)
    except (TooManyKeys, NoResponders):
        return None
    except BusError as err:
        raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err


def _gone_nodes(marks: list[KvItem]) -> Iterator[str]:
    """The nodes `marks` (the fleet's `gone.>` keys) mark gone; a key of no shape marks none."""
    for item in marks:
        try:
            node = fleet.parse_fleet_key(item.key).node
        except KeyShapeError:
            continue
        if node is not None and not item.deleted:
            yield node
