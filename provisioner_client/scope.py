"""The node's own keys: the client writes nothing outside `<node>.>` of its own node.

This check runs in code before any write reaches the bus, besides the bus permissions the
controller grants; a key for another node is a bug, refused with `ForeignKeyError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from provisioner_client.errors import ForeignKeyError
from registry.buckets import Bucket
from registry.bus import Bus
from registry.escaping import encode_token
from registry.keys import under
from registry.kv import Changes, KvItem, converge, snapshot


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

    async def read(self, bus: Bus, bucket: Bucket) -> list[KvItem]:
        """This node's keys of `bucket`, deletions included, through one server-side filter."""
        return await snapshot(bus, bucket, [self.filter], include_deleted=True)

    async def converge(
        self, bus: Bus, bucket: Bucket, current: Sequence[KvItem], desired: Mapping[str, bytes]
    ) -> Changes:
        """`registry.kv.converge`, after checking every key it could touch is this node's."""
        self.check(bucket.name, desired)
        self.check(bucket.name, (item.key for item in current if not item.deleted))
        return await converge(bus, bucket, current, desired)
