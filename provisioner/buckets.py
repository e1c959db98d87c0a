"""Making sure the four buckets of the contract exist, without ever recreating one.

Each bucket is used as it is when it exists and created only when missing, with direct get
enabled so that a node's reads can be narrowed to its own keys. A bucket's configuration cannot
change in place: an existing bucket without direct get is used as it is, with a warning.
"""

from __future__ import annotations

import logging

from registry import buckets
from registry.buckets import Bucket
from registry.bus import Bus
from registry.kv import BucketConfig, bucket_config, create_bucket

log = logging.getLogger(__name__)


async def ensure_buckets(bus: Bus, config: BucketConfig) -> None:
    """Creates each of the four buckets of the contract that is missing."""
    for bucket in buckets.OWN:
        await ensure_bucket(bus, bucket, config)


async def ensure_bucket(bus: Bus, bucket: Bucket, config: BucketConfig) -> None:
    existing = await bucket_config(bus, bucket)
    if existing is not None:
        if not existing.get("allow_direct"):
            log.warning("bucket %s exists without direct get; node reads cannot be narrowed to their keys",
                        bucket.name, extra={"bucket": bucket.name})  # fmt: skip
        return
    await create_bucket(bus, bucket, config)
    log.info("bucket %s created (replicas %d, %s storage, history %d)", bucket.name, config.replicas,
             config.storage, config.history, extra={"bucket": bucket.name})  # fmt: skip
