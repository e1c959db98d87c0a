"""Resolution: a placeholder's value, found only through the registry.

The client reads `mesh-provisioner_registry` (every key; each value a `RegistryEntry`) to learn
where each kind is answered; nothing about domains is known here. For `${kind:name}` the entry's
answer `name` pattern splits the name into fields. The fields a template may use are `node`,
`module` (the consuming module), `kind`, `name`, the pattern's fields and the answer's `parts`
(text templates rendered from the others).

A bucket answer names the bucket `render(answer.bucket, fields)` and the key
`KeyShape(answer.key).build(**fields)` (an optional tail is used when its fields are given):

- `read = "value"`: the JSON at the key. A JSON string is used as is; any other JSON is used
  compact-encoded (`5432`, `{"a":1}`); `null`, a missing or a deleted key is a missing value.
- `read = "plan"`: the value at the key is `{"plan": {"<kind>": {"<name>": value}}}` (the
  controller's assignments mirror, key `<node>.<module>`); `plan[kind][name]` is used as above.
- `read = "items"`: every key under the shape without its last field, listed through one
  server-side filter (`<node>.<collection>.*` in the collect bucket); each value is
  `{"items": [...]}`. Items are ordered by the last field (the contributor), then as given, and
  joined by newlines. A collection nobody contributes to is empty text.

A verb answer is asked on request/reply of `answer.subject` with the JSON body
`{"node", "module", "kind", "name"}`; the answer is `{"value": "<text>"}`, or a service error
(`Nats-Service-Error` / `Nats-Service-Error-Code` headers). Verb values are secrets: they are
never stored, logged or put in a reason, and live only during one reconcile.

Whatever cannot be resolved (a kind the registry does not know, a missing bucket or value, a
verb that times out or errors) raises `Pending` with the reason; the module then stays pending.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

import anyio
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue
from pydantic import ValidationError

from registry import buckets, keys
from registry.bus import Bus, BusError
from registry.errors import RegistryError
from registry.keys import KeyShape, shape_of
from registry.kv import KvItem, get_latest, snapshot
from registry.models import BucketAnswer, CollectValue, RegistryEntry, VerbAnswer
from registry.placeholders import Placeholder
from registry.templates import pattern_of, render

log = logging.getLogger(__name__)

T = TypeVar("T")


class Pending(Exception):
    """A placeholder that cannot be resolved now; `reason` never holds a value."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, order=True)
class Source:
    """A place a value was read from: a bucket and a subject filter relative to it."""

    bucket: str
    filter: str


@dataclass
class Registry:
    """The registry's entries by kind, and the kinds whose entry cannot be read, with why."""

    entries: dict[str, RegistryEntry] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


REGISTRY_SOURCE = Source(buckets.REGISTRY.name, ">")


async def read_registry(bus: Bus) -> Registry:
    registry = Registry()
    for item in await snapshot(bus, buckets.REGISTRY.name):
        try:
            kind = keys.REGISTRY.parse(item.key)["kind"]
        except RegistryError as err:
            log.warning("registry key out of shape: %s", err)
            continue
        try:
            registry.entries[kind] = RegistryEntry.model_validate_json(item.value)
        except ValidationError as err:
            registry.problems[kind] = f"the registry entry of kind {kind!r} cannot be read: {err.errors()[0]['msg']}"
    return registry


class _Once(Generic[T]):
    """Each key fetched once per reconcile, however many ask for it at the same time; a `Pending`
    is remembered like a value."""

    def __init__(self) -> None:
        self._done: dict[Hashable, T | Pending] = {}
        self._running: dict[Hashable, anyio.Event] = {}

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> T:
        while key not in self._done:
            running = self._running.get(key)
            if running is not None:
                await running.wait()  # the fetch under way ends in `_done`, or is tried again if it failed
                continue
            self._running[key] = anyio.Event()
            try:
                self._done[key] = await fetch()
            except Pending as pending:
                self._done[key] = pending
            finally:
                self._running.pop(key).set()
        found = self._done[key]
        if isinstance(found, Pending):
            raise found
        return found


