"""The node's figures for Prometheus: a node_exporter textfile (`mesh_provisioner_client.prom`),
an endpoint at `/metrics`, or both, from one registry.

The textfile is written into the folder of the `metrics_folder` setting (node_exporter's
`--collector.textfile.directory`) after each reconcile, failed ones included, each drift put back
and each change of the node's lease: whole and atomically (a temporary file beside it, mode 0644 so
that node_exporter's user reads it, renamed over), so a scrape never reads half a file. The
endpoint (`metrics_listen`, watch mode only: `serve`) answers each scrape with the same text,
made at that moment. Nothing in either names a value or a secret: counts, outcomes, times, and
the node's name in `mesh_node_info`.

Every series (docs/monitoring.md, "Prometheus"):

- `mesh_node_info{node}` 1: the node this client reconciles (join on `instance`).
- `mesh_node_modules{state}` gauge: modules `applied` and `pending` after the last reconcile.
- `mesh_node_pending_oldest_timestamp_seconds` gauge: since when the longest-pending module's
  record says what it says (its `changed_at`), 0 when none is pending.
- `mesh_node_pending_by_cause{cause}` gauge: pending modules with a reason of each cause:
  `verb_refused` (a verb, the vault say, answered an error), `verb_unanswered` (it did not answer
  in time, or nothing serves its subject), `other` (a value missing, a manifest unread, ...), read
  as the seat reads its fleet's (`registry.contract.pending_causes`).
- `mesh_node_modules_by_action{outcome}` gauge: modules whose last change action
  `succeeded`, `failed`, `timed_out` or `could_not_start`.
- `mesh_node_reconcile_last_timestamp_seconds` gauge: when the last reconcile ended (failed or not).
- `mesh_node_reconcile_last_duration_seconds` gauge: how long it took.
- `mesh_node_reconcile_last_ok` gauge: 1 when it applied every module, read every manifest, every
  action it ran succeeded and no bucket refused its writes; 0 otherwise (and when it failed).
- `mesh_node_reconciles_total{outcome}` counter: reconciles `completed` or `failed` (the bus away,
  the manifests folder missing) since the client started.
- `mesh_node_writes_refused` gauge: buckets that refused the last reconcile's writes (full).
- `mesh_node_drift_put_back_total` counter: env files edited, re-moded or removed by hand and put back.
- `mesh_node_lease_held` gauge: 1 while this client holds the node's lease.
- `mesh_node_nats_connected` gauge: 1 when the connection to NATS was up as the file was written,
  or as the endpoint was scraped (read from the connection then, not at the last reconcile).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest

from provisioner_client.materializing.action import ModuleReport
from provisioner_client.reconcile import Report
from registry.contract import PENDING_CAUSES, AppliedValue, pending_causes
from registry.runtime import serve_metrics

log = logging.getLogger(__name__)

FILE_NAME = "mesh_provisioner_client.prom"
FILE_MODE = 0o644
STATES = ("applied", "pending")
OUTCOMES = {
    "succeeded": "succeeded",
    "failed": "failed",
    "timed out": "timed_out",
    "could not start": "could_not_start",
}


class NodeMetrics:
    """The client's series, in a registry of their own; each event told is written at once to the
    textfile (when `folder` is given) and shown by the endpoint (when served) at its next scrape."""

    def __init__(self, node: str, folder: Path | None = None, *, connected: Callable[[], bool] = lambda: False) -> None:
        self.path = None if folder is None else folder / FILE_NAME
        self._connected = connected
        self.registry = CollectorRegistry(auto_describe=True)
        Info("mesh_node", "the node this client reconciles", registry=self.registry).info({"node": node})
        self._modules = _gauge(self, "mesh_node_modules", "modules by state after the last reconcile", ["state"])
        self._pending_since = _gauge(
            self,
            "mesh_node_pending_oldest_timestamp_seconds",
            "since when the longest-pending module is pending; 0: none",
        )
        self._by_cause = _gauge(
            self, "mesh_node_pending_by_cause", "pending modules with a reason of this cause", ["cause"]
        )
        self._by_action = _gauge(
            self, "mesh_node_modules_by_action", "modules by the outcome of their last change action", ["outcome"]
        )
        self._last_at = _gauge(self, "mesh_node_reconcile_last_timestamp_seconds", "when the last reconcile ended")
        self._last_took = _gauge(self, "mesh_node_reconcile_last_duration_seconds", "how long the last reconcile took")
        self._last_ok = _gauge(self, "mesh_node_reconcile_last_ok", "1 when the last reconcile applied everything")
        self._reconciles = Counter("mesh_node_reconciles", "reconciles by outcome", ["outcome"], registry=self.registry)
        self._refused = _gauge(self, "mesh_node_writes_refused", "buckets that refused the last reconcile's writes")
        self._drift = Counter("mesh_node_drift_put_back", "env files put back after drift", registry=self.registry)
        self._lease = _gauge(self, "mesh_node_lease_held", "1 while this client holds the node's lease")
        self._nats = _gauge(self, "mesh_node_nats_connected", "1 when connected to NATS as the figures were taken")
        for state in STATES:
            self._modules.labels(state)
        for outcome in OUTCOMES.values():
            self._by_action.labels(outcome)
        for cause in PENDING_CAUSES:
            self._by_cause.labels(cause)
        for outcome in ("completed", "failed"):
            self._reconciles.labels(outcome)

    def reconciled(self, report: Report, seconds: float, *, put_back: int = 0) -> None:
        """A reconcile ended with `report` after `seconds`, having put back `put_back` drifted files."""
        modules = report.modules.values()
        for state in STATES:
            self._modules.labels(state).set(sum(1 for m in modules if m.applied.state == state))
        self._pending_since.set(_oldest_pending(modules))
        causes = [pending_causes(m.applied.reasons) for m in modules if m.applied.state == "pending"]
        for cause in PENDING_CAUSES:
            self._by_cause.labels(cause).set(sum(1 for found in causes if cause in found))
        for outcome, label in OUTCOMES.items():
            self._by_action.labels(label).set(sum(1 for m in modules if m.action and m.action.outcome == outcome))
        self._refused.set(len(report.refused))
        self._drift.inc(put_back)
        self._ended("completed", seconds, ok=report.ok)

    def failed(self, seconds: float) -> None:
        """A reconcile failed (raised) after `seconds`: the figures of the last one stand."""
        self._ended("failed", seconds, ok=False)

    def drift_put_back(self, files: int) -> None:
        self._drift.inc(files)
        self.write()

    def lease(self, *, held: bool) -> None:
        self._lease.set(1 if held else 0)
        self.write()

    def track_connection(self, connected: Callable[[], bool]) -> None:
        """From now on `mesh_node_nats_connected` says what `connected` says: the endpoint is
        served before the connection is made, so that a node whose bus is away says so too."""
        self._connected = connected

    def text(self) -> bytes:
        """Every series in the text format, the connection's state read now: the one way both the
        textfile and the endpoint take the figures."""
        self._nats.set(1 if self._connected() else 0)
        return generate_latest(self.registry)

    async def render(self) -> bytes:
        return self.text()

    async def serve(self, listen: str, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """The series served at `listen` (`metrics_listen`) until cancelled; started with the port
        bound. One that cannot be bound is `SettingsError("metrics_listen", ...)`."""
        await serve_metrics(listen, self.render, task_status=task_status)

    def write(self) -> None:
        """The textfile rewritten whole, when there is a folder for it; a folder that cannot be
        written is logged, never fatal."""
        if self.path is None:
            return
        try:
            _write_atomically(self.path, self.text())
        except OSError as err:
            log.warning("cannot write the metrics textfile %s: %s", self.path, err.strerror or err)

    def _ended(self, outcome: str, seconds: float, *, ok: bool) -> None:
        self._reconciles.labels(outcome).inc()
        self._last_at.set(time.time())
        self._last_took.set(seconds)
        self._last_ok.set(1 if ok else 0)
        self.write()


def _gauge(metrics: NodeMetrics, name: str, documentation: str, labels: Iterable[str] = ()) -> Gauge:
    return Gauge(name, documentation, list(labels), registry=metrics.registry)


def _oldest_pending(modules: Iterable[ModuleReport]) -> float:
    since = [_since(m.applied) for m in modules if m.applied.state == "pending"]
    return min(since, default=0.0)


def _since(applied: AppliedValue) -> float:
    """When the record last changed; a record without a stamp (written before stamps existed): now."""
    if applied.changed_at is None:
        return time.time()
    try:
        return datetime.fromisoformat(applied.changed_at).timestamp()
    except ValueError:
        return time.time()


def _write_atomically(path: Path, content: bytes) -> None:
    """`prometheus_client.write_to_textfile` leaves the file's mode to the umask (the unit's 0077
    makes it unreadable to node_exporter): the same temporary file and rename, mode set first."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            os.fchmod(file.fileno(), FILE_MODE)
            file.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
