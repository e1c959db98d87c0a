"""Asking a service on the bus as a client does: the provisioning verb, a vault's verbs.

A service answers with the micro service API's error headers (`Nats-Service-Error-Code`,
`Nats-Service-Error`) when it refuses; `ask_service` raises those as `ServiceError`.

The provisioning verb's pages are followed by one follower, `follow`, into one
`registry.contract.MergedAnswer` (see docs/verb.md, "Paging"): every page's entries and malformed
keys joined, the last page's `pages` and `total` (a streamed listing's earlier pages do not know
them yet). Its rules, whoever follows (`mesh-provisioner query`, `top`, the node client, the
provider SDK, the benchmarks):

- a key answered twice (written again during a streamed listing) is kept where it was answered
  last, with its last value, entry or malformed alike (a malformed key by its bucket and key);
  `total` then counts what was kept;
- each page is read by `registry.contract.parse_page`: at most `MAX_PAGE_BYTES` (the largest NATS
  payload) and `MAX_PAGE_DEPTH` levels deep (the deepest value the seat answers, and the page
  around it), and of the contract's shape for the `what` asked; any other answer is a `BusError`;
- at most `MAX_PAGES` pages: a seat whose cursors never end is a `BusError`, not a client that
  follows them for ever.

`answer_of` and `answer_patiently` return the typed answer, `page_of` one typed page; `ask`,
`ask_patiently` and `ask_page` the same as JSON data, as docs/verb.md documents it.
`answer_patiently` is for a person waiting at a terminal: a seat that is restarting, busy or gone
is asked again with short attempts until an overall deadline, and a listing whose pages the seat
forgot (410) is started again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio

# The answer's pages are reached through the package, which loads them at the first reply: what a
# command does before its request pays for none of them.
from registry import contract
from registry.contract import WHATS, JsonRefused, VerbRequest, What, buckets
from registry.errors import BusError, BusTimeout, NoResponders, ServiceError
from registry.wire.bus import Bus, Message

if TYPE_CHECKING:
    from registry.contract import Entry, MalformedKey, MergedAnswer, Page, Total

log = logging.getLogger(__name__)

ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"
# Pages one answer may take: a million keys are about 170 pages at nats-server's default payload
# (1 MiB) and 11,000 at 16 KiB; past this a seat whose cursors never end is stopped.
MAX_PAGES = 100_000

Request = VerbRequest | Mapping[str, object] | None
PageAsker: TypeAlias = Callable[[Mapping[str, object]], Awaitable["Page"]]
OnPage = Callable[[int, int | None], None]  # the page read, the pages in all (None: not known yet)


async def ask_service(bus: Bus, subject: str, body: bytes, *, reply_wait: timedelta | None = None) -> Message:
    """The service's reply to `body`; `ServiceError` when it answers with the error headers."""
    operation = f"ask {subject}"
    reply = await bus.request(subject, body, reply_wait=reply_wait, operation=operation)
    raise_for_service_error(operation, reply)
    return reply


def raise_for_service_error(operation: str, reply: Message) -> None:
    if ERROR_CODE_HEADER in reply.headers or ERROR_HEADER in reply.headers:
        raise ServiceError(operation, reply.headers.get(ERROR_CODE_HEADER, "?"), reply.headers.get(ERROR_HEADER, ""))


async def answer_of(
    bus: Bus,
    request: Request = None,
    *,
    reply_wait: timedelta | None = None,
    on_page: OnPage | None = None,
    max_pages: int = MAX_PAGES,
) -> MergedAnswer:
    """The verb's whole answer to `request`, all pages followed (`BusError` past `max_pages`). Raises
    `ServiceError` when the verb refuses, `BusError` when it cannot be asked or its answer cannot be used."""
    asker = partial(page_of, bus, reply_wait=reply_wait)
    return await follow(fields_of(request), asker, on_page=on_page, max_pages=max_pages)


