"""One node's listing of its own keys (`what=needs` or `what=applied` with `node` alone), its page
kept between two of the node's writes.

A node asks for its own keys on every reconcile in which they moved; read from the bucket, each
request cost the seat a batch read and the page's encoding (about 1.3 ms of its CPU for a hundred
keys). The page is now kept under the node's stamp: the stream sequence and the server's time of
the last message under `<node>.>` (any write or delete of one of its keys moves it). The stamp is
asked again for every request (`registry.wire.last_stamp`: one direct get, or the leader's message
get for a replicated stream, whose replica could be behind), so a node always reads its own
writes, and a page is answered only under the stamp it was read under. The page was read after
its stamp, so it is never older than the stamp says. A stream rolled back and written again can
reach a kept sequence with another message; its time differs, so the page is not answered.

A quota purge leaves no message: the node's stamp stays where it was when the purge left a later
write of the node in place. So the seat follows the purge records (`provisioner.seat.site_purges`),
and a page holding an entry at or below a node's purged revision is neither kept nor answered: the
bucket is read, until the purge (at a site, its own purge of its copy) has taken the entry away.

Memory: at most `max_bytes` of pages, each at most one page; the least recently asked go first.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError

from provisioner.seat.site_purges import PREFIX, PurgeRecord
from registry.contract import Bucket, buckets, encode_token
from registry.errors import KeyShapeError
from registry.wire import Bus, KvItem, LastStamp, ScopedWatch, current_snapshot, scoped_watch

log = logging.getLogger(__name__)

MAX_BYTES = 64 << 20  # of pages kept
OWN_LISTINGS: dict[str, Bucket] = {"needs": buckets.NEEDS, "applied": buckets.APPLIED}


@dataclass(frozen=True, slots=True)
class OwnListing:
    """A node's listing of its own keys of `what`, asked under `stamp`, a page of `budget` bytes."""

    what: str
    node: str
    stamp: LastStamp
    budget: int

    @property
    def where(self) -> tuple[str, str]:
        return self.what, encode_token(self.node)


@dataclass(frozen=True, slots=True)
class _Kept:
    stamp: LastStamp
    budget: int
    lowest: int  # the lowest revision of its entries (none: no bound)
    page: bytes


class OwnPages:
    """The kept page of each node's own listing, by what it lists and the node's key token."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._kept: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
        self._purged: dict[tuple[str, str], int] = {}  # (bucket, node token): the last revision purged
        self._bytes = 0
        self._watches: list[ScopedWatch] = []
        self._followed = False

    @property
    def ready(self) -> bool:
        """The purge records stored at start read, and their watches current (`ScopedWatch.current`:
        after a reconnect, a purge recorded meanwhile is not known until they are)."""
        return self._followed and all(watch.current for watch in self._watches)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def page(self, listing: OwnListing) -> bytes | None:
        """The page kept of `listing` under its stamp and budget, if one is, and no purge since
        reached one of its entries."""
        where = listing.where
        kept = self._kept.get(where)
        if (
            kept is None
            or (kept.stamp, kept.budget) != (listing.stamp, listing.budget)
            or self._purged_below(where, kept.lowest)
        ):
            return None
        self._kept.move_to_end(where)
        return kept.page

    def keep(self, listing: OwnListing, lowest: int, page: bytes) -> None:
        """Keeps `page` of `listing`, read after its stamp was; `lowest`: its entries' lowest revision."""
        where = listing.where
        if not self.ready or len(page) > self.max_bytes or self._purged_below(where, lowest):
            return
        self._drop(where)
        self._kept[where] = _Kept(listing.stamp, listing.budget, lowest, page)
        self._bytes += len(page)
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._kept)))

    def forget_purged(self, bucket: str, token: str, upto: int) -> None:
        """A purge of node `token`'s keys of `bucket` up to revision `upto`, as the hub recorded it."""
        what = next((what for what, listed in OWN_LISTINGS.items() if listed.name == bucket), None)
        if what is None:
            return
        where = (what, token)
        self._purged[where] = max(upto, self._purged.get(where, 0))

    def reset(self, _last: int = 0) -> None:
        """Forgets every page and purge: the purge records' stream went back, and is read again."""
        self._kept.clear()
        self._purged.clear()
        self._bytes = 0

    def _purged_below(self, where: tuple[str, str], lowest: int) -> bool:
        return lowest <= self._purged.get(where, 0)

    def _drop(self, where: tuple[str, str]) -> None:
        kept = self._kept.pop(where, None)
        if kept is not None:
            self._bytes -= len(kept.page)

    def _follow_record(self, item: KvItem) -> None:
        if item.deleted:
            return
        try:
            parsed = buckets.LEASES.shape.parse(item.key)
            upto = PurgeRecord.model_validate_json(item.value).upto
        except (KeyShapeError, ValidationError) as err:
            log.debug("purge record %r not read by the kept pages: %s", item.key, err)
            return
        self.forget_purged(parsed["role"].removeprefix(PREFIX), encode_token(parsed["name"]), upto)

    async def follow(
        self,
        bus: Bus,
        *,
        check: timedelta = timedelta(seconds=30),
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Follows the purge records of every bucket listed here, reports ready once those stored
        are read, then until cancelled (the stream checked for going back every `check`)."""
        filters = [f"{encode_token(PREFIX + bucket.name)}.>" for bucket in OWN_LISTINGS.values()]
        async with AsyncExitStack() as watches:
            for subject_filter in filters:
                watch = scoped_watch(
                    bus, buckets.LEASES, subject_filter, on_item=self._follow_record, on_reset=self.reset, check=check
                )
                self._watches.append(await watches.enter_async_context(watch))
            self._apply(await current_snapshot(bus, buckets.LEASES, filters))
            self._followed = True
            task_status.started()
            await anyio.sleep_forever()

    def _apply(self, records: Iterable[KvItem]) -> None:
        for item in records:
            self._follow_record(item)


def lowest_revision(items: Iterable[KvItem]) -> int:
    """The lowest revision among `items` (no entry: above any purge)."""
    return min((item.revision for item in items), default=1 << 62)
