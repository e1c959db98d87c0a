"""The provisioning verb: what a request may ask, and the entries and malformed keys it gets back.

Request (a JSON object; an empty body is `{}`):

    what        "registry" (default), "needs", "applied" or "collect"
    node        narrow to one node                        (needs, applied, collect)
    module      narrow to one module; for collect, the contributor   (needs, applied, collect)
    collection  narrow to one collection                  (collect)
    cursor      continue a paged listing: the `next` of the previous page

Names are plain names, never escaped tokens. A field that does not apply to `what`, an unknown
field or `what`, or a body that is not a JSON object is refused with a service error (400) and a
JSON body `{"error": "..."}`.

Each entry is `{"key": ..., <the parts its bucket's shape names>, "value": <the stored JSON>}`:
registry `kind`; needs `node, module, kind, name`; applied `node, module`; collect `node,
collection, contributor`. A key out of its bucket's shape, a value that is not strict JSON
(UTF-8, no NaN or Infinity), or an entry too large for one answer message is listed in
`malformed` as `{"key": ..., "reason": ...}` instead. A registry value that is JSON but not a
registry entry the server would write is still reported as an entry, as it is stored: the
registry is only ever written by this server, and a reader can see it for what it is.

Narrowing is done by the server through subject filters of the bucket's key shape, so a query
for one node reads only that node's keys; keys out of shape under the narrowed tokens are kept
(`node=n1` reports a malformed `n1.bad`). Entries and malformed keys are sorted by key.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provisioner.errors import RequestError, Unavailable
from provisioner.paging import Encoded, PageCache, build_pages, page_budget
from registry import buckets
from registry.buckets import Bucket
from registry.bus import Bus, BusError
from registry.errors import KeyShapeError
from registry.kv import KvItem, snapshot

if TYPE_CHECKING:
    from provisioner.registry_view import RegistryView

log = logging.getLogger(__name__)

IN_THREAD_FROM = 2000  # items; below this a thread costs more than it spares the loop

What = Literal["registry", "needs", "applied", "collect"]
FILTERS = ("node", "module", "collection")


@dataclass(frozen=True)
class Listable:
    """A `what`: its bucket, and which request field narrows which part of the key."""

    bucket: Bucket
    narrows: Mapping[str, str]


LISTABLE: Mapping[str, Listable] = {
    "registry": Listable(buckets.REGISTRY, {}),
    "needs": Listable(buckets.NEEDS, {"node": "node", "module": "module"}),
    "applied": Listable(buckets.APPLIED, {"node": "node", "module": "module"}),
    "collect": Listable(buckets.COLLECT, {"node": "node", "module": "contributor", "collection": "collection"}),
}


class Query(BaseModel):
    """A validated request of the verb."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    what: What = "registry"
    node: str | None = Field(default=None, min_length=1)
    module: str | None = Field(default=None, min_length=1)
    collection: str | None = Field(default=None, min_length=1)
    cursor: str | None = Field(default=None, min_length=1)

    def narrowing(self) -> dict[str, str]:
        """The key parts this query narrows to, named as its bucket's shape names them."""
        narrows = LISTABLE[self.what].narrows
        return {part: value for field, part in narrows.items() if (value := getattr(self, field)) is not None}

    def given(self) -> dict[str, str]:
        """The fields the requester gave, besides the cursor: what a continuation must repeat."""
        return {f: getattr(self, f) for f in sorted(self.model_fields_set) if f != "cursor"}


