"""The NATS wire layer: one connection, and everything read or written over it.

`Bus` wraps nats-py (its errors mapped to `registry.errors`); KV reads, writes and stamps; a
bucket's live updates (feeds and watches); whole-stream walks; leases; and the verb's client side,
which follows every page of an answer. nats-py's private internals are touched in one module
(`registry.wire.nats_internals`), checked at start. This layer knows nothing of the grants.
"""

from __future__ import annotations

from registry.wire.bus import Bus, BusOptions, Message, Outage, connect, connect_within, nats_client
from registry.wire.feed import KvItem
from registry.wire.kv import (
    MULTI_LAST_LIMIT,
    BucketConfig,
    Changes,
    Step,
    TooManyKeys,
    bucket_config,
    converge,
    converge_republish,
    converge_steps,
    create_bucket,
    current_snapshot,
    delete,
    get_direct,
    get_last_many,
    get_latest,
    get_stamped,
    leader_floor,
    purge,
    put,
    replicated,
    run_steps,
    snapshot,
    update,
)
from registry.wire.lease import SKEW, Holder, Lease, LeaseHeld, LeaseLost, node_key, seat_key
from registry.wire.nats_internals import check_nats_internals, drain_endpoints
from registry.wire.verb_client import (
    ERROR_CODE_HEADER,
    ERROR_HEADER,
    MAX_PAGES,
    OnPage,
    answer_of,
    answer_patiently,
    ask,
    ask_page,
    ask_patiently,
    ask_service,
    follow,
    page_of,
)
from registry.wire.walk import Sink, StreamWalk
from registry.wire.watch import ScopedWatch, scoped_watch

__all__ = [
    "ERROR_CODE_HEADER",
    "ERROR_HEADER",
    "MAX_PAGES",
    "MULTI_LAST_LIMIT",
    "SKEW",
    "BucketConfig",
    "Bus",
    "BusOptions",
    "Changes",
    "Holder",
    "KvItem",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "Message",
    "OnPage",
    "Outage",
    "ScopedWatch",
    "Sink",
    "Step",
    "StreamWalk",
    "TooManyKeys",
    "answer_of",
    "answer_patiently",
    "ask",
    "ask_page",
    "ask_patiently",
    "ask_service",
    "bucket_config",
    "check_nats_internals",
    "connect",
    "connect_within",
    "converge",
    "converge_republish",
    "converge_steps",
    "create_bucket",
    "current_snapshot",
    "delete",
    "drain_endpoints",
    "follow",
    "get_direct",
    "get_last_many",
    "get_latest",
    "get_stamped",
    "leader_floor",
    "nats_client",
    "node_key",
    "page_of",
    "purge",
    "put",
    "replicated",
    "run_steps",
    "scoped_watch",
    "seat_key",
    "snapshot",
    "update",
]
