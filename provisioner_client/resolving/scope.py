"""The node's own keys: the client writes nothing outside `<node>.>` of its own node.

This check runs in code before any write reaches the bus, besides the bus permissions the
controller grants; a key for another node is a bug, refused with `ForeignKeyError`.

A node has no JetStream API in the data account (no consumer, no stream info), so it learns its
own keys of needs, applied and collect from the provisioning verb, which answers a node about its
own keys with each entry's revision; whether they moved at all it learns from their stamp, one
direct get of `<node>.>` (`NodeScope.stamp`), which its grant of its own keys' direct gets allows.
A key out of shape under the node is the node's footprint too: the verb names it as malformed, and
it is read by direct get so that a converge removes it. The verb's pages are followed and bounded
by `registry.wire.answer_of` (a key answered twice is kept where it was answered last): a page it
cannot use is a `BusError`, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Literal

from provisioner_client.errors import ForeignKeyError
from registry.contract import Bucket, NodeRow, Row, buckets, encode_token, under
from registry.errors import WrongLastSequence
from registry.wire import Bus, Changes, KvItem, Step, answer_of, converge_steps, get_direct, run_steps, update

IN_FLIGHT = 64  # writes a converge keeps in flight: about one round trip per 64 keys

LISTED_AS: Mapping[str, Literal["needs", "applied", "collect"]] = {
    buckets.NEEDS.name: "needs",
    buckets.APPLIED.name: "applied",
    buckets.COLLECT.name: "collect",
}


class NodeScope:
    """The keys of one node: `<node-token>.>` in every node-scoped bucket."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.token = encode_token(node)

    @property
    def filter(self) -> str:
        """The single subject filter (relative to a bucket) of this node's keys."""
        return under(self.node)

    def owns(self, key: str) -> bool:
        return key.startswith(f"{self.token}.") and len(key) > len(self.token) + 1

    def check(self, bucket: str, keys: Iterable[str]) -> None:
        for key in keys:
            if not self.owns(key):
                raise ForeignKeyError(bucket, key, self.node)

    async def read(self, bus: Bus, bucket: Bucket, **narrowing: str) -> list[KvItem]:
        """This node's keys of `bucket` (needs, applied or collect), as the verb lists them, with
        the malformed ones under the node read by direct get; `narrowing` adds request fields
        (`collection`, `module`)."""
        answer = await answer_of(bus, {"what": LISTED_AS[bucket.name], "node": self.node, **narrowing})
        listed = [row for row in answer.entries if not isinstance(row, NodeRow)]
        items = [item_of(row, row.revision) for row in listed if row.revision is not None]
        unsure = [row.key for row in listed if row.revision is None] + [bad.key for bad in answer.malformed]
        for key in unsure:
            item = await self._stored(bus, bucket, key)
            if item is not None:
                items.append(item)
        return items

    async def stamp(self, bus: Bus, bucket: Bucket) -> int:
        """The stream sequence of the latest entry under this node's keys of `bucket` (0: none): one
        direct get of `<node>.>` itself, which the server answers with the last message under that
        filter. Any write, delete or purge of a key of the node moves it; `provisioner_client.resolving.memory`
        compares it with the one it remembered instead of listing the keys again."""
        found = await get_direct(bus, bucket, self.filter)
        return found.revision if found is not None else 0

    async def _stored(self, bus: Bus, bucket: Bucket, key: str) -> KvItem | None:
        """A key's entry as stored, if it is ours: for a malformed key (its value may not even be
        JSON) and for an entry without its revision (a seat older than the revision field)."""
        if not self.owns(key):
            return None
        return await get_direct(bus, bucket, key)

    async def converge(
        self,
        bus: Bus,
        bucket: Bucket,
        current: Sequence[KvItem],
        desired: Mapping[str, bytes],
        *,
        in_flight: int = IN_FLIGHT,
        revisions: dict[str, int] | None = None,
    ) -> Changes:
        """`registry.wire.kv.converge`, after checking every key it could touch is this node's; up to
        `in_flight` writes at once; `revisions` receives the new revision of each key written or deleted.

        Each write is conditional on the revision its key was listed at (0: not listed). The keys
        are this node's alone, so one that moved meanwhile moved by this node's own hand: a write
        it gave up on that the stream stored after all (a link cut mid-write), or a delete marker,
        which the verb does not list. Such a key is read and written over once at its revision:
        refused, the write failed the reconcile after its change actions had run, and the next
        reconcile ran them again."""
        self.check(bucket.name, desired)
        self.check(bucket.name, (item.key for item in current if not item.deleted))
        listed = {item.key: item for item in current}
        steps = [
            Step(key, "written", partial(_written_over, bus, bucket, key, value, item.revision if item else 0))
            for key, value in desired.items()
            if (item := listed.get(key)) is None or item.deleted or item.value != value
        ]
        steps += [step for step in converge_steps(bus, bucket, current, desired) if step.kind == "deleted"]
        if revisions is not None:
            steps = [Step(step.key, step.kind, partial(_recorded, step, revisions)) for step in steps]
        changes = Changes()
        await run_steps(bucket, steps, changes, in_flight=in_flight)
        return changes


def item_of(row: Row, revision: int) -> KvItem:
    """An entry of the verb's answer as the stored bytes: the value re-encoded as
    `registry.contract.models.to_json` writes it, so an unchanged value compares equal and is not rewritten."""
    value = json.dumps(row.value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return KvItem(row.key, value, revision)


async def _recorded(step: Step, revisions: dict[str, int]) -> object:
    revision = await step.run()
    if isinstance(revision, int) and not isinstance(revision, bool):
        revisions[step.key] = revision
    return revision


async def _written_over(bus: Bus, bucket: Bucket, key: str, value: bytes, last: int) -> int | bool:
    """Writes the node's own key at the revision it was listed at; one that moved since is read,
    then written over at its revision. Its new revision, or False when it already held `value`."""
    try:
        return await update(bus, bucket, key, value, last=last)
    except WrongLastSequence:
        found = await get_direct(bus, bucket, key)
        if found is not None and not found.deleted and found.value == value:
            return False
        return await update(bus, bucket, key, value, last=found.revision if found is not None else 0)
