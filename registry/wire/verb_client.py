"""Asking a service on the bus as a client does: the provisioning verb, a vault's verbs.

A service answers with the micro service API's error headers (`Nats-Service-Error-Code`,
`Nats-Service-Error`) when it refuses; `ask_service` raises those as `ServiceError`. `ask`
follows every page of the provisioning verb (see the README) and merges them into one answer
shaped like a page with every page's `entries` and `malformed` joined, the last page's `pages` and
`total` (a streamed listing's earlier pages do not know them yet), and no `page` or `next`.
Used by `mesh-provisioner query`, the node client, the tests and the benchmarks.

`ask_patiently` is `ask` for a person waiting at a terminal: a seat that is restarting, busy or
gone is asked again with short attempts until an overall deadline, and a listing whose pages the
seat forgot (410) is started again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any

import anyio

from registry.contract import buckets
from registry.errors import BusTimeout, NoResponders, ServiceError
from registry.wire.bus import Bus, Message

log = logging.getLogger(__name__)

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
    return await _follow(dict(request or {}), partial(ask_page, bus, reply_wait=reply_wait))


PageAsker = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]


async def _follow(request: Mapping[str, Any], ask_one: PageAsker) -> dict[str, Any]:
    """Every page joined; `pages` and `total` from the last page (a streamed listing knows them
    only there). A key written during a streamed listing is answered again at its new place: the
    joined answer keeps each key's last occurrence, and its `total` counts what it keeps."""
    answer = await ask_one(request)
    merged = {key: value for key, value in answer.items() if key not in ("page", "next")}
    latest = _Latest()
    latest.add(answer)
    while answer["next"] is not None:
        answer = await ask_one({**request, "cursor": answer["next"]})
        latest.add(answer)
    merged["entries"], merged["malformed"] = list(latest.entries.values()), list(latest.malformed.values())
    merged["pages"], merged["total"] = answer["pages"], answer["total"]
    if latest.repeated:
        merged["total"] = {"entries": len(merged["entries"]), "malformed": len(merged["malformed"])}
    return merged


class _Latest:
    """Entries and malformed keys by key, each key where it was answered last."""

    def __init__(self) -> None:
        self.entries: dict[Any, Any] = {}
        self.malformed: dict[Any, Any] = {}
        self.repeated = False

    def add(self, page: Mapping[str, Any]) -> None:
        for found, into in ((page["entries"], self.entries), (page["malformed"], self.malformed)):
            for item in found:
                key = (item.get("bucket"), item["key"]) if isinstance(item, dict) and "key" in item else object()
                before = self.entries.pop(key, None) or self.malformed.pop(key, None)
                self.repeated = self.repeated or before is not None
                into[key] = item


FIRST_ATTEMPT = timedelta(seconds=2)
PAUSES = (0.1, 0.2, 0.5, 1.0)  # seconds between asking a seat that is not there, growing


async def ask_patiently(
    bus: Bus, request: Mapping[str, Any] | None = None, *, within: timedelta, attempt: timedelta = FIRST_ATTEMPT
) -> dict[str, Any]:
    """`ask`, retried until `within` has passed: a page not answered within its attempt (`attempt`,
    doubled after each timeout, for a large listing's slow first page), nobody serving the verb, or
    a 503 is asked again; a 410 (the seat forgot the listing: it restarted, or the cursor expired)
    starts the listing again. Raises `BusTimeout` "no answer from the seat within N s", or the
    `ServiceError` of any other refusal."""
    retry = _Retry(attempt)
    request = dict(request or {})
    with anyio.move_on_after(within.total_seconds()):
        while True:
            try:
                return await _follow(request, partial(_page_patiently, bus, retry))
            except ServiceError as err:
                if err.code != "410":
                    raise
                await retry.pause("the seat forgot the listing (410); starting it again")
    raise BusTimeout(f"ask {buckets.VERB_SUBJECT}", f"no answer from the seat within {within.total_seconds():g} s")


async def _page_patiently(bus: Bus, retry: _Retry, request: Mapping[str, Any]) -> dict[str, Any]:
    while True:
        try:
            return await ask_page(bus, request, reply_wait=retry.reply_wait)
        except BusTimeout:
            retry.timed_out()
        except NoResponders:
            await retry.pause("nobody serves the verb yet; asking again")
        except ServiceError as err:
            if err.code != "503":
                raise
            await retry.pause(f"the seat is busy ({err.description}); asking again")


class _Retry:
    """How long the next attempt waits for its answer, and the pause before asking a seat that is not there."""

    def __init__(self, attempt: timedelta) -> None:
        self.reply_wait = attempt
        self._pauses = 0

    def timed_out(self) -> None:
        log.info("no answer within %g s; asking again", self.reply_wait.total_seconds())
        self.reply_wait *= 2

    async def pause(self, why: str) -> None:
        (log.info if self._pauses == 0 else log.debug)("%s", why)
        await anyio.sleep(PAUSES[min(self._pauses, len(PAUSES) - 1)])
        self._pauses += 1


async def ask_page(bus: Bus, request: Mapping[str, Any], *, reply_wait: timedelta | None = None) -> dict[str, Any]:
    """One page: the verb's answer to `request` as it is sent."""
    reply = await ask_service(bus, buckets.VERB_SUBJECT, json.dumps(request).encode(), reply_wait=reply_wait)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer
