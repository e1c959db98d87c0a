"""Making sure the seat's buckets exist, with a configuration no party can wipe or bend.

The seat creates its four buckets, the leases, the fleet (`registry.contract.fleet`), the
`<provider>_bound` bucket of each configured provider and the bucket of each domain of the
catalogue writing one (`mesh-config_values`, the controller's `mesh-controller_assignments`): no
other party may create a stream (that grant would let it choose the stream's subjects). Each has
the same fixed configuration (`registry.wire.kv.BucketConfig`): rollup headers refused, a value and
a bucket size limit, direct get on (a node's reads are granted key by key), deletion of the stream
denied. A bucket some party follows live (`registry.access.followed_live`, read from the grants'
derivation: the registry, the needs, each domain's bucket, each provider's `_bound`) republishes
its writes under `$KVR.<bucket>.`, where the live updates are imported from (collect too, once the
catalogue shares a collection); the others (applied, collect, leases) do not: republishing costs
nats-server a message per write, for nobody. An existing bucket is used as it is, never recreated:
its republishing is made to match (one stream update; none when it does), and one that is weaker
than the rest is reported with one ERROR line saying what differs and the command that fixes it,
and the server still starts: refusing to start would take the whole mesh down over a fixable
setting.

A seat started before its JetStream cluster has enough peers for the replicas asked (no meta
leader yet: no answer; too few servers: "no suitable peers for placement") waits for them, as it
waits for NATS itself: each bucket is tried again with backoff, the wait logged once and then as
a count, until it is created or the seat is stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import anyio

from registry.access import bound_bucket, followed_live, writing_domains
from registry.contract import Bucket, buckets, fleet, load_catalogue
from registry.errors import BusTimeout, JetStreamError
from registry.wire import BucketConfig, Bus, bucket_config, converge_republish, create_bucket

log = logging.getLogger(__name__)

T = TypeVar("T")

# JetStream's answers while a cluster lacks peers: "JetStream system temporarily unavailable"
# (no meta leader), "no suitable peers for placement" (fewer servers than replicas).
# What a stream's create or update may be answered while it cannot be made yet, and why.
_NOT_YET = {
    10008: "the JetStream cluster has not enough peers",  # no suitable peers for placement
    10005: "the JetStream cluster has not enough peers",  # insufficient resources in the cluster
    # JSStreamStoreFailedF: nats-server could not make the stream's folder (its log says why: a full
    # disk, a folder it may not write); seen once in a loaded run of the tests on a fresh server
    10049: "nats-server could not make the stream's store",
}
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 5.0


def seat_buckets(providers: Iterable[str] = (), domains_file: Path | None = None) -> list[Bucket]:
    """Every bucket the seat creates: its own four, the leases, each provider's `_bound` bucket and
    the bucket of each domain of the catalogue (`domains_file`'s, else the built-in) writing one."""
    bound = [bound_bucket(provider) for provider in providers]
    written = sorted(writing_domains(load_catalogue(domains_file)).values(), key=lambda b: b.name)
    return list(dict.fromkeys([*buckets.OWN, buckets.LEASES, fleet.FLEET, *bound, *written]))


async def ensure_buckets(
    bus: Bus, config: BucketConfig, providers: Iterable[str] = (), domains_file: Path | None = None
) -> None:
    """Creates each of the seat's buckets that is missing; makes each that is there republish its
    writes if some party follows it live, and not if none does; reports those that are weaker."""
    live = followed_live(load_catalogue(domains_file))
    for bucket in seat_buckets(providers, domains_file):
        await ensure_bucket(bus, bucket, config, live=bucket in live)


async def ensure_bucket(bus: Bus, bucket: Bucket, config: BucketConfig, *, live: bool | None = None) -> None:
    """Creates `bucket`, or brings the one there in line; `live`: some party follows it live, so
    its stream republishes its writes (left out: as the built-in catalogue's grants have it)."""
    if live is None:
        live = bucket in followed_live(load_catalogue())
    existing = await until_enough_peers(bucket, lambda: bucket_config(bus, bucket))
    if existing is not None:
        if await until_enough_peers(bucket, lambda: converge_republish(bus, bucket, existing, live=live)):
            _log_republishing(bucket, live=live)
        _report_if_weaker(bucket, existing, config)
        return
    await until_enough_peers(bucket, lambda: create_bucket(bus, bucket, config, live=live))
    log.info(
        "bucket %s created (replicas %d, %s storage, history %d, values up to %d bytes, %d bytes in all%s)",
        bucket.name,
        config.replicas,
        config.storage,
        config.history,
        config.max_value_size,
        config.max_bytes,
        f", its writes republished under {bucket.live_subject('>')}" if live else "",
        extra={"bucket": bucket.name},
    )


def _log_republishing(bucket: Bucket, *, live: bool) -> None:
    if live:
        log.info(
            "bucket %s now republishes its writes under %s (the parties' live updates)",
            bucket.name,
            bucket.live_subject(">"),
            extra={"bucket": bucket.name},
        )
    else:
        log.info(
            "bucket %s no longer republishes its writes: no party follows it live",
            bucket.name,
            extra={"bucket": bucket.name},
        )


async def until_enough_peers(bucket: Bucket, attempt: Callable[[], Awaitable[T]]) -> T:
    """`attempt()`'s result, tried again with backoff while the cluster lacks the peers for it (or
    nats-server its store: `_NOT_YET`)."""
    failures, pause, told = 0, BACKOFF_FIRST, ""
    while True:
        try:
            result = await attempt()
        except (BusTimeout, JetStreamError) as err:
            if isinstance(err, JetStreamError) and err.err_code not in _NOT_YET:
                raise
            failures += 1
            waiting_for = _NOT_YET[err.err_code] if isinstance(err, JetStreamError) else "no answer yet"
            told = _log_waiting(bucket, failures, f"{err.reason}: {waiting_for}", told)
        else:
            if failures:
                log.info(
                    "bucket %s reachable after %d failed attempts", bucket.name, failures, extra={"bucket": bucket.name}
                )
            return result
        await anyio.sleep(pause)
        pause = min(pause * 2, BACKOFF_MAX)


def _log_waiting(bucket: Bucket, failures: int, reason: str, told: str) -> str:
    """The first failure, then the count at the 2nd, 4th, 8th, ... attempt or when the reason
    changes; the reason last told."""
    if failures == 1:
        log.warning(
            "bucket %s cannot be made yet (%s); trying again",
            bucket.name,
            reason,
            extra={"bucket": bucket.name},
        )
    elif failures & (failures - 1) == 0 or reason != told:
        log.warning(
            "bucket %s still cannot be made after %d attempts (%s); still waiting",
            bucket.name,
            failures,
            reason,
            extra={"bucket": bucket.name},
        )
    else:
        return told
    return reason


def weaknesses(existing: Mapping[str, Any], wanted: BucketConfig) -> list[tuple[str, str]]:
    """How an existing bucket's stream is weaker than the seat creates it: (what, the flag of
    `nats stream edit` that fixes it) for each difference."""
    found: list[tuple[str, str]] = []
    if existing.get("allow_rollup_hdrs", False):
        found.append(("rollup headers allowed (one put with Nats-Rollup: all wipes every key)", "--no-allow-rollup"))
    found += _limit("value size", existing.get("max_msg_size"), wanted.max_value_size, "--max-msg-size")
    found += _limit("bucket size", existing.get("max_bytes"), wanted.max_bytes, "--max-bytes")
    if wanted.direct and not existing.get("allow_direct", False):
        found.append(("no direct get (a node's reads cannot be granted key by key)", "--allow-direct"))
    if not existing.get("deny_delete", False):
        found.append(("deletes through the stream API allowed", "--deny-delete"))
    return found


def _limit(what: str, current: int | None, wanted: int, flag: str) -> list[tuple[str, str]]:
    if current is None or current <= 0:
        return [(f"no {what} limit (wanted {wanted})", f"{flag} {wanted}")]
    if current > wanted:
        return [(f"{what} limit {current}, larger than {wanted}", f"{flag} {wanted}")]
    return []


def _report_if_weaker(bucket: Bucket, existing: Mapping[str, Any], wanted: BucketConfig) -> None:
    found = weaknesses(existing, wanted)
    if not found:
        return
    differs = "; ".join(what for what, _ in found)
    fix = f"nats stream edit {bucket.stream} {' '.join(flag for _, flag in found)}"
    log.error(
        "bucket %s is weaker than the seat creates it: %s. Fix it with `%s`, or recreate it: back up its "
        "keys, delete the stream and restart the seat",
        bucket.name,
        differs,
        fix,
        extra={"bucket": bucket.name},
    )
