"""Serving a verb: the NATS service API (`nats.micro`) behind one class, with the error contract
(service error headers, a generic 500 for anything unexpected) and the shutdown order. Only the
seat and providers that answer verbs import it; the node client never does.
"""

from __future__ import annotations

from registry.serving.service import EndpointFigures, EndpointSpec, RunningService, ServiceRequest, capped, serve

__all__ = ["EndpointFigures", "EndpointSpec", "RunningService", "ServiceRequest", "capped", "serve"]
