"""Resolution: a placeholder's value, found only through the registry.

The client reads the registry bucket (one batch direct get: no consumer, and the bucket itself
rather than the seat's verb) to learn where each kind is answered; nothing about domains is
known here. How a registry answer is read (`value`, `plan`, `items`, a verb) is the contract
in docs/verb.md ("The registry"); this module follows it. Each value is fetched once per reconcile
however many modules use it, concurrently (`Resolver.prefetch`), and every place read is kept
as a `Source` so that watch mode can follow exactly those keys.

A node has no JetStream API besides direct gets: a value is read by direct get of its key (no
responders means the bucket does not exist, or has no direct get), and a collection of the
node's own collect bucket is listed by the provisioning verb. No other bucket can be listed.
A collection leaves out the contributions of every other node the seat marked gone
(`Forgotten`, below: their marks read once per reconcile, only when another
node contributes); this node's own are never left out. In a shared collection's value each
contribution's items follow the line `# mesh-provisioner node=<node> contributor=<contributor>`
(their key tokens), so that a consumer (ssh's known_hosts, which reads it as a comment) can tell
whose each line is; a contribution that could pass a line as another's (an item of more than one
line, or one reading as such a line) is left out, said in the log.

Verb values are secrets: never stored, logged or put in a reason, and they live only during one
reconcile. A verb is asked once per reconcile for each distinct kind and name, however many modules
use it, naming the first module that wants it: a vault answers a node by the name asked (it cannot
tell which of the node's modules asks, so a value per module would need a name per module).
Whatever cannot be resolved raises `Pending` with the reason; its module stays pending. So does a
value an env file cannot carry (`carriable`): a NUL, which sh reads as the value's end (a lone
surrogate, which is no UTF-8 text, is refused by the JSON reader already).
Every JSON read here (a value, a plan, a registry entry, a vault's answer) goes through
`registry.contract.bounded_json.read_json`: a value too deep or too large is a reason naming its key, never a crash.

Forgotten nodes (`Forgotten`): whose contributions a collection leaves out.

The seat marks a node gone for good as `gone.<node>` in the fleet bucket
(`registry.contract.fleet`, `provisioner.seat.gone_marks`) and deletes the mark once the node is
back. A node's grants let it read the whole fleet bucket by batch direct get, so when it resolves
a collection it reads the marks of exactly the other nodes that contribute to it: one batch per
`MULTI_LAST_LIMIT` contributors, once per reconcile, and none at all while every contribution is
its own. A node never leaves its own contributions out, marked or not (its mark outlives its
return until the seat's next round).

The marks are read fail-open: a fleet bucket that does not answer (a seat older than the marks,
the bus away) leaves nothing out, said once per reconcile, so that a collection is never emptied
by an outage; a gone node's contributions are then read as they were before marks existed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

import anyio
from pydantic import ValidationError

from provisioner_client.resolving.scope import NodeScope, item_of
from registry.contract import (
    Bucket,
    BucketAnswer,
    CollectRow,
    CollectValue,
    JsonRefused,
    KeyShape,
    Placeholder,
    RegistryEntry,
    VerbAnswer,
    buckets,
    decode_token,
    fleet,
    keys,
    node_token,
    pattern_of,
    read_json,
    render,
    shape_of,
)
from registry.errors import BusError, BusTimeout, NoResponders, RegistryError, ServiceError, TokenError
from registry.wire import MULTI_LAST_LIMIT, Bus, KvItem, answer_of, ask_service, get_direct, get_last_many

log = logging.getLogger(__name__)

T = TypeVar("T")


class Pending(Exception):
    """A placeholder that cannot be resolved now; `reason` never holds a value."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Source:
    """A place a value was read from: a bucket and a subject filter relative to it."""

    bucket: Bucket
    filter: str


@dataclass
class Registry:
    """The registry's entries by kind, and the kinds whose entry cannot be read, with why."""

    entries: dict[str, RegistryEntry] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


REGISTRY_SOURCE = Source(buckets.REGISTRY, ">")


async def read_registry(bus: Bus) -> Registry:
    """The registry's entries, read whole by one batch direct get."""
    registry = Registry()
    for item in await get_last_many(bus, buckets.REGISTRY, ">"):
        if item.deleted:
            continue
        try:
            kind = keys.REGISTRY.parse(item.key)["kind"]
        except RegistryError as err:
            log.warning("registry key out of shape: %s", err, extra={"key": item.key})
            continue
        try:
            registry.entries[kind] = RegistryEntry.model_validate(read_json(item.value))
        except JsonRefused as err:
            registry.problems[kind] = f"the registry entry of kind {kind!r} cannot be read: {err.reason}"
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

    def put(self, key: Hashable, found: T | Pending) -> None:
        """Remembers what was read for `key` another way (a batch), unless it was fetched already."""
        if key not in self._done and key not in self._running:
            self._done[key] = found


# Pages of the verb's answer a shared collection may take (each at most the connection's
# max_payload, 1 MiB by default): every node's contributions, which no one node bounds, read into
# one env file value. Past it the collection is pending, saying so.
MAX_SHARED_PAGES = 16


class Resolver:
    """Resolves placeholders for one reconcile; remembers every source it read, for watching."""

    def __init__(
        self,
        bus: Bus,
        registry: Registry,
        *,
        node: str,
        verb_timeout: timedelta,
        own_collect: Mapping[str, bytes] | None = None,
        forgotten: Forgotten | None = None,
    ) -> None:
        """`own_collect`: this node's keys of the collect bucket as its converge leaves them; its
        collections are then read from it, not listed by the verb. `forgotten`: the gone marks
        read this reconcile (`Forgotten`), else read afresh."""
        self._bus = bus
        self._own_collect = own_collect
        self.forgotten = forgotten or Forgotten(bus, node=node)
        self._registry = registry
        self._node = node
        self._verb_timeout = verb_timeout
        self._values: _Once[str] = _Once()
        self._resolved: _Once[str] = _Once()
        self.sources: set[Source] = {REGISTRY_SOURCE}

    async def prefetch(self, wanted: Iterable[tuple[str, Placeholder]], *, at_once: int = 64) -> None:
        """Resolves every (module, placeholder) concurrently, so that `resolve` then answers from
        memory: one reconcile costs about one round trip per `at_once` distinct values, and one
        per mesh-wide bucket (`_read_batches`)."""
        queue = sorted(set(wanted), reverse=True)
        await self._read_batches(queue)

        async def worker() -> None:  # a few workers draining one list cost less than a task per value
            while queue:
                module, placeholder = queue.pop()
                with suppress(Pending):  # remembered; `resolve` raises it again for its module
                    await self.resolve(module, placeholder)

        async with anyio.create_task_group() as tasks:
            for _ in range(min(at_once, len(queue))):
                tasks.start_soon(worker)

    @property
    def bus(self) -> Bus:
        return self._bus

    @property
    def node(self) -> str:
        return self._node

    def buckets_read(self, wanted: Iterable[tuple[str, Placeholder]]) -> list[Bucket]:
        """The buckets `wanted` reads values from by `value` or `plan`, as far as the registry tells."""
        found = (self._value_key(module, placeholder) for module, placeholder in wanted)
        return list({where[0].name: where[0] for where in found if where is not None}.values())

    async def _read_batches(self, wanted: Iterable[tuple[str, Placeholder]]) -> None:
        """Reads the values of each mesh-wide bucket by one batch direct get of their keys (a node
        is granted it on a bucket readable whole); a node-keyed bucket, granted per key only, a
        bucket without direct get or a batch that fails are left to one direct get per key."""
        by_bucket: dict[str, tuple[Bucket, set[str]]] = {}
        for module, placeholder in wanted:
            where = self._value_key(module, placeholder)
            if where is not None and where[0].shape.fields[:1] != ("node",):
                by_bucket.setdefault(where[0].name, (where[0], set()))[1].add(where[1])
        async with anyio.create_task_group() as tasks:
            for bucket, keys in by_bucket.values():
                if len(keys) > 1:
                    tasks.start_soon(self._read_batch, bucket, sorted(keys))

    async def _read_batch(self, bucket: Bucket, keys: list[str]) -> None:
        for start in range(0, len(keys), MULTI_LAST_LIMIT):
            chunk = keys[start : start + MULTI_LAST_LIMIT]
            try:
                found = {item.key: item for item in await get_last_many(self._bus, bucket, chunk)}
            except BusError as err:
                log.debug("batch read of %s not answered (%s): one direct get per key", bucket.name, err.reason)
                return
            for key in chunk:
                self.sources.add(Source(bucket, key))
                self._values.put(("get", bucket.name, key), _value_of(found.get(key), bucket, key))

    def _value_key(self, module: str, placeholder: Placeholder) -> tuple[Bucket, str] | None:
        """Where a placeholder read by `value` or `plan` is, if it can be told."""
        entry = self._registry.entries.get(placeholder.kind)
        if entry is None or not isinstance(entry.answer, BucketAnswer) or entry.answer.read == "items":
            return None
        try:
            return _where(entry.answer, self._fields(module, placeholder, entry))
        except (Pending, RegistryError):
            return None

    def reads_shared(self, module: str, placeholder: Placeholder) -> bool:
        """Whether `placeholder` reads a collection shared across the mesh: listed by the verb, so
        that, as a verb's value, what it holds moves without any stamp of this node's moving."""
        entry = self._registry.entries.get(placeholder.kind)
        if entry is None or not isinstance(entry.answer, BucketAnswer) or not entry.answer.shared:
            return False
        try:
            return entry.answer.shares(self._fields(module, placeholder, entry).get("collection", ""))
        except Pending:
            return False

    async def values(
        self, module: str, placeholders: Iterable[Placeholder]
    ) -> tuple[dict[Placeholder, str], list[str]]:
        """The value of each of `module`'s placeholders, and each one pending with its reason; on
        a failure, the values found so far are dropped before it is raised."""
        values: dict[Placeholder, str] = {}
        reasons = []
        try:
            for placeholder in placeholders:
                try:
                    values[placeholder] = await self.resolve(module, placeholder)
                except Pending as pending:
                    reasons.append(f"{placeholder}: {pending.reason}")
        except BaseException:
            values.clear()
            raise
        return values, reasons

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
        if isinstance(answer, VerbAnswer):  # asked once per name: the body names the first module that wants it
            asked = ("verb", answer.subject, placeholder.kind, placeholder.name)
            return await self._values.get(asked, lambda: self._ask(answer, module, placeholder))
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
            if answer.read == "items":
                shape = shape_of(answer.key)
                bucket = Bucket(render(answer.bucket, fields), shape)
                prefix = _items_prefix(shape, fields)
                shared = answer.shares(fields.get("collection", ""))
                return await self._values.get(
                    ("items", bucket.name, prefix, shared), lambda: self._items(bucket, prefix, fields, shared=shared)
                )
            bucket, key = _where(answer, fields)
        except RegistryError as err:
            raise Pending(f"the registry's answer for kind {placeholder.kind!r} cannot be used: {err}") from None
        value = await self._values.get(("get", bucket.name, key), lambda: self._get(bucket, key))
        if answer.read == "plan":
            return _from_plan(value, bucket.name, key, placeholder)
        return _text_of(value, f"{bucket.name} key {key!r}")

    async def _get(self, bucket: Bucket, key: str) -> str:
        self.sources.add(Source(bucket, key))
        try:
            item = await get_direct(self._bus, bucket, key)
        except NoResponders as err:  # its reason names the bucket's subject, missing or not granted
            raise Pending(err.reason) from None
        except BusError as err:
            raise Pending(str(err)) from None
        found = _value_of(item, bucket, key)
        if isinstance(found, Pending):
            raise found
        return found

    async def _items(self, bucket: Bucket, prefix: str, fields: dict[str, str], *, shared: bool) -> str:
        if bucket.name != buckets.COLLECT.name or bucket.shape != buckets.COLLECT.shape:
            raise Pending(
                f"bucket {bucket.name} cannot be listed without a listing grant: a node lists only "
                "its own collections, through the provisioning verb"
            )
        self.sources.add(Source(bucket, f"{prefix}.*"))
        found = await self._collection(fields, prefix)
        if shared:
            self.sources.add(Source(bucket, f"*.{prefix.partition('.')[2]}.*"))
            found = await self._shared_collection(fields["collection"], prefix, own=found)
        listed = await self.forgotten.kept(found)
        contributions: list[tuple[str, str, str, tuple[str, ...]]] = []
        for item in listed:
            where = {"bucket": bucket.name, "key": item.key}
            try:
                parsed = bucket.shape.parse(item.key)
                items = CollectValue.model_validate(read_json(item.value)).items
            except (RegistryError, ValidationError, JsonRefused):
                log.warning("skipped %s key %r: not a contribution", bucket.name, item.key, extra=where)
                continue
            problem = _uncarried(items, shared=shared)
            if problem is not None:  # one node's item would leave the whole collection pending, or pass as another's
                log.warning("skipped %s key %r: %s", bucket.name, item.key, problem, extra=where)
                continue
            contributions.append((parsed["node"], parsed[bucket.shape.fields[-1]], item.key, items))
        lines = (line for *_, key, items in sorted(contributions) for line in _lines_of(key, items, shared=shared))
        return carriable("\n".join(lines), f"of {bucket.name} collection {fields['collection']!r}")

    async def _collection(self, fields: dict[str, str], prefix: str) -> list[KvItem]:
        """The contributions of one collection of this node: from `own_collect`, else listed by the verb."""
        if fields["node"] != self._node:
            raise Pending(f"collection {fields['collection']!r} of node {fields['node']!r} is not this node's")
        if self._own_collect is not None:
            return [KvItem(k, v, 0) for k, v in self._own_collect.items() if k.rpartition(".")[0] == prefix]
        try:
            return await NodeScope(self._node).read(self._bus, buckets.COLLECT, collection=fields["collection"])
        except NoResponders as err:
            raise Pending(err.reason) from None
        except BusError as err:
            collection = fields["collection"]
            raise Pending(f"{buckets.VERB_SUBJECT} could not list collection {collection!r}: {err.reason}") from None

    async def _shared_collection(self, collection: str, prefix: str, *, own: list[KvItem]) -> list[KvItem]:
        """A collection shared across the mesh: every other node's contributions as the verb lists
        them (a key out of shape said and left out), this node's own as `own` has them."""
        try:
            request = {"what": "collect", "collection": collection}
            answer = await answer_of(self._bus, request, max_pages=MAX_SHARED_PAGES)
        except NoResponders as err:
            raise Pending(err.reason) from None
        except BusError as err:
            raise Pending(f"{buckets.VERB_SUBJECT} could not list collection {collection!r}: {err.reason}") from None
        for bad in answer.malformed:
            where = {"bucket": buckets.COLLECT.name, "key": bad.key}
            log.warning("skipped %s key %r: %s", buckets.COLLECT.name, bad.key, bad.reason, extra=where)
        own_token = node_token(prefix)
        others = [
            item_of(row, row.revision or 0)
            for row in answer.entries
            if isinstance(row, CollectRow) and node_token(row.key) != own_token
        ]
        return own + others

    async def _ask(self, answer: VerbAnswer, module: str, placeholder: Placeholder) -> str:
        body = json.dumps({"node": self._node, "module": module, "kind": placeholder.kind, "name": placeholder.name})
        try:
            reply = await ask_service(self._bus, answer.subject, body.encode(), reply_wait=self._verb_timeout)
        except NoResponders as err:
            raise Pending(err.reason) from None
        except BusTimeout:
            raise Pending(f"{answer.subject} did not answer within {self._verb_timeout.total_seconds():g} s") from None
        except ServiceError as err:
            raise Pending(f"{answer.subject} answered error {err.code}: {err.description}") from None
        except BusError as err:
            raise Pending(f"{answer.subject} could not be asked: {err.reason}") from None
        try:
            answered = read_json(reply.data)
        except JsonRefused as err:
            raise Pending(f"{answer.subject} answered with JSON that cannot be used: {err.reason}") from None
        value = answered.get("value") if isinstance(answered, dict) else None
        if not isinstance(value, str):
            raise Pending(f"{answer.subject} answered without a text 'value'")
        return carriable(value, f"{answer.subject} answered")


# What heads each contribution in a shared collection's value: `# mesh-provisioner node=<node>
# contributor=<contributor>`, both as their key tokens (no space, no line break can be in one).
AUTHOR_MARK = "# mesh-provisioner "


def _lines_of(key: str, items: tuple[str, ...], *, shared: bool) -> list[str]:
    """A contribution's lines in its collection's value: in a shared one, headed by its author."""
    if not shared or not items:
        return list(items)
    node, collection_and_contributor = key.split(".", 1)
    return [f"{AUTHOR_MARK}node={node} contributor={collection_and_contributor.rpartition('.')[2]}", *items]


def _uncarried(items: tuple[str, ...], *, shared: bool) -> str | None:
    """Why a contribution is left out of its collection's value, or None: an item holding a NUL
    (no env file can carry it); in a shared one, an item of more than one line or reading as an
    author's line, which would pass what follows it as another node's."""
    for text in items:
        if "\0" in text:
            return "an item holds a NUL character"
        if shared and text and text.splitlines() != [text]:  # any break str.splitlines reads
            return "an item holds a line break, which would pass what follows it as another node's"
        if shared and text.lstrip().startswith(AUTHOR_MARK.rstrip()):
            return f"an item begins as an author's line ({AUTHOR_MARK.strip()!r})"
    return None


