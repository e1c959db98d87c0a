"""Which buckets some party follows live, read from the grants' own derivation: the one answer to
which buckets' streams republish their writes (`provisioner.seat.buckets`).

A party's live updates are a stream import of where a bucket's stream republishes its writes
(`$KVR.<bucket>.<scope>`, `registry.access.grants`). Republishing costs nats-server a message for
every write the stream stores, so a bucket nobody imports live must not republish (a hostile node
fills the applied and collect buckets as fast as it can, and nobody follows those, but for collect
once the catalogue shares a collection), and one that
somebody imports must, or its party hears nothing. Both come from here: the buckets of the stream
imports of a party of every kind, as the grants derive them. A party's name only narrows what it
follows within a bucket, so a node and a provider named `ANY_PROVIDER` stand for all: each
provider's bucket (`<provider>_bound`) is followed alike, and is known by that pattern.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from registry.access.grants import (
    Import,
    catalogue_of,
    node_imports,
    operator_imports,
    provider_imports,
    vault_imports,
    writer_imports,
)
from registry.contract import Bucket, Domain, buckets

# Stands for any provider's name in a bucket's name: `<provider>_bound`.
ANY_PROVIDER = "<provider>"
ANY_NODE = "any-node"
# What a provider's name holds (`registry.access.mesh_file.ProviderName`): so does its bucket's name.
_PROVIDER_NAME = "[A-Za-z0-9_-]+"


@dataclass(frozen=True)
class LiveBuckets:
    """The buckets some party follows live, by name; `<provider>` in a name stands for any
    provider's (`<provider>_bound`)."""

    names: frozenset[str]

    def __contains__(self, bucket: object) -> bool:
        return isinstance(bucket, Bucket) and any(_named(pattern, bucket.name) for pattern in self.names)


def followed_live(domains: Mapping[str, Domain]) -> LiveBuckets:
    """The buckets of the catalogue `domains` (and the seat's own) that some party's grants import
    live: a node's (running every provider's module), a provider's, an operator's, each writer's,
    the vault's."""
    catalogue = catalogue_of(domains, (ANY_PROVIDER,))
    imports = [
        *node_imports(ANY_NODE, catalogue, machine=True),
        *provider_imports(ANY_PROVIDER, catalogue),
        *operator_imports(),
        *(item for bucket in catalogue.written.values() for item in writer_imports(bucket)),
        *vault_imports(),
    ]
    return LiveBuckets(frozenset(live_bucket_of(item) for item in imports if item.kind == "stream"))


def live_bucket_of(item: Import) -> str:
    """The bucket a stream import follows: `$KVR.<bucket>.<scope>`."""
    prefix, bucket, _scope = item.subject.split(".", 2)
    if prefix != buckets.LIVE_PREFIX:
        raise ValueError(f"a stream import of {item.subject!r}, not of where a bucket republishes its writes")
    return bucket


def _named(pattern: str, name: str) -> bool:
    if ANY_PROVIDER not in pattern:
        return pattern == name
    wanted = _PROVIDER_NAME.join(re.escape(part) for part in pattern.split(ANY_PROVIDER))
    return re.fullmatch(wanted, name) is not None
