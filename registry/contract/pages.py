"""The provisioning verb's answer: a page (`Page`: a class per `what`, `PAGES`), whose `entries`
are rows of that `what` (`RegistryRow`, `NeedsRow`, `AppliedRow`, `CollectRow`, `NodeRow`), whose
`malformed` are `MalformedKey`s and whose `total` is `Totals`, or `AtMost` on a streamed
listing's pages before its last. `MergedAnswer` is every page of a listing joined, as
`registry.wire.answer_of` returns it: a page without `page` or `next`. `parse_page` reads a page
from the bus, bounded in size and depth before it is parsed. The request is
`registry.contract.verb`.

The shapes are the documentation's ("The verb", "Paging", "Nodes"). `page_json` serialises as the
seat does: in field order, without spaces, non-ASCII as it is, so a page parsed and written again
is the same bytes (its values being compact JSON, as the clients write them). An entry's `value`
is the stored JSON as it is (anything a node wrote: shown, never trusted), and a field the seat
leaves out (a malformed key's `bucket` outside `what=nodes`, a held lease's unreadable holder, the
revision a seat older than it does not answer) is left out again. Everything else is ours:
`extra="forbid"`, so a field the contract does not know is an error, not a silent default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    SkipValidation,
    TypeAdapter,
    ValidationError,
)

from registry.contract.bounded_json import MAX_PAGE_BYTES, JsonRefused, read_json
from registry.contract.verb import MAX_PAGE_DEPTH, Verdict, What


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _is_none(value: object) -> bool:
    return value is None


# A field the seat leaves out when it has nothing for it, and is left out again.
Omitted = Field(exclude_if=_is_none)


def _as_parsed(value: JsonValue) -> Any:
    return value


# A stored value as the seat spliced it in: parsed JSON of up to MAX_VALUE_DEPTH levels, deeper
# than pydantic validates or serialises, so it is taken and given back as parsed.
StoredValue = Annotated[JsonValue, SkipValidation, PlainSerializer(_as_parsed, return_type=Any)]


# An entry row is a frozen dataclass with slots, validated by pydantic like the models around it:
# a whole listing is every row of a bucket, and pydantic makes such rows about twice as fast as
# models (100,000 needs rows: 0.38 s against 0.83 s, as fast as json.loads alone).
_ROW_CONFIG = ConfigDict(extra="forbid", defer_build=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryRow:
    """An entry of `what=registry`: the key `<kind>`, its revision (the entry's stream sequence;
    none from a seat older than the field) and its value."""

    __pydantic_config__ = _ROW_CONFIG

    key: str
    kind: str
    revision: Annotated[int | None, Omitted] = None
    value: StoredValue


@dataclass(frozen=True, slots=True, kw_only=True)
class NeedsRow:
    """An entry of `what=needs`: the key `<node>.<module>.<kind>.<name>`."""

    __pydantic_config__ = _ROW_CONFIG

    key: str
    node: str
    module: str
    kind: str
    name: str
    revision: Annotated[int | None, Omitted] = None
    value: StoredValue


@dataclass(frozen=True, slots=True, kw_only=True)
class AppliedRow:
    """An entry of `what=applied`: the key `<node>.<module>`."""

    __pydantic_config__ = _ROW_CONFIG

    key: str
    node: str
    module: str
    revision: Annotated[int | None, Omitted] = None
    value: StoredValue


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectRow:
    """An entry of `what=collect`: the key `<node>.<collection>.<contributor>`; `forgotten` when its
    node is marked gone (every other node's collections leave it out; none from a seat older than
    the field, or for a node not marked)."""

    __pydantic_config__ = _ROW_CONFIG

    key: str
    node: str
    collection: str
    contributor: str
    revision: Annotated[int | None, Omitted] = None
    value: StoredValue
    forgotten: Annotated[bool | None, Omitted] = None


Row = RegistryRow | NeedsRow | AppliedRow | CollectRow


class HeldLease(_Wire):
    """A lease renewed at `renewed_at`; its holder's fields when its record could be read."""

    state: Literal["held"]
    renewed_at: str
    host: Annotated[str | None, Omitted] = None
    pid: Annotated[int | None, Omitted] = None
    since: Annotated[str | None, Omitted] = None
    ttl_seconds: Annotated[float | None, Omitted] = None


class ReleasedLease(_Wire):
    state: Literal["released"]
    released_at: str


class NoLease(_Wire):
    state: Literal["none"]


Lease = Annotated[HeldLease | ReleasedLease | NoLease, Field(discriminator="state")]


class NodeRow(_Wire):
    """An entry of `what=nodes`: a node's verdict, how it is known, and its applied counts."""

    node: str
    verdict: Verdict
    because: str
    lease: Lease
    applied: int
    pending: int
    changed_at: str | None


