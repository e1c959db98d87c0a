"""The provisioning verb's request (`mesh-provisioner.provisioning`): what a party may ask, and
the limits every answer keeps to.

`VerbRequest` is a request; `What` what it lists, `FILTERS` the fields that narrow a listing,
`Name` a node's, module's or collection's name as the verb takes it. The answer's pages are
`registry.contract.pages`, loaded when a page is read: a command pays for them after its request,
not before. The shapes are the documentation's ("The verb", "Paging", "Nodes").
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

What = Literal["registry", "needs", "applied", "collect", "nodes"]
WHATS: tuple[What, ...] = ("registry", "needs", "applied", "collect", "nodes")
Verdict = Literal["healthy", "stale", "gone", "over-quota"]

MAX_NAME_BYTES = 1024
# A request's id, named in every log line of its answer: the asker's, when it passes one in this
# header (at most 32 of `A-Z a-z 0-9 - _`), else the seat's own; the answer carries it back.
REQUEST_ID_HEADER = "Mesh-Request-Id"
REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,32}", re.ASCII)
MAX_STALE_AFTER_SECONDS = 366 * 86400
# Bytes of entries a node's contributions take in a listing of a collection shared across the mesh
# (`what=collect` narrowed to it, every node's): past them, its further entries are left out, said
# as one malformed key. So no node can push the readers of a shared collection past their pages.
SHARE_BYTES = 16 * 1024
MAX_VALUE_DEPTH = 256  # levels of arrays and objects in a value the seat answers as an entry
PAGE_LEVELS = 8  # levels of a page around a value: the page, its entries, an entry, a lease
MAX_PAGE_DEPTH = MAX_VALUE_DEPTH + PAGE_LEVELS


def _short_enough(name: str) -> str:
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ValueError(f"a name is at most {MAX_NAME_BYTES} bytes (UTF-8)")
    return name


Name = Annotated[str, Field(min_length=1), AfterValidator(_short_enough)]
# A cursor carries its listing's request (names included), sealed: a few times a name's bytes at most.
MAX_CURSOR_CHARS = 32 * 1024
Cursor = Annotated[str, Field(min_length=1, max_length=MAX_CURSOR_CHARS)]
StaleAfter = Annotated[float, Field(gt=0, le=MAX_STALE_AFTER_SECONDS, allow_inf_nan=False)]


FILTERS = ("node", "module", "collection")  # a request's fields that narrow a listing


class VerbRequest(BaseModel):
    """A request: every field optional, an empty body is `{}`; which fields apply to which `what`
    is the seat's to check (`provisioner.verb.request`). Sent with the fields given only."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    what: What = "registry"
    node: Name | None = None
    module: Name | None = None
    collection: Name | None = None
    cursor: Cursor | None = None
    stale_after: StaleAfter | None = None

    def fields(self) -> dict[str, object]:
        """The request as sent: the fields given, in the order of the model."""
        return self.model_dump(exclude_unset=True)
