"""Writes to the hub that wait for the link: what is stale, since when, and how the client knows.

A node at a site writes its keys (needs, collect, applied, its lease) at the hub, through the
site's import (`docs/sites-write-path.md`, fail fast); its reads are answered by the site's
mirrors. With the leaf link cut, a write is answered `NoResponders` at once (3 ms: nobody behind
the import); with the link silent but not yet dropped, it times out. Neither is assumed from the
connection, which stays up (the node's own server is there): the client knows the link is down
because a write said so, and says which write and when.

"Stale" means exactly this: what the hub holds of the node is older than what the node did. The
env files are not stale (the site's mirrors answered their values, as of the mirror's last
message from the hub); what waits is

- each bucket whose converge was answered so (`needs`, `collect`, `applied`): its keys not yet
  written, and for applied the records themselves, which hold digests, states and the change
  actions' outcomes, never a value: the next reconcile writes them as they were, their
  `changed_at` when they were applied, and takes them as the previous records, so a change
  action that ran during the cut is not run again for the same file;
- the lease (`lease`): its renewals fail, so the hub sees it expire after its ttl.

Each part is kept in the env folder (`RECORD`, the node's record `state.records.WAITING`) with
`since` (the first write refused in this outage, kept while it keeps failing) and `how` (the
write and the answer); a part is removed by the next write of its own that succeeds, and the file
with the last part. `status` reads it.

`link_down` tells such an answer from the others: `NoRoute` (this account does not import the
subject: grants, not a link) and JetStream errors (refusals, `refusals`) are not waits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from provisioner_client.errors import MaterializeError, capped
from provisioner_client.state import records
from provisioner_client.state.records import WaitingDocument, WaitingPart
from registry.errors import BusError, BusTimeout, NoResponders, NoRoute

log = logging.getLogger(__name__)

RECORD = records.WAITING.name
LEASE = "lease"
MAX_KEYS = 50  # keys named per part; then "... and N more"

Part = WaitingPart  # one kind of write that waits, as it is kept


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def link_down(err: BaseException) -> str | None:
    """What a write's failure says of the link to the hub (`NoResponders`, `timed out`), or None
    when it says something else. A converge's `ConvergeError` is judged by the error it wraps."""
    cause = err.__cause__ if isinstance(err.__cause__, BusError) else err
    if isinstance(cause, NoRoute):
        return None
    if isinstance(cause, NoResponders):
        return "NoResponders"
    if isinstance(cause, BusTimeout):
        return "timed out"
    return None


@dataclass(frozen=True)
class Waiting:
    """What waits for the hub, by part (`LEASE` or a bucket's name)."""

    node: str
    parts: dict[str, Part]

    @property
    def since(self) -> str:
        return min(part.since for part in self.parts.values())

    def applied_records(self, bucket: str) -> dict[str, bytes]:
        part = self.parts.get(bucket)
        return {key: value.encode() for key, value in part.records.items()} if part is not None else {}

    def as_json(self) -> dict[str, object]:
        return {"since": self.since, "parts": {name: part.as_json() for name, part in sorted(self.parts.items())}}


class WaitingWrites:
    """The record of `node`'s waiting writes in `folder`, told of each write's outcome. Each call
    reads, changes and writes the record at once (no await in between: the lease's task and the
    reconcile share it), and only when it changes."""

    def __init__(self, folder: Path, node: str) -> None:
        self.folder = folder
        self.node = node

    def current(self) -> Waiting | None:
        try:
            return read(self.folder, self.node)
        except MaterializeError as err:
            log.warning("%s; taken as nothing waiting", err, extra={"node": self.node})
            return None

    def failed(
        self,
        part: str,
        how: str,
        *,
        detail: str = "",
        keys: Iterable[str] = (),
        records: Mapping[str, bytes] | None = None,
    ) -> Part:
        """`part`'s write was answered as the link being down (`how`: the write and the answer, in
        a few words, for status; `detail`, the server's whole answer, for the log): kept since its
        first such answer."""
        found = self.current()
        parts = dict(found.parts) if found is not None else {}
        before = parts.get(part)
        named = sorted(keys)
        shown = tuple(named[:MAX_KEYS]) + ((f"... and {len(named) - MAX_KEYS} more",) if len(named) > MAX_KEYS else ())
        kept = {key: value.decode() for key, value in (records or {}).items()}
        parts[part] = Part(
            since=before.since if before is not None else now(), how=capped(how), keys=shown, records=kept
        )
        if parts[part] != before:
            if before is None:
                said = f"{how}: {detail}" if detail else how
                log.warning("writes to the hub wait: %s", said, extra={"node": self.node, "part": part})
            self._write(parts)
        return parts[part]

    def done(self, part: str) -> None:
        """`part`'s writes reached the hub (or nothing of it waits any more)."""
        found = self.current()
        if found is None or part not in found.parts:
            return
        parts = {name: p for name, p in found.parts.items() if name != part}
        log.info(
            "writes to the hub: %s written again (waiting since %s)",
            part,
            found.parts[part].since,
            extra={"node": self.node, "part": part},
        )
        self._write(parts)

    def _write(self, parts: Mapping[str, Part]) -> None:
        try:
            if not parts:
                records.WAITING.remove(self.folder)
                return
            records.WAITING.write(self.folder, WaitingDocument(node=self.node, parts=dict(parts)))
        except MaterializeError as err:
            log.warning("%s; status cannot say which writes wait", err, extra={"node": self.node})


def read(folder: Path, node: str) -> Waiting | None:
    """What waits for the hub; None when nothing does (or the record is another node's). Raises
    `MaterializeError` when the record cannot be read."""
    found = records.WAITING.read(folder)
    if found is None or found.node != node or not found.parts:
        return None
    return Waiting(found.node, dict(found.parts))
