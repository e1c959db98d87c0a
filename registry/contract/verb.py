"""Pydantic models of the provisioning verb's wire format (`mesh-provisioner.provisioning`).

A request (`VerbRequest`) and a page of the answer (`Page`, one class per `what`, told apart by
`what`: `parse_page`), whose `entries` are rows of that `what` (`RegistryRow`, `NeedsRow`,
`AppliedRow`, `CollectRow`, `NodeRow`), whose `malformed` are `MalformedKey`s and whose `total` is
`Totals`, or `AtMost` on a streamed listing's pages before its last. `MergedAnswer` is every page of a
listing joined, as `registry.wire.verb_client.ask` returns it: a page without `page` or `next`.

The shapes are the README's ("The verb", "Paging", "Nodes"). `page_json` serialises as the seat
does: in field order, without spaces, non-ASCII as it is, so an answer parsed and written again
is the same bytes. An entry's `value` is the stored JSON as it is (anything a node wrote: it is
shown, never trusted), and a field the seat leaves out (a malformed key's `bucket` outside
`what=nodes`, a held lease's unreadable holder) is left out again. Everything else is ours:
`extra="forbid"`, so a field the contract does not know is an error, not a silent default. The
pages come from the bus: their size and depth are bounded before they are parsed
(`registry.contract.bounded_json`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

What = Literal["registry", "needs", "applied", "collect", "nodes"]
WHATS: tuple[What, ...] = ("registry", "needs", "applied", "collect", "nodes")
Verdict = Literal["healthy", "stale", "gone"]

MAX_NAME_BYTES = 1024
MAX_STALE_AFTER_SECONDS = 366 * 86400


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Sparse(_Wire):
    """A model whose optional fields the seat leaves out when it has nothing for them."""

    @model_serializer(mode="wrap")
    def _left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {field: value for field, value in data.items() if value is not None}


def _short_enough(name: str) -> str:
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ValueError(f"a name is at most {MAX_NAME_BYTES} bytes (UTF-8)")
    return name


Name = Annotated[str, Field(min_length=1), AfterValidator(_short_enough)]
Cursor = Annotated[str, Field(min_length=1, max_length=MAX_NAME_BYTES)]
StaleAfter = Annotated[float, Field(gt=0, le=MAX_STALE_AFTER_SECONDS, allow_inf_nan=False)]


class VerbRequest(BaseModel):
    """A request: every field optional, an empty body is `{}`; which fields apply to which `what`
    is the seat's to check (`provisioner.request`). Sent with the fields given only."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    what: What = "registry"
    node: Name | None = None
    module: Name | None = None
    collection: Name | None = None
    cursor: Cursor | None = None
    stale_after: StaleAfter | None = None

    def fields(self) -> dict[str, object]:
        """The request as sent: the fields given, in the order of the model."""
        return self.model_dump(exclude_unset=True)


class RegistryRow(_Wire):
    """An entry of `what=registry`: the key `<kind>`."""

    key: str
    kind: str
    revision: int
    value: JsonValue


class NeedsRow(_Wire):
    """An entry of `what=needs`: the key `<node>.<module>.<kind>.<name>`."""

    key: str
    node: str
    module: str
    kind: str
    name: str
    revision: int
    value: JsonValue


class AppliedRow(_Wire):
    """An entry of `what=applied`: the key `<node>.<module>`."""

    key: str
    node: str
    module: str
    revision: int
    value: JsonValue


class CollectRow(_Wire):
    """An entry of `what=collect`: the key `<node>.<collection>.<contributor>`."""

    key: str
    node: str
    collection: str
    contributor: str
    revision: int
    value: JsonValue


Row = RegistryRow | NeedsRow | AppliedRow | CollectRow


class HeldLease(_Sparse):
    """A lease renewed at `renewed_at`; its holder's fields when its record could be read."""

    state: Literal["held"]
    renewed_at: str
    host: str | None = None
    pid: int | None = None
    since: str | None = None
    ttl_seconds: float | None = None


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


class MalformedKey(_Sparse):
    """A key out of its bucket's shape, or whose value cannot be answered, with the reason;
    `bucket` only where an answer reads several buckets (`what=nodes`)."""

    key: str
    bucket: str | None = None
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
    entries: tuple[Any, ...]
    malformed: tuple[MalformedKey, ...]
    page: int = Field(ge=1)
    pages: int | None
    total: Total
    next: str | None


class RegistryPage(_Page):
    what: Literal["registry"]
    entries: tuple[RegistryRow, ...]


class NeedsPage(_Page):
    what: Literal["needs"]
    entries: tuple[NeedsRow, ...]


class AppliedPage(_Page):
    what: Literal["applied"]
    entries: tuple[AppliedRow, ...]


class CollectPage(_Page):
    what: Literal["collect"]
    entries: tuple[CollectRow, ...]


class NodesPage(_Page):
    what: Literal["nodes"]
    entries: tuple[NodeRow, ...]


Page = Annotated[RegistryPage | NeedsPage | AppliedPage | CollectPage | NodesPage, Field(discriminator="what")]
_PAGE: TypeAdapter[Page] = TypeAdapter(Page)

Entry = Row | NodeRow


class MergedAnswer(_Wire):
    """Every page of a listing joined: each key where it was answered last, `pages` and `total`
    from the last page (`total` counting what was kept when a key came twice)."""

    what: What
    entries: tuple[Entry, ...]
    malformed: tuple[MalformedKey, ...]
    pages: int | None
    total: Total

    def document(self) -> dict[str, Any]:
        """The answer as JSON data, in the wire's field order."""
        return self.model_dump(mode="json")


def parse_page(data: bytes | str) -> Page:
    """A page of the verb's answer; `pydantic.ValidationError` when it is not one. Its size and
    depth are the caller's to bound first."""
    return _PAGE.validate_json(data)


def page_json(page: Page | MergedAnswer) -> bytes:
    """`page` as the seat writes it: fields in order, no spaces, non-ASCII as it is."""
    return json.dumps(page.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")).encode()