def _where(answer: BucketAnswer, fields: dict[str, str]) -> tuple[Bucket, str]:
    """The bucket and key of a value read by `value` or `plan`."""
    shape = shape_of(answer.key)
    return Bucket(render(answer.bucket, fields), shape), shape.build(**fields)


def _value_of(item: KvItem | None, bucket: Bucket, key: str) -> str | Pending:
    if item is None or item.deleted:
        return Pending(f"no value at {bucket.name} key {key!r}")
    return item.value.decode("utf-8", errors="replace")


def _items_prefix(shape: KeyShape, fields: dict[str, str]) -> str:
    if shape.optional or len(shape.required) < 2:
        raise RegistryError(f"shape {shape.text} cannot be listed by items")
    return shape_of(".".join(token.text for token in shape.required[:-1])).build(**fields)


def _text_of(raw: str, where: str) -> str:
    return _as_text(_parsed(raw, where), where)


def _parsed(raw: str, where: str) -> object:
    try:
        return read_json(raw)
    except JsonRefused as err:
        raise Pending(f"the value at {where} cannot be used: {err.reason}") from None


def _as_text(value: object, where: str) -> str:
    if value is None:
        raise Pending(f"the value at {where} is null")
    if isinstance(value, str):
        return carriable(value, f"at {where}")
    return carriable(json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True), f"at {where}")


