"""Writes of the node's own keys that the bus refused, kept where `status` finds them.

A bucket refuses a write when nats-server answers it with a JetStream error: a bucket full past
its `max_bytes` (`discard: new`: "maximum bytes exceeded", error 10077), an account over its
storage, a value over the bucket's limit. That answer will not change by asking again at once, and
the client's log is not where an operator looks. So a reconcile that met one:

- leaves each module whose needs or contributions were refused pending, its reason naming the
  bucket and the server's answer, and writes that record to applied if applied takes it
  (`status` and `query applied` show it);
- keeps the refusals in the env folder (`RECORD`, the node's record `state.records.REFUSALS`,
  mode 0600, its temporary files a killed client left removed with the others) with the node and when, and removes
  that file at the first reconcile that met none: `status` says from it which bucket refused and
  why, and exits 1, even when applied refused the records too;
- in watch mode, is followed by another reconcile after a backoff: nothing the client follows
  changes when the bucket has room again.

A conditional write that lost to another writer (10071) and a cluster that has no leader for the
moment (10008, 10009) are not refusals: the reconcile fails and is retried, as when the bus is away.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from provisioner_client.errors import MaterializeError, capped
from provisioner_client.state import records
from provisioner_client.state.records import RefusalsDocument
from registry.errors import BusError, JetStreamError, PermissionDenied, WrongLastSequence

log = logging.getLogger(__name__)

RECORD = records.REFUSALS.name
_FOR_THE_MOMENT = frozenset({10008, 10009})  # JetStream temporarily unavailable; not the leader

Refusals = RefusalsDocument  # what the last reconcile of a node found refused, as it is kept


def refusal_of(err: BusError) -> str | None:
    """The server's answer if `err` (or the error it wraps: a converge's) is a refusal, else None."""
    cause = err.__cause__ if isinstance(err.__cause__, BusError) else err
    if isinstance(cause, PermissionDenied):
        return cause.reason
    if isinstance(cause, JetStreamError) and not isinstance(cause, WrongLastSequence):
        return None if cause.err_code in _FOR_THE_MOMENT else cause.reason
    return None


def record(folder: Path, node: str, refused: Mapping[str, str]) -> None:
    """Keeps what the reconcile found refused, or removes the record when nothing was. A failure
    to keep it is logged: the reconcile's own outcome does not depend on it."""
    try:
        if not refused:
            records.REFUSALS.remove(folder)
            return
        at = datetime.now(UTC).isoformat(timespec="seconds")
        buckets = {bucket: capped(reason) for bucket, reason in sorted(refused.items())}
        records.REFUSALS.write(folder, Refusals(node=node, at=at, buckets=buckets))
    except MaterializeError as err:
        log.warning("%s; status cannot say which writes were refused", err, extra={"node": node})


def read(folder: Path, node: str) -> Refusals | None:
    """What the last reconcile of `node` found refused; None when it found nothing refused (or the
    record is another node's). Raises `MaterializeError` when the record cannot be read."""
    refusals = records.REFUSALS.read(folder)
    return refusals if refusals is not None and refusals.node == node else None