Entry = Row | NodeRow


@cache  # built at first use, not at import: a command's start-up pays for no adapter it never uses
def _entry_adapter() -> TypeAdapter[Entry]:
    return TypeAdapter(Entry)


def entry_data(entry: Entry) -> dict[str, Any]:
    """An entry as JSON data, as the seat answers it: fields in order, those it leaves out left out."""
    return _entry_adapter().dump_python(entry)  # type: ignore[no-any-return]


class MalformedKey(_Wire):
    """A key out of its bucket's shape, or whose value cannot be answered, with the reason;
    `bucket` only where an answer reads several buckets (`what=nodes`)."""

    key: str
    bucket: Annotated[str | None, Omitted] = None
    reason: str


class Totals(_Wire):
    entries: int
    malformed: int


class AtMost(_Wire):
    """A streamed listing's total before its last page: at most this many entries and malformed
    keys, keys written during the listing aside."""

    at_most: int


Total = Totals | AtMost


class _Page(_Wire):
    what: What
    entries: Sequence[Entry]
    malformed: list[MalformedKey]
    page: int = Field(ge=1)
    pages: int | None
    total: Total
    next: str | None


class RegistryPage(_Page):
    what: Literal["registry"]
    entries: list[RegistryRow]


class NeedsPage(_Page):
    what: Literal["needs"]
    entries: list[NeedsRow]


class AppliedPage(_Page):
    what: Literal["applied"]
    entries: list[AppliedRow]


class CollectPage(_Page):
    what: Literal["collect"]
    entries: list[CollectRow]


class NodesPage(_Page):
    what: Literal["nodes"]
    entries: list[NodeRow]


Page = RegistryPage | NeedsPage | AppliedPage | CollectPage | NodesPage
PAGES: Mapping[What, type[Page]] = {
    "registry": RegistryPage,
    "needs": NeedsPage,
    "applied": AppliedPage,
    "collect": CollectPage,
    "nodes": NodesPage,
}


@cache
def _any_page() -> TypeAdapter[Page]:
    return TypeAdapter(Annotated[Page, Field(discriminator="what")])


class MergedAnswer(_Wire):
    """Every page of a listing joined: each key where it was answered last, `pages` and `total`
    from the last page (`total` counting what was kept when a key came twice)."""

    what: What
    entries: list[Entry]
    malformed: list[MalformedKey]
    pages: int | None
    total: Total

    def document(self) -> dict[str, Any]:
        """The answer as JSON data, in the wire's field order."""
        return self.model_dump()


def parse_page(data: bytes, what: What | None = None) -> Page:
    """A page of the verb's answer to a request of `what` (None: whichever it says), at most
    `MAX_PAGE_BYTES` long and `MAX_PAGE_DEPTH` levels deep; `JsonRefused` saying why it is not one.

    Parsed and validated in one pass by pydantic, whose parser stops short of the deepest value the
    seat answers: such a page is read by the bounded reader, then validated."""
    if len(data) > MAX_PAGE_BYTES:
        raise JsonRefused(f"it is {len(data):,} bytes long, more than the {MAX_PAGE_BYTES:,} allowed")
    try:
        return _validated(data, what, from_json=True)
    except ValidationError as err:
        if not _too_deep_to_parse(err):
            raise JsonRefused(_described(err)) from None
    try:
        return _validated(read_json(data, max_bytes=MAX_PAGE_BYTES, max_depth=MAX_PAGE_DEPTH), what, from_json=False)
    except ValidationError as err:
        raise JsonRefused(_described(err)) from None


def _validated(data: object, what: What | None, *, from_json: bool) -> Page:
    if what is None:
        return _any_page().validate_json(data) if from_json else _any_page().validate_python(data)  # type: ignore[arg-type]
    page_type = PAGES[what]
    return page_type.model_validate_json(data) if from_json else page_type.model_validate(data)  # type: ignore[arg-type]


def _too_deep_to_parse(err: ValidationError) -> bool:
    first = err.errors(include_input=False)[0]
    return first["type"] == "json_invalid" and "recursion limit" in first["msg"]


def _described(err: ValidationError) -> str:
    """What is wrong with a page, never quoting it."""
    first = err.errors(include_input=False, include_url=False)[0]
    where = ".".join(map(str, first["loc"]))
    return f"it is not a page of the verb's answer: {where + ': ' if where else ''}{first['msg']}"


def page_json(page: Page | MergedAnswer) -> bytes:
    """`page` as the seat writes it: fields in order, no spaces, non-ASCII as it is."""
    return json.dumps(page.model_dump(), ensure_ascii=False, separators=(",", ":")).encode()