def carriable(text: str, where: str) -> str:
    """`text`, if an env file can carry it; else `Pending` saying why, never quoting it."""
    if "\0" in text:
        raise Pending(f"the value {where} holds a NUL character, which an env file cannot carry (sh ends it there)")
    return text


def _from_plan(raw: str, bucket: str, key: str, placeholder: Placeholder) -> str:
    where = f"{bucket} key {key!r}"
    found: object = _parsed(raw, where)
    for field_name in ("plan", placeholder.kind, placeholder.name):
        if not isinstance(found, dict) or field_name not in found:
            raise Pending(f"the plan at {where} has no {placeholder.kind} {placeholder.name!r}")
        found = found[field_name]
    return _as_text(found, f"{where} plan")


class Forgotten:
    """The gone marks a node reads during one reconcile, each contributor's read at most once."""

    def __init__(self, bus: Bus, *, node: str) -> None:
        self.bus = bus
        self.node = node
        self._marked: dict[str, bool] = {}  # contributor: whether it is marked gone
        self._reading = anyio.Lock()
        self.unreadable: str | None = None  # why the marks could not be read, if they could not

    async def left_out(self, contributors: Iterable[str]) -> set[str]:
        """The nodes among `contributors` whose contributions are left out: marked gone, and not
        this node."""
        others = {node for node in contributors if node != self.node}
        async with self._reading:
            await self._read_marks(sorted(others - self._marked.keys()))
        return {node for node in others if self._marked.get(node, False)}

    async def kept(self, items: list[KvItem]) -> list[KvItem]:
        """The collect bucket's `items` (keys `<node>.<collection>.<contributor>`) whose node is
        not left out."""
        by_node = {item.key: _node_of(item.key) for item in items}
        out = await self.left_out(node for node in by_node.values() if node is not None)
        return [item for item in items if by_node[item.key] not in out]

    async def _read_marks(self, nodes: list[str]) -> None:
        for start in range(0, len(nodes), MULTI_LAST_LIMIT):
            chunk = nodes[start : start + MULTI_LAST_LIMIT]
            try:
                found = await get_last_many(self.bus, fleet.FLEET, [fleet.gone_key(node) for node in chunk])
            except BusError as err:
                self._unreadable(err.reason)
                found = []
            marked = {item.key for item in found if not item.deleted}
            self._marked.update({node: fleet.gone_key(node) in marked for node in chunk})

    def _unreadable(self, reason: str) -> None:
        if self.unreadable is None:
            log.warning(
                "gone marks of %s not read (%s): no contribution left out of collections this reconcile",
                fleet.FLEET.name,
                reason,
                extra={"bucket": fleet.FLEET.name},
            )
        self.unreadable = reason


def _node_of(key: str) -> str | None:
    try:
        return decode_token(node_token(key))
    except TokenError:
        return None
