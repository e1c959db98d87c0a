"""Making sure the four buckets of the contract exist, without ever recreating one.

Each bucket is bound when it exists and created only when missing, with direct get enabled so
that a node's reads can later be narrowed to its own keys (`$JS.API.DIRECT.GET.KV_<b>.$KV.<b>.<key>`).
A bucket's config cannot change in place: an existing bucket without direct get is used as it is,
with a warning.
"""

from __future__ import annotations

import logging
from typing import Literal

import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from registry import buckets
from registry.bus import Bus

log = logging.getLogger(__name__)


async def ensure_buckets(
    bus: Bus, *, replicas: int = 1, storage: Literal["file", "memory"] = "file", history: int = 1
) -> dict[str, KeyValue]:
    """The four buckets of the contract by name, created where missing."""
    found: dict[str, KeyValue] = {}
    for bucket in buckets.OWN:
        found[bucket.name] = await ensure_bucket(bus, bucket.name, replicas=replicas, storage=storage, history=history)
    return found


async def ensure_bucket(
    bus: Bus, name: str, *, replicas: int, storage: Literal["file", "memory"], history: int
) -> KeyValue:
    with bus.translate_errors(f"bind bucket {name}"):
        try:
            kv = await bus.js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            kv = None
    if kv is not None:
        with bus.translate_errors(f"status of bucket {name}"):
            status = await kv.status()
        if not status.stream_info.config.allow_direct:
            log.warning("bucket %s exists without direct get; node reads cannot be narrowed to their keys", name)
        log.debug("bucket %s exists", name)
        return kv
    config = KeyValueConfig(bucket=name, history=history, replicas=replicas, storage=StorageType(storage), direct=True)
    with bus.translate_errors(f"create bucket {name}"):
        kv = await bus.js.create_key_value(config)
    log.info("bucket %s created (replicas %d, %s storage, history %d)", name, replicas, storage, history)
    return kv
