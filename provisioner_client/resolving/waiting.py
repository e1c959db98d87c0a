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

Each part is kept in the env folder (`RECORD`, mode 0600, written as the env files are) with
`since` (the first write refused in this outage, kept while it keeps failing) and `how` (the
write and the answer); a part is removed by the next write of its own that succeeds, and the file
with the last part. `status` reads it.

`link_down` tells such an answer from the others: `NoRoute` (this account does not import the
subject: grants, not a link) and JetStream errors (refusals, `refusals`) are not waits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from provisioner_client.errors import MaterializeError, capped
from provisioner_client.materializing import files
from registry.errors import BusError, BusTimeout, NoResponders, NoRoute

log = logging.getLogger(__name__)

RECORD = ".mesh-provisioner-client.waiting.json"
WHAT = "record of waiting writes"
LEASE = "lease"
MAX_KEYS = 50  # keys named per part; then "... and N more"
_MAX_BYTES = 1024 * 1024  # applied records are bounded by the bucket's value size each


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
class Part:
    """One kind of write that waits: since when, how the client knows, which keys (and for applied
    the records themselves, key to stored JSON)."""

    since: str
    how: str
    keys: tuple[str, ...] = ()
    records: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        document: dict[str, object] = {"since": self.since, "how": self.how, "keys": list(self.keys)}
        if self.records:
            document["records"] = dict(sorted(self.records.items()))
        return document


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
        parts[part] = Part(before.since if before is not None else now(), capped(how), shown, kept)
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
        path = self.folder / RECORD
        try:
            if not parts:
                files.remove(path, what=WHAT)
                return
            files.make_folder(self.folder)
            document = {"node": self.node, "parts": {name: part.as_json() for name, part in sorted(parts.items())}}
            files.write_atomically(path, json.dumps(document, ensure_ascii=False).encode(), what=WHAT)
        except MaterializeError as err:
            log.warning("%s; status cannot say which writes wait", err, extra={"node": self.node})


def read(folder: Path, node: str) -> Waiting | None:
    """What waits for the hub; None when nothing does (or the record is another node's). Raises
    `MaterializeError` when the record cannot be read."""
    waiting = files.read_record(folder / RECORD, _parsed, limit=_MAX_BYTES, what=WHAT, shape="waiting writes")
    if waiting is None:
        return None
    return waiting if waiting.node == node and waiting.parts else None


def _parsed(document: object) -> Waiting | None:
    if not isinstance(document, dict):
        return None
    node, parts = document.get("node"), document.get("parts")
    if not (isinstance(node, str) and isinstance(parts, dict)):
        return None
    found = {}
    for name, part in parts.items():
        parsed = _part(part)
        if not isinstance(name, str) or parsed is None:
            return None
        found[name] = parsed
    return Waiting(node, found)


def _part(document: object) -> Part | None:
    if not isinstance(document, dict):
        return None
    since, how, keys = document.get("since"), document.get("how"), document.get("keys", [])
    records = document.get("records", {})
    if not (isinstance(since, str) and isinstance(how, str) and isinstance(keys, list) and isinstance(records, dict)):
        return None
    if not all(isinstance(k, str) for k in keys) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in records.items()
    ):
        return None
    return Part(since, how, tuple(keys), dict(records))