def parse_request(body: bytes) -> Query:
    """The query in `body`, or a `RequestError` that says what is wrong with it."""
    if not body.strip():
        return Query()
    try:
        document = _STRICT_JSON.decode(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise RequestError(f"the body is not JSON: {err}") from None
    if not isinstance(document, dict):
        raise RequestError(f"the body must be a JSON object, not {_json_type(document)}")
    try:
        query = Query.model_validate(document)
    except ValidationError as err:
        raise RequestError(_describe(err)) from None
    if query.cursor is None:  # a continuation is checked against the listing it continues instead
        _check_applies(query)
    return query


def _check_applies(query: Query) -> None:
    applicable = LISTABLE[query.what].narrows
    for field in FILTERS:
        if getattr(query, field) is not None and field not in applicable:
            takes = ", ".join(applicable) or "no filter"
            raise RequestError(f"'{field}' does not apply to what={query.what!r}; it takes {takes}")


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "extra_forbidden":
        return f"unknown field {field!r}; a request has {', '.join(Query.model_fields)}"
    if field == "what" and first["type"] == "literal_error":
        return f"unknown what {first['input']!r}; one of {', '.join(LISTABLE)}"
    return f"field {field!r}: {first['msg']}"


def _json_type(document: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(document), "null")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Plain tokens: their decoded parts are substrings of the key, so neither needs JSON escaping.
_JSON_SAFE_KEY = re.compile(r"[-/_.a-zA-Z0-9]+")
_STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class Verb:
    """Answers requests: at once from memory where it can (a cursor's page, the registry view),
    otherwise by listing the bucket. Raises `RequestError` for a request the verb refuses."""

    def __init__(self, bus: Bus, cache: PageCache, registry: RegistryView | None = None) -> None:
        self.bus = bus
        self.cache = cache
        self.registry = registry

    def at_once(self, body: bytes) -> bytes | Query:
        """The answer when no bucket needs reading, else the parsed query for `by_listing`."""
        query = parse_request(body)
        if query.cursor is not None:
            return self.cache.page(query.cursor, query.given())
        if query.what == "registry" and self.registry is not None:
            whole = self.registry.answer(page_budget(self.bus.nc.max_payload))
            if whole is not None:
                return whole
        return query

    async def by_listing(self, query: Query) -> bytes:
        """The first page of a new listing; the pages after it are kept under a cursor."""
        items = await list_keys(self.bus, query)
        listing_id = self.cache.new_listing_id()
        budget = page_budget(self.bus.nc.max_payload)
        paginate = partial(paginate_listing, query.what, items, budget=budget, listing_id=listing_id)
        # A large listing is encoded in a worker thread so that the event loop keeps answering others.
        pages = await anyio.to_thread.run_sync(paginate) if len(items) > IN_THREAD_FROM else paginate()
        log.debug("listed %s %s: %d pages", query.what, query.narrowing() or "everything", len(pages))
        if len(pages) > 1:
            self.cache.keep(listing_id, query.given(), pages[1:])
        return pages[0]


def paginate_listing(what: str, items: list[KvItem], *, budget: int, listing_id: str) -> list[bytes]:
    """The pages of a listing (consumes `items`)."""
    encoded = encode_listing(what, items, max_item_bytes=budget)
    return build_pages(what, encoded, budget=budget, listing_id=listing_id)


async def list_keys(bus: Bus, query: Query) -> list[KvItem]:
    """The current keys of the query's bucket under its narrowing (server-side filters)."""
    bucket = LISTABLE[query.what].bucket
    filters = bucket.shape.filters(**query.narrowing())
    try:
        return await snapshot(bus, bucket.name, filters)
    except BusError as err:
        raise Unavailable(f"reading bucket {bucket.name} failed, retry: {err.reason}") from err


def encode_listing(what: str, items: list[KvItem], *, max_item_bytes: int) -> Encoded:
    """Each item as the JSON of an entry or of a malformed key. Consumes `items` to keep memory low."""
    shape = LISTABLE[what].bucket.shape
    items.sort(key=lambda item: item.key, reverse=True)
    encoded = Encoded([], [])
    while items:
        item = items.pop()
        try:
            parts = shape.parse(item.key)
        except KeyShapeError as err:
            encoded.malformed.append(malformed(item.key, err.reason))
            continue
        problem = json_problem(item.value)
        if problem is not None:
            encoded.malformed.append(malformed(item.key, problem))
            continue
        piece = entry(item.key, parts, item.value)
        if len(piece) > max_item_bytes:
            reason = f"the entry is {len(piece)} bytes, more than one answer message carries ({max_item_bytes})"
            encoded.malformed.append(malformed(item.key, reason))
            continue
        encoded.entries.append(piece)
    return encoded


def json_problem(value: bytes) -> str | None:
    """Why `value` is not strict JSON, or None when it is."""
    try:
        _STRICT_JSON.decode(value.decode("utf-8"))
    except UnicodeDecodeError:
        return "the value is not UTF-8 text"
    except ValueError as err:
        return f"the value is not JSON: {err}"
    return None


def entry(key: str, parts: Mapping[str, str], value: bytes) -> bytes:
    """An entry's JSON, the stored value spliced in as it is (it was checked to be JSON)."""
    if _JSON_SAFE_KEY.fullmatch(key):  # the key and its parts need no JSON escaping: skip the encoder
        fields = "".join(f',"{field}":"{text}"' for field, text in parts.items())
        head = f'{{"key":"{key}"{fields},"value":'.encode()
    else:
        head = _dumps({"key": key, **parts})[:-1] + b',"value":'
    return head + value.strip() + b"}"


def malformed(key: str, reason: str) -> bytes:
    return _dumps({"key": key, "reason": reason})


def _dumps(document: Mapping[str, Any]) -> bytes:
    return _COMPACT_JSON.encode(document).encode("utf-8")
