"""Asking a service on the bus as a client does: the provisioning verb, a vault's verbs.

A service answers with the micro service API's error headers (`Nats-Service-Error-Code`,
`Nats-Service-Error`) when it refuses; `ask_service` raises those as `ServiceError`. `ask`
follows every page of the provisioning verb (see the README) and merges them into one answer
shaped like a page with every page's `entries` and `malformed` joined and no `page` or `next`.
Used by `mesh-provisioner query`, the node client, the tests and the benchmarks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from registry import buckets
from registry.bus import Bus, Message
from registry.errors import ServiceError

ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"


async def ask_service(bus: Bus, subject: str, body: bytes, *, reply_wait: timedelta | None = None) -> Message:
    """The service's reply to `body`; `ServiceError` when it answers with the error headers."""
    operation = f"ask {subject}"
    reply = await bus.request(subject, body, reply_wait=reply_wait, operation=operation)
    raise_for_service_error(operation, reply)
    return reply


def raise_for_service_error(operation: str, reply: Message) -> None:
    if ERROR_CODE_HEADER in reply.headers or ERROR_HEADER in reply.headers:
        raise ServiceError(operation, reply.headers.get(ERROR_CODE_HEADER, "?"), reply.headers.get(ERROR_HEADER, ""))


async def ask(
    bus: Bus, request: Mapping[str, Any] | None = None, *, reply_wait: timedelta | None = None
) -> dict[str, Any]:
    """The verb's whole answer to `request` (fields `what`, `node`, `module`, `collection`), all
    pages merged. Raises `ServiceError` when the verb refuses, `BusError` when it cannot be asked."""
    request = dict(request or {})
    answer = await ask_page(bus, request, reply_wait=reply_wait)
    merged = {key: value for key, value in answer.items() if key not in ("page", "next")}
    while answer["next"] is not None:
        answer = await ask_page(bus, {**request, "cursor": answer["next"]}, reply_wait=reply_wait)
        merged["entries"].extend(answer["entries"])
        merged["malformed"].extend(answer["malformed"])
    return merged


async def ask_page(bus: Bus, request: Mapping[str, Any], *, reply_wait: timedelta | None = None) -> dict[str, Any]:
    """One page: the verb's answer to `request` as it is sent."""
    reply = await ask_service(bus, buckets.VERB_SUBJECT, json.dumps(request).encode(), reply_wait=reply_wait)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer
