"""The registry bucket as it stands, kept in memory by a watch, so `what=registry` reads no bucket.

The registry is small (one key per kind) and asked often: every node client reads it. The view
is filled by a snapshot at start, then follows the bucket through a watch, so a key put straight
into the bucket (drift) is in the next answer within milliseconds, and the answer's bytes are
encoded once per change instead of once per request. An answer that does not fit one page is
left to the ordinary listing, which pages it.

The watch's consumer is named per seat and purpose (`seat-registry-<id of this seat>`): the seat,
which holds the whole data account, deletes it by that name before re-creating it after a
reconnect and when it stops, so outages leave no consumer behind.

When the registry's stream went back (a server restarted from a store behind the writes it had
acknowledged), the watch starts again from what the stream holds (`registry.wire.watch`): the view
drops every entry and is not ready again until it has read up to the stream's end, and meanwhile
`what=registry` is listed from the bucket, never answered with entries it no longer holds. Nor
from a reconnect until the watch has checked the stream and opened its feed again: the restarted
server may be the one that went back.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError

from provisioner.verb.listing import paginate_listing
from registry.contract import BucketAnswer, JsonRefused, RegistryEntry, buckets, read_json
from registry.wire import Bus, KvItem, ScopedWatch, current_snapshot, scoped_watch

log = logging.getLogger(__name__)


class RegistryView:
    """The latest entry of every registry key, and the one-page answer they make."""

    def __init__(self) -> None:
        self.consumer_name = f"seat-registry-{uuid.uuid4().hex[:8]}"
        self._items: dict[str, KvItem] = {}
        self._answer: tuple[int, bytes | None] | None = None
        self._shared: frozenset[str] | None = None
        self._refill_to: int | None = None
        self._watch: ScopedWatch | None = None
        self.ready = False

    def apply(self, item: KvItem) -> None:
        known = self._items.get(item.key)
        if known is None or item.revision > known.revision:
            self._items[item.key] = item
            self._answer = None
            self._shared = None

    def shared_collections(self) -> frozenset[str]:
        """The collections the registry shares across the mesh (`BucketAnswer.shared`): a node is
        answered every node's contributions to them. None before the view is ready, nor from an
        entry it cannot read (said at debug: `what=registry` names it to whoever asks)."""
        if not self.ready:
            return frozenset()
        if self._shared is None:
            self._shared = frozenset(name for item in self._items.values() for name in _shared_by(item))
        return self._shared

    def answer(self, budget: int) -> bytes | None:
        """The whole `what=registry` answer, or None when it needs more than one page or the
        watch is not current (`ScopedWatch.current`)."""
        if not self.ready or (self._watch is not None and not self._watch.current):
            return None
        if self._answer is None or self._answer[0] != budget:
            current = [item for item in self._items.values() if not item.deleted]
            pages = paginate_listing("registry", current, budget=budget, cursor_of=_one_page)
            self._answer = (budget, pages[0] if len(pages) == 1 else None)
        return self._answer[1]

    def reset(self, last: int) -> None:
        """Drops every entry: the stream went back to `last`, and the watch reads it again."""
        self._items.clear()
        self._answer = self._shared = None
        self._refill_to = last
        self.ready = last == 0

    def _follow_item(self, item: KvItem) -> None:
        self.apply(item)
        if not self.ready and self._refill_to is not None and item.revision >= self._refill_to:
            self._refill_to = None
            self.ready = True
            log.info("registry view: read again up to sequence %d", item.revision)

    async def follow(
        self,
        bus: Bus,
        *,
        check: timedelta = timedelta(seconds=30),
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Fills the view, reports ready, then applies every change until cancelled; the stream is
        checked for going back every `check` (`registry.wire.watch`)."""
        async with scoped_watch(
            bus,
            buckets.REGISTRY,
            ">",
            name=self.consumer_name,
            on_item=self._follow_item,
            on_reset=self.reset,
            check=check,
        ) as watch:
            self._watch = watch
            for item in await current_snapshot(bus, buckets.REGISTRY, include_deleted=True):
                self.apply(item)
            self.ready = True
            task_status.started()
            await anyio.sleep_forever()


def _shared_by(item: KvItem) -> tuple[str, ...]:
    if item.deleted:
        return ()
    try:
        entry = RegistryEntry.model_validate(read_json(item.value))
    except (ValidationError, JsonRefused) as err:
        log.debug("registry key %r not read for shared collections: %s", item.key, err)
        return ()
    answer = entry.answer
    if not isinstance(answer, BucketAnswer) or answer.read != "items" or answer.bucket != buckets.COLLECT.name:
        return ()
    return answer.shared


def _one_page(page: int) -> str:
    """The cursor of a page after the first, which the view never answers."""
    return str(page)
