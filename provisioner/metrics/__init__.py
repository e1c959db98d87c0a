"""The seat's figures for Prometheus: what they are (`seat`), served by
`registry.runtime.serve_metrics`.

Off unless `metrics_listen` is set (`ServerSettings`); bound to 127.0.0.1 when it names a port alone.
"""

from __future__ import annotations

from provisioner.metrics.seat import SeatMetrics, SeatWork, serve_seat_metrics

__all__ = ["SeatMetrics", "SeatWork", "serve_seat_metrics"]
