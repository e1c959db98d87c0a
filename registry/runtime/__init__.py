"""How a program runs: logging set up once (readable on a terminal, JSON with a flag, never a
secret, the ids of a request or a reconcile carried by context onto each of its lines), signals
turned into cancellation, what a node wrote made safe to show on a terminal, a `/metrics`
endpoint for Prometheus, and an optional extra's package looked for before it is needed (a
command line's conventions, a closed pipe included, are `registry.command_line`). It needs no
connection, so a program that never touches the bus (the postgres provisioner) stands on it alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from registry.runtime.extras import missing_extra
    from registry.runtime.logs import LogFormat, LogLevel, configure_logging, event, log_context, new_log_id
    from registry.runtime.metrics_endpoint import MetricsListen, listen_address, serve_metrics
    from registry.runtime.signals import until_signalled
    from registry.runtime.terminal import json_text, terminal_safe
else:
    from registry.lazy import lazy_names

    __getattr__ = lazy_names(
        __name__,
        {
            "missing_extra": "registry.runtime.extras",
            "LogFormat": "registry.runtime.logs",
            "LogLevel": "registry.runtime.logs",
            "configure_logging": "registry.runtime.logs",
            "event": "registry.runtime.logs",
            "log_context": "registry.runtime.logs",
            "new_log_id": "registry.runtime.logs",
            "MetricsListen": "registry.runtime.metrics_endpoint",
            "listen_address": "registry.runtime.metrics_endpoint",
            "serve_metrics": "registry.runtime.metrics_endpoint",
            "until_signalled": "registry.runtime.signals",
            "json_text": "registry.runtime.terminal",
            "terminal_safe": "registry.runtime.terminal",
        },
    )

__all__ = [
    "LogFormat",
    "LogLevel",
    "MetricsListen",
    "configure_logging",
    "event",
    "json_text",
    "listen_address",
    "log_context",
    "missing_extra",
    "new_log_id",
    "serve_metrics",
    "terminal_safe",
    "until_signalled",
]
