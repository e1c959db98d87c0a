"""Asking the verb as a client does: one request, every page followed, one merged answer.

Used by `mesh-provisioner query`, the tests and the benchmarks. The merged answer has the shape
of a page with every page's `entries` and `malformed` joined, `pages` saying how many there
were, and no `page` or `next`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from nats.aio.msg import Msg

from provisioner.errors import VerbError
from registry import buckets
from registry.bus import Bus

ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"


async def ask(
    bus: Bus, request: Mapping[str, Any] | None = None, *, reply_wait: timedelta | None = None
) -> dict[str, Any]:
    """The whole answer to `request` (fields `what`, `node`, `module`, `collection`), all pages merged.

    Raises `VerbError` when the verb answers with a service error, `BusError` when it cannot be asked."""
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
    msg = await request_raw(bus, json.dumps(request).encode(), reply_wait=reply_wait)
    raise_for_error(msg)
    answer: dict[str, Any] = json.loads(msg.data)
    return answer


async def request_raw(bus: Bus, body: bytes, *, reply_wait: timedelta | None = None) -> Msg:
    """The verb's reply message to `body`, service error or not."""
    seconds = (reply_wait or bus.options.request_timeout).total_seconds()
    with bus.translate_errors(f"ask {buckets.VERB_SUBJECT}"):
        return await bus.nc.request(buckets.VERB_SUBJECT, body, timeout=seconds)


def raise_for_error(msg: Msg) -> None:
    headers = msg.headers or {}
    if ERROR_CODE_HEADER in headers:
        raise VerbError(headers[ERROR_CODE_HEADER], headers.get(ERROR_HEADER, ""))