async def ask(bus: Bus, request: Request = None, *, reply_wait: timedelta | None = None) -> dict[str, Any]:
    """`answer_of` as JSON data."""
    return (await answer_of(bus, request, reply_wait=reply_wait)).document()


def fields_of(request: Request) -> dict[str, object]:
    """A request as sent: a `VerbRequest`'s fields given, or the fields as they are."""
    if isinstance(request, VerbRequest):
        return request.fields()
    return dict(request or {})


async def follow(
    request: Mapping[str, object], ask_one: PageAsker, *, on_page: OnPage | None = None, max_pages: int = MAX_PAGES
) -> MergedAnswer:
    """Every page of the answer to `request` joined (see the module's rules), `on_page` told after
    each; `BusError` past `max_pages` pages."""
    page = await ask_one(request)
    joined = _Joined()
    while True:
        joined.add(page)
        if on_page is not None:
            on_page(page.page, page.pages)
        if page.next is None:
            return joined.answer(page)
        if joined.pages >= max_pages:
            raise BusError(f"ask {buckets.VERB_SUBJECT}", f"the answer goes on past {max_pages:,} pages")
        page = await ask_one({**request, "cursor": page.next})


class _Joined:
    """Entries and malformed keys by key, each key where it was answered last."""

    def __init__(self) -> None:
        self.entries: dict[object, Entry] = {}
        self.malformed: dict[object, MalformedKey] = {}
        self.repeated = False
        self.pages = 0

    def add(self, page: Page) -> None:
        self.pages += 1
        entries = _by_key(page)
        malformed: dict[object, MalformedKey] = {(bad.bucket, bad.key): bad for bad in page.malformed}
        if self._all_new(page, entries, malformed):  # as nearly every page is: joined in C, not key by key
            self.entries.update(entries)
            self.malformed.update(malformed)
            return
        for entry in page.entries:
            self.entries[self._moved(entry)] = entry
        for bad in page.malformed:
            self.malformed[self._moved(bad)] = bad

    def _all_new(self, page: Page, entries: dict[object, Entry], malformed: dict[object, MalformedKey]) -> bool:
        """No key of the page answered twice in it, nor already joined."""
        keys = entries.keys() | malformed.keys()
        # A dict's view iterates the smaller side; `set.isdisjoint(dict)` would walk every key
        # joined so far at each page, quadratic in a long listing.
        return (
            len(keys) == len(page.entries) + len(page.malformed)
            and self.entries.keys().isdisjoint(keys)
            and self.malformed.keys().isdisjoint(keys)
        )

    def _moved(self, item: Entry | MalformedKey) -> object:
        """The item's key, no longer where it was answered before; a node row has none."""
        if isinstance(item, contract.NodeRow):
            return object()
        key = (item.bucket if isinstance(item, contract.MalformedKey) else None, item.key)
        was_entry = self.entries.pop(key, None) is not None
        was_malformed = self.malformed.pop(key, None) is not None
        self.repeated = self.repeated or was_entry or was_malformed
        return key

    def answer(self, last: Page) -> MergedAnswer:
        entries, malformed = list(self.entries.values()), list(self.malformed.values())
        total: Total = contract.Totals(entries=len(entries), malformed=len(malformed)) if self.repeated else last.total
        # Built of pages already validated: not validated again, entry by entry.
        return contract.MergedAnswer.model_construct(
            what=last.what, entries=entries, malformed=malformed, pages=last.pages, total=total
        )


def _by_key(page: Page) -> dict[object, Entry]:
    """The page's entries by the key `_Joined` knows them by; a node row has none, so never moves."""
    if isinstance(page, contract.NodesPage):
        return {object(): row for row in page.entries}
    return {(None, entry.key): entry for entry in page.entries}


FIRST_ATTEMPT = timedelta(seconds=2)
PAUSES = (0.1, 0.2, 0.5, 1.0)  # seconds between asking a seat that is not there, growing


async def answer_patiently(
    bus: Bus, request: Request = None, *, within: timedelta, attempt: timedelta = FIRST_ATTEMPT
) -> MergedAnswer:
    """`answer_of`, retried until `within` has passed: a page not answered within its attempt
    (`attempt`, doubled after each timeout, for a large listing's slow first page), nobody serving
    the verb, or a 503 is asked again; a 410 (the seat forgot the listing: it restarted, or the
    cursor expired) starts the listing again. Raises `BusTimeout` "no answer from the seat within
    N s" (with why nobody answered, when that was the last), or the `ServiceError` of any other
    refusal."""
    retry = _Retry(attempt)
    fields = fields_of(request)
    with anyio.move_on_after(within.total_seconds()):
        while True:
            try:
                return await follow(fields, partial(_page_patiently, bus, retry))
            except ServiceError as err:
                if err.code != "410":
                    raise
                await retry.pause("the seat forgot the listing (410); starting it again")
    silence = f" (last: {retry.silence})" if retry.silence else ""
    raise BusTimeout(
        f"ask {buckets.VERB_SUBJECT}", f"no answer from the seat within {within.total_seconds():g} s{silence}"
    )


async def ask_patiently(
    bus: Bus, request: Request = None, *, within: timedelta, attempt: timedelta = FIRST_ATTEMPT
) -> dict[str, Any]:
    """`answer_patiently` as JSON data."""
    return (await answer_patiently(bus, request, within=within, attempt=attempt)).document()


async def _page_patiently(bus: Bus, retry: _Retry, request: Mapping[str, object]) -> Page:
    while True:
        try:
            return await page_of(bus, request, reply_wait=retry.reply_wait)
        except BusTimeout:
            retry.timed_out()
        except NoResponders as err:
            retry.silence = err.reason
            await retry.pause(f"{err.reason}; asking again")
        except ServiceError as err:
            if err.code != "503":
                raise
            retry.silence = f"the seat is busy ({err.description})"
            await retry.pause(f"{retry.silence}; asking again")


class _Retry:
    """How long the next attempt waits for its answer, and the pause before asking a seat that is not there."""

    def __init__(self, attempt: timedelta) -> None:
        self.reply_wait = attempt
        self.silence = ""  # why nobody answered, when that was the last attempt's outcome
        self._pauses = 0

    def timed_out(self) -> None:
        log.info("no answer within %g s; asking again", self.reply_wait.total_seconds())
        self.reply_wait *= 2
        self.silence = ""

    async def pause(self, why: str) -> None:
        (log.info if self._pauses == 0 else log.debug)("%s", why)
        await anyio.sleep(PAUSES[min(self._pauses, len(PAUSES) - 1)])
        self._pauses += 1


async def page_of(bus: Bus, request: Mapping[str, object], *, reply_wait: timedelta | None = None) -> Page:
    """One page: the verb's answer to `request` as it is sent; `BusError` when it cannot be used."""
    operation = f"ask {buckets.VERB_SUBJECT}"
    reply = await ask_service(bus, buckets.VERB_SUBJECT, json.dumps(request).encode(), reply_wait=reply_wait)
    try:
        return contract.parse_page(reply.data, _what_of(request))
    except JsonRefused as err:
        raise BusError(operation, f"the answer cannot be used: {err.reason}") from None


async def ask_page(bus: Bus, request: Mapping[str, object], *, reply_wait: timedelta | None = None) -> dict[str, Any]:
    """`page_of` as JSON data."""
    return (await page_of(bus, request, reply_wait=reply_wait)).model_dump()


def _what_of(request: Mapping[str, object]) -> What | None:
    """The `what` a page must answer: the request's, `registry` when it starts a listing without
    one, or whichever the page says when a cursor alone continues one."""
    what = request.get("what", None if "cursor" in request else "registry")
    return next((known for known in WHATS if known == what), None)
