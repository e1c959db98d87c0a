"""The provider's side of `bound`: who consumes a provider, and what it bound for each of them.

A module that writes `${bound:<provider>:<provision>[:<local>]}` registers the need
`<node>.<module>.bound.<provider>:<provision>[:<local>]` in the needs bucket. The provider reads
those needs through the provisioning verb (a provider is answered about the whole mesh), asks its
own program what it binds for each (`bind`), and makes `<provider>_bound` hold exactly that, under
the contract's key `<node>.<module>.<provision>[.<local>]`:

    changes = await provide(bus, "postgres", lambda need: {"host": "db-1", "port": 5432}.get(need.local or ""))

Only what differs is written, keys no longer wanted are deleted, and every write is conditional on
the revision it was compared against. The bucket is the provider's own, so every key in it is its
footprint: a key nobody needs any more is deleted whoever wrote it. A provider's grants let it read
its bucket by batch direct get only, which answers at most `MULTI_LAST_LIMIT` keys: a provider with
more bound keys gets a `BusError` saying so rather than a partial converge.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from registry.access import bound_bucket
from registry.contract import BOUND, BUILT_IN, pattern_of
from registry.errors import TemplateError
from registry.runtime import event
from registry.wire import Bus, Changes, ask, converge, get_last_many

log = logging.getLogger(__name__)

BOUND_KIND = "bound"
_NAME = pattern_of(BUILT_IN["bound"].name)

__all__ = ["BOUND_KIND", "Bind", "BoundNeed", "bound_needs", "desired_values", "provide"]


@dataclass(frozen=True)
class BoundNeed:
    """One consumer's need of this provider: module `module` on `node` reads `provision`
    (and, when given, its `local` part)."""

    node: str
    module: str
    provision: str
    local: str | None = None

    @property
    def key(self) -> str:
        """Its key in `<provider>_bound`: `<node>.<module>.<provision>[.<local>]`, escaped."""
        return BOUND.build(node=self.node, module=self.module, provision=self.provision, local=self.local or "")


# What the provider binds for a need: a JSON-encodable value, or None when it binds nothing (no key).
Bind = Callable[[BoundNeed], Any]


async def bound_needs(bus: Bus, provider: str) -> list[BoundNeed]:
    """Every need of kind `bound` naming `provider`, mesh-wide, sorted; asked of the provisioning verb."""
    answer = await ask(bus, {"what": "needs"})
    needs: set[BoundNeed] = set()
    for entry in answer["entries"]:
        if entry.get("kind") != BOUND_KIND:
            continue
        need = _need_of(provider, entry)
        if need is not None:
            needs.add(need)
    return sorted(needs, key=lambda n: (n.node, n.module, n.provision, n.local or ""))


def _need_of(provider: str, entry: dict[str, Any]) -> BoundNeed | None:
    try:
        parts = _NAME.split(str(entry["name"]))
    except TemplateError:
        log.warning("a bound need whose name has no provision: skipped", extra=event(key=str(entry.get("key"))))
        return None
    if parts["provider"] != provider:
        return None
    return BoundNeed(str(entry["node"]), str(entry["module"]), parts["provision"], parts.get("local"))


def desired_values(needs: list[BoundNeed], bind: Bind) -> dict[str, bytes]:
    """The bucket's wanted content: each need's key to the JSON of what `bind` gives it."""
    desired: dict[str, bytes] = {}
    for need in needs:
        value = bind(need)
        if value is not None:
            desired[need.key] = json.dumps(value, ensure_ascii=False, sort_keys=True).encode("utf-8")
    return desired


async def provide(bus: Bus, provider: str, bind: Bind) -> Changes:
    """Makes `<provider>_bound` hold what `bind` gives each need of `provider`, and nothing else.

    Raises `ConvergeError` (saying what was already done) when a write fails or another writer
    changed a key in between: run it again."""
    bucket = bound_bucket(provider)
    desired = desired_values(await bound_needs(bus, provider), bind)
    current = await get_last_many(bus, bucket, ">")
    changes = await converge(bus, bucket, current, desired)
    if changes:
        log.info("bound values converged: %s", changes.summary(), extra=event(bucket=bucket.name))
    return changes