class Resolver:
    """Resolves placeholders for one reconcile; remembers every source it read, for watching."""

    def __init__(self, bus: Bus, registry: Registry, *, node: str, verb_timeout: timedelta) -> None:
        self._bus = bus
        self._registry = registry
        self._node = node
        self._verb_timeout = verb_timeout
        self._kvs: _Once[KeyValue] = _Once()
        self._values: _Once[str] = _Once()
        self._resolved: _Once[str] = _Once()
        self.sources: set[Source] = {REGISTRY_SOURCE}
        self.asked_verbs = False

    async def prefetch(self, wanted: Iterable[tuple[str, Placeholder]], *, at_once: int = 64) -> None:
        """Resolves every (module, placeholder) concurrently, so that `resolve` then answers from
        memory: one reconcile costs about one round trip per `at_once` distinct values."""
        queue = sorted(set(wanted), reverse=True)

        async def worker() -> None:  # a few workers draining one list cost less than a task per value
            while queue:
                module, placeholder = queue.pop()
                with suppress(Pending):  # remembered; `resolve` raises it again for its module
                    await self.resolve(module, placeholder)

        async with anyio.create_task_group() as tasks:
            for _ in range(min(at_once, len(queue))):
                tasks.start_soon(worker)

    async def resolve(self, module: str, placeholder: Placeholder) -> str:
        """The value of `placeholder` for `module`, or `Pending` with why; each asked once per reconcile."""
        return await self._resolved.get((module, placeholder), lambda: self._resolve_now(module, placeholder))

    async def _resolve_now(self, module: str, placeholder: Placeholder) -> str:
        entry = self._registry.entries.get(placeholder.kind)
        if entry is None:
            problem = self._registry.problems.get(placeholder.kind)
            raise Pending(problem or f"the registry knows no kind {placeholder.kind!r}")
        fields = self._fields(module, placeholder, entry)
        answer = entry.answer
        if isinstance(answer, VerbAnswer):
            return await self._ask(answer, module, placeholder)  # `resolve` asks once per module and name
        return await self._read(answer, placeholder, fields)

    def _fields(self, module: str, placeholder: Placeholder, entry: RegistryEntry) -> dict[str, str]:
        fields = {"node": self._node, "module": module, "kind": placeholder.kind, "name": placeholder.name}
        try:
            fields.update(pattern_of(entry.answer.name).split(placeholder.name))
            if isinstance(entry.answer, BucketAnswer):
                fields.update({part: render(text, fields) for part, text in entry.answer.parts.items()})
        except RegistryError as err:
            raise Pending(f"name {placeholder.name!r} does not fit kind {placeholder.kind!r}: {err}") from None
        return fields

    async def _read(self, answer: BucketAnswer, placeholder: Placeholder, fields: dict[str, str]) -> str:
        try:
            bucket = render(answer.bucket, fields)
            shape = shape_of(answer.key)
            if answer.read == "items":
                prefix = _items_prefix(shape, fields)
                return await self._values.get(("items", bucket, prefix), lambda: self._items(bucket, shape, prefix))
            key = shape.build(**fields)
        except RegistryError as err:
            raise Pending(f"the registry's answer for kind {placeholder.kind!r} cannot be used: {err}") from None
        value = await self._values.get(("get", bucket, key), lambda: self._get(bucket, key))
        if answer.read == "plan":
            return _from_plan(value, bucket, key, placeholder)
        return _text_of(value, f"{bucket} key {key!r}")

    async def _bind(self, bucket: str) -> KeyValue:
        return await self._kvs.get(bucket, lambda: self._bind_now(bucket))

    async def _bind_now(self, bucket: str) -> KeyValue:
        try:
            with self._bus.translate_errors(f"bind {bucket}"):
                kv: KeyValue = await self._bus.js.key_value(bucket)
        except BusError as err:
            missing = isinstance(err.__cause__, nats.js.errors.BucketNotFoundError)
            raise Pending(f"bucket {bucket} does not exist" if missing else str(err)) from None
        return kv

    async def _get(self, bucket: str, key: str) -> str:
        self.sources.add(Source(bucket, key))
        kv = await self._bind(bucket)
        try:
            item = await get_latest(self._bus, bucket, key)
        except BusError as err:
            if not isinstance(err.__cause__, nats.errors.NoRespondersError):
                raise Pending(str(err)) from None
            item = await self._get_without_direct(kv, bucket, key)  # a bucket created without direct get
        if item is None or item.deleted:
            raise Pending(f"no value at {bucket} key {key!r}")
        return item.value.decode("utf-8", errors="replace")

    async def _get_without_direct(self, kv: KeyValue, bucket: str, key: str) -> KvItem | None:
        try:
            with self._bus.translate_errors(f"get {bucket} {key}"):
                entry = await kv.get(key)
        except BusError as err:
            if isinstance(err.__cause__, nats.js.errors.KeyNotFoundError):
                return None
            raise Pending(str(err)) from None
        return KvItem(key, entry.value or b"", entry.revision or 0)

    async def _items(self, bucket: str, shape: KeyShape, prefix: str) -> str:
        subject_filter = f"{prefix}.*"
        self.sources.add(Source(bucket, subject_filter))
        await self._bind(bucket)
        try:
            listed = await snapshot(self._bus, bucket, [subject_filter])
        except BusError as err:
            raise Pending(str(err)) from None
        contributions: list[tuple[str, tuple[str, ...]]] = []
        for item in listed:
            try:
                contributor = shape.parse(item.key)[shape.fields[-1]]
                contributions.append((contributor, CollectValue.model_validate_json(item.value).items))
            except (RegistryError, ValidationError):
                log.warning("skipped %s key %r: not a contribution", bucket, item.key)
        return "\n".join(i for _, items in sorted(contributions) for i in items)

    async def _ask(self, answer: VerbAnswer, module: str, placeholder: Placeholder) -> str:
        self.asked_verbs = True
        body = json.dumps({"node": self._node, "module": module, "kind": placeholder.kind, "name": placeholder.name})
        timeout = self._verb_timeout.total_seconds()
        try:
            reply = await self._bus.nc.request(answer.subject, body.encode(), timeout=timeout)
        except nats.errors.NoRespondersError:
            raise Pending(f"nobody answers {answer.subject}") from None
        except (nats.errors.TimeoutError, TimeoutError):
            raise Pending(f"{answer.subject} did not answer within {timeout:g} s") from None
        except nats.errors.Error as err:
            raise Pending(f"{answer.subject} could not be asked: {type(err).__name__}") from None
        headers = reply.headers or {}
        if "Nats-Service-Error" in headers or "Nats-Service-Error-Code" in headers:
            code = headers.get("Nats-Service-Error-Code", "?")
            raise Pending(f"{answer.subject} answered error {code}: {headers.get('Nats-Service-Error', '')}")
        try:
            value = json.loads(reply.data)["value"]
        except (ValueError, KeyError, TypeError):
            value = None
        if not isinstance(value, str):
            raise Pending(f"{answer.subject} answered without a text 'value'")
        return value


def _items_prefix(shape: KeyShape, fields: dict[str, str]) -> str:
    if shape.optional or len(shape.required) < 2:
        raise RegistryError(f"shape {shape.text} cannot be listed by items")
    return shape_of(".".join(token.text for token in shape.required[:-1])).build(**fields)


def _text_of(raw: str, where: str) -> str:
    try:
        value = json.loads(raw)
    except ValueError:
        raise Pending(f"the value at {where} is not JSON") from None
    return _as_text(value, where)


def _as_text(value: object, where: str) -> str:
    if value is None:
        raise Pending(f"the value at {where} is null")
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _from_plan(raw: str, bucket: str, key: str, placeholder: Placeholder) -> str:
    where = f"{bucket} key {key!r}"
    try:
        plan = json.loads(raw)["plan"]
        value = plan[placeholder.kind][placeholder.name]
    except ValueError:
        raise Pending(f"the value at {where} is not JSON") from None
    except (KeyError, TypeError):
        raise Pending(f"the plan at {where} has no {placeholder.kind} {placeholder.name!r}") from None
    return _as_text(value, f"{where} plan")
