"""The seat's figures for Prometheus: what they are (`seat`) and the endpoint serving them (`endpoint`).

Off unless `metrics_listen` is set (`ServerSettings`); bound to 127.0.0.1 when it names a port alone.
"""

from __future__ import annotations

from provisioner.metrics.endpoint import listen_address, serve_metrics
from provisioner.metrics.seat import SeatMetrics, serve_seat_metrics

__all__ = ["SeatMetrics", "listen_address", "serve_metrics", "serve_seat_metrics"]
