"""A request of the verb: what it may ask, validated, and which bucket and key parts it reads.

The request's fields and the error contract are described in docs/verb.md ("Request"). A body
that is not a JSON object, an unknown field or `what`, or a field that does not apply to `what`
is a `RequestError` (answered 400) whose reason says what was wrong.

Hostile input is bounded before it costs anything: a body over `MAX_REQUEST_BYTES` is refused
unread, JSON nested deeper than `MAX_REQUEST_DEPTH` is refused before it is parsed, a name over
`registry.contract.MAX_NAME_BYTES` (UTF-8) or a `null` field is refused (a cursor is opened by
`provisioner.verb.cursors.CursorSeal` alone). Whatever of the input a reason quotes is cut short (`_quoted`).

Who asks decides the scope (`scoped`), never the body: the bus tells the party
(`registry.access.parties.PartyMap.who_asks`), and a node is answered about its own keys only.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from provisioner.errors import Forbidden, RequestError
from registry.access import Kind, Party
from registry.contract import FILTERS, Bucket, JsonRefused, VerbRequest, buckets, read_json
from registry.serving import capped

__all__ = [
    "FILTERS",
    "LISTABLE",
    "MAX_REQUEST_BYTES",
    "MAX_REQUEST_DEPTH",
    "Asked",
    "Listable",
    "Query",
    "parse_request",
    "scoped",
]


MAX_REQUEST_BYTES = 64 * 1024
MAX_REQUEST_DEPTH = 64  # levels of arrays and objects; a request needs 1
# A node asks the same few requests again and again: their queries are kept by body, so that the
# JSON and the model are read once (70% of the verb's own time answering what=registry).
# A body past `KEPT_BODY_BYTES` (a cursor's, unique to its page) is read every time.
KEPT_BODY_BYTES = 160
KEPT_QUERIES = 256


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
    # Each node's lease and applied counts (`provisioner.verb.nodes`): read from the leases bucket too.
    "nodes": Listable(buckets.APPLIED, {"node": "node"}),
}


class Query(VerbRequest):
    """A validated request of the verb: the contract's request (`registry.contract.VerbRequest`),
    and what it reads."""

    def narrowing(self) -> dict[str, str]:
        """The key parts this query narrows to, named as its bucket's shape names them."""
        narrows = LISTABLE[self.what].narrows
        return {part: value for field, part in narrows.items() if (value := getattr(self, field)) is not None}

    def given(self) -> dict[str, str]:
        """The fields the requester gave, besides the cursor: what a continuation must repeat."""
        return {f: getattr(self, f) for f in sorted(self.model_fields_set) if f != "cursor"}


@dataclass(frozen=True)
class Asked:
    """A query as scoped to the party that asked it (`None`: from inside the data account)."""

    query: Query
    party: Party | None


def scoped(query: Query, party: Party | None, shared: Container[str] = ()) -> Query:
    """`query` as `party` may have it answered: a node about its own keys (needs, applied and
    collect narrowed to its node; a collection the registry `shared` across the mesh about every
    node's contributions to it), a party that sees the mesh about the mesh, any other (a writer)
    about nothing. A continuation is left as it is: its listing was scoped when it started, and
    its cursor serves only the party that started it."""
    if party is None or party.sees_the_mesh:
        return query
    if party.kind != Kind.NODE:
        raise Forbidden(
            f"{capped(party.label, 64)} is answered nothing: a {party.kind} party is granted no verb "
            "(nodes are answered about their own keys, operators and providers about the mesh)"
        )
    if query.node is not None and query.node != party.name:
        raise Forbidden(
            "a node is answered about its own keys; "
            f"asked by node {capped(party.name, 64)} for node {capped(query.node, 64)}"
        )
    if query.what == "registry" or query.cursor is not None:
        return query
    if query.what == "collect" and query.node is None and query.collection in shared:
        return query
    return query.model_copy(update={"node": party.name})


def parse_request(body: bytes) -> Query:
    """The query in `body`, or a `RequestError` that says what is wrong with it."""
    return _kept_query(body) if len(body) <= KEPT_BODY_BYTES else _query_of(body)


@lru_cache(maxsize=KEPT_QUERIES)
def _kept_query(body: bytes) -> Query:
    return _query_of(body)  # a refusal raises, and is not kept


def _query_of(body: bytes) -> Query:
    if len(body) > MAX_REQUEST_BYTES:
        raise RequestError(f"the request is {len(body)} bytes; a request is at most {MAX_REQUEST_BYTES}")
    if not body.strip():
        return Query()
    try:
        document = read_json(body, max_bytes=MAX_REQUEST_BYTES, max_depth=MAX_REQUEST_DEPTH)
    except JsonRefused as err:
        raise RequestError(f"the body {err.reason.removeprefix('it ')}") from None
    if not isinstance(document, dict):
        raise RequestError(f"the body must be a JSON object, not {_json_type(document)}")
    nulls = [field for field in Query.model_fields if field in document and document[field] is None]
    if nulls:
        raise RequestError(f"field {nulls[0]!r} is null; leave a field out to not give it")
    try:
        query = Query.model_validate(document)
    except ValidationError as err:
        raise RequestError(_describe(err)) from None
    if query.cursor is None:  # a continuation is checked against the listing it continues instead
        try:
            _check_applies(query)
        except RequestError as err:
            err.what = query.what
            raise
    return query


def _check_applies(query: Query) -> None:
    if query.stale_after is not None and query.what != "nodes":
        raise RequestError(f"'stale_after' does not apply to what={query.what!r}; only to what='nodes'")
    applicable = LISTABLE[query.what].narrows
    for field in FILTERS:
        if getattr(query, field) is not None and field not in applicable:
            takes = ", ".join(applicable) or "no filter"
            raise RequestError(f"'{field}' does not apply to what={query.what!r}; it takes {takes}")


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "extra_forbidden":
        return f"unknown field {_quoted(field)}; a request has {', '.join(Query.model_fields)}"
    if field == "what" and first["type"] == "literal_error":
        return f"unknown what {_quoted(first['input'])}; one of {', '.join(LISTABLE)}"
    return f"field {_quoted(field)}: {first['msg'].removeprefix('Value error, ')}"


def _quoted(value: Any, limit: int = 64) -> str:
    """A requester's value quoted in a reason, never longer than `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _json_type(document: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(document), "null")
