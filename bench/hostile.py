"""`python -m bench.hostile ACCESS --node NAME --seconds S --out FILE`: a hostile node running its
whole repertoire at once, in a process of its own, on nothing but its own grants.

The acts (`--acts`, all by default), each for `--seconds`:

    fill       writers putting values near the bucket's largest under the node's own keys, a new
               key each time, as fast as the acknowledgements come back (`--writers` on two
               connections), halving a writer's value when a put is refused (so that a bucket's
               last bytes would be taken too) and doubling it again after a stored one, in
               `--buckets` (needs, applied, collect)
    listings   requests to the verb without end, many at once: listings followed to their last
               page, listings started and never finished, and cursors guessed
    churn      connections opened to the account's limit and past it, subscriptions on one of
               them to the connection's limit and past it (the server closes it), all closed,
               again
    requests   a message past the account's payload limit (the server closes the connection), a
               body past the verb's 64 KiB, JSON nested 10,000 deep, names of 60,000 bytes

Writes to FILE, as JSON, what each act did and how it was answered.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from nats.aio.client import Client

from bench.mesh import Access, node
from bench.observe import own_cpu_seconds
from registry.contract import Bucket, buckets
from registry.errors import BusError, BusTimeout
from registry.wire import ERROR_CODE_HEADER, Bus, connect, put

ACTS = ("fill", "listings", "churn", "requests")
FILLED = {bucket.name.rsplit("_", 1)[1]: bucket for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT)}
VALUE_SIZE = 63 * 1024  # near the buckets' default largest value (64 KiB), leaving room for the key and headers
SMALLEST = 64
PAYLOAD_LIMIT = 128 * 1024  # a node account's largest message (registry.access's limits), the attack's target
LISTINGS_AT_ONCE = 32
REQUESTERS = 4
MOST_CONNECTIONS = 64  # tried per churn cycle: far past a node account's 16
MOST_SUBSCRIPTIONS = 5000  # tried on one connection: far past its 1,000
ANSWER_WAIT = 10.0
REASON_CHARS = 120


@dataclass
class Outcomes:
    """How often each outcome came back."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, outcome: str) -> None:
        self.counts[outcome[:REASON_CHARS]] += 1

    def total(self) -> int:
        return sum(self.counts.values())

    def figures(self) -> dict[str, int]:
        return dict(self.counts.most_common())


# fill


@dataclass
class Fill:
    stored: int = 0
    stored_bytes: int = 0
    refused: Outcomes = field(default_factory=Outcomes)
    smallest_stored: int = VALUE_SIZE
    seconds: float = 0.0

    def figures(self) -> dict[str, Any]:
        return {
            "stored": self.stored,
            "stored_bytes": self.stored_bytes,
            "refused": self.refused.total(),
            "refused_why": self.refused.figures(),
            "smallest_stored": self.smallest_stored,
            "seconds": self.seconds,
            "puts_per_second": self.stored / self.seconds if self.seconds else 0.0,
            "mb_per_second": self.stored_bytes / self.seconds / 1e6 if self.seconds else 0.0,
        }


def fill_key(bucket: Bucket, name: str, writer: int, index: int) -> str:
    """A new key of the node's own in `bucket`, whatever the bucket's shape."""
    fields = bucket.shape.fields
    parts = dict.fromkeys(fields, "fill") | {fields[1]: f"w{writer}", fields[-1]: f"v{index}", "node": name}
    return bucket.shape.build(**parts)


async def fill(
    access: Access,
    name: str,
    filled: list[Bucket],
    seconds: float,
    writers: int,
    *,
    in_headers: bool = False,
    value_bytes: int = VALUE_SIZE,
) -> Fill:
    """Puts of `value_bytes` (halved when refused, doubled back when stored); `in_headers`: each
    put is `{}` under a header of the value's size instead (what the stream stores alike)."""
    done = Fill(smallest_stored=value_bytes)
    value = b"x" * value_bytes

    async def put_one(bus: Bus, bucket: Bucket, key: str, size: int) -> None:
        if not in_headers:
            await put(bus, bucket, key, value[:size])
            return
        await bus.store(bucket.subject(key), b"{}", headers={"X-Pad": "p" * size}, operation=f"write {key}")

    async def writer(bus: Bus, number: int) -> None:
        bucket = filled[number % len(filled)]
        index, size = 0, value_bytes
        while True:
            index += 1
            try:
                await put_one(bus, bucket, fill_key(bucket, name, number, index), size)
            except BusError as err:
                done.refused.add("timed out" if isinstance(err, BusTimeout) else err.reason)
                size = max(size // 2, min(SMALLEST, value_bytes))
                await anyio.lowlevel.checkpoint()
                continue
            done.stored += 1
            done.stored_bytes += size
            done.smallest_stored = min(done.smallest_stored, size)
            size = min(size * 2, value_bytes)

    options = access.options(node(name))
    started = time.perf_counter()
    async with connect(options) as first, connect(options) as second:
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as tg:
                for number in range(writers):
                    tg.start_soon(writer, (first, second)[number % 2], number)
    done.seconds = time.perf_counter() - started
    return done


# listings


def code_of(headers: dict[str, str] | None) -> str:
    return (headers or {}).get(ERROR_CODE_HEADER, "200")


async def listings(access: Access, name: str, seconds: float, at_once: int) -> dict[str, Any]:
    """Listings of every kind, `at_once` at a time, each way of asking in turn."""
    answered: dict[str, Outcomes] = {way: Outcomes() for way in ("followed", "abandoned", "guessed")}
    pages = 0

    async def ask(nc: Client, body: dict[str, object], way: str) -> dict[str, Any] | None:
        try:
            msg = await nc.request(buckets.VERB_SUBJECT, json.dumps(body).encode(), timeout=ANSWER_WAIT)
        except Exception as err:  # a hostile party takes whatever comes back, and goes on
            answered[way].add(type(err).__name__)
            return None
        code = code_of(msg.headers)
        answered[way].add(code)
        return json.loads(msg.data) if code == "200" else None

    async def follow(nc: Client) -> None:
        nonlocal pages
        request: dict[str, object] = {"what": "needs"}
        while (page := await ask(nc, request, "followed")) is not None and page.get("next"):
            pages += 1
            request = {"what": "needs", "cursor": page["next"]}

    async def requester(nc: Client, number: int) -> None:
        ways: list[Callable[[], Awaitable[object]]] = [
            lambda: follow(nc),
            lambda: ask(nc, {"what": ("needs", "applied", "collect", "nodes")[number % 4]}, "abandoned"),
            lambda: ask(nc, {"what": "needs", "cursor": secrets.token_urlsafe(16)}, "guessed"),
        ]
        turn = number
        while True:
            await ways[turn % len(ways)]()
            turn += 1

    nc = await access.raw(node(name), max_reconnect_attempts=-1)
    try:
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as tg:
                for number in range(at_once):
                    tg.start_soon(requester, nc, number)
    finally:
        await nc.close()
    return {way: outcomes.figures() for way, outcomes in answered.items()} | {"pages_followed": pages}


# churn


@dataclass
class Churn:
    cycles: int = 0
    connections_taken: list[int] = field(default_factory=list)
    connection_refused: Outcomes = field(default_factory=Outcomes)
    subscriptions_taken: list[int] = field(default_factory=list)
    subscription_refused: Outcomes = field(default_factory=Outcomes)

    def figures(self) -> dict[str, Any]:
        return {
            "cycles": self.cycles,
            "most_connections_held": max(self.connections_taken, default=0),
            "fewest_connections_held": min(self.connections_taken, default=0),
            "connection_refused_why": self.connection_refused.figures(),
            "most_subscriptions_held": max(self.subscriptions_taken, default=0),
            "subscription_refused_why": self.subscription_refused.figures(),
        }


async def attempt(access: Access, name: str) -> tuple[Client | None, str]:
    """One more connection, tried once: the client, or why the server refused it."""
    reasons: list[str] = []

    async def on_error(err: Exception) -> None:
        reasons.append(str(err).lower())

    try:
        client = await access.raw(
            node(name), max_reconnect_attempts=0, connect_timeout=2, allow_reconnect=False, error_cb=on_error
        )
    except Exception as err:  # refused: nats-py says why in one of several ways
        return None, " ".join(reasons) or str(err).lower() or type(err).__name__
    return client, ""


async def subscribe_past_the_limit(client: Client) -> int:
    """Subscribes until the server closes the connection; how many it held."""
    held = 0
    for number in range(MOST_SUBSCRIPTIONS):
        if client.is_closed:
            break
        await client.subscribe(f"churn.{number}")
        held += 1
        if number % 100 == 99:
            try:
                await client.flush(timeout=5)
            except Exception:  # the server closed it: the limit was passed
                break
    with anyio.move_on_after(2):
        while not client.is_closed:
            await anyio.sleep(0.01)
    return held - 1 if client.is_closed else held


async def churn(access: Access, name: str, seconds: float) -> Churn:
    done = Churn()
    with anyio.move_on_after(seconds):
        while True:
            await churn_once(access, name, done)
    return done


async def churn_once(access: Access, name: str, done: Churn) -> None:
    held: list[Client] = []
    try:
        for _ in range(MOST_CONNECTIONS):
            client, why = await attempt(access, name)
            if client is None:
                done.connection_refused.add(why)
                break
            held.append(client)
        done.connections_taken.append(len(held))
        if held:
            done.subscriptions_taken.append(await subscribe_past_the_limit(held[-1]))
            done.subscription_refused.add(str(held[-1].last_error).lower())
        done.cycles += 1
    finally:
        with anyio.CancelScope(shield=True):
            for client in held:
                await client.close()


# requests


OVERSIZED = b"x" * (PAYLOAD_LIMIT + 1)
PAST_THE_VERB = json.dumps({"what": "needs", "node": "x" * 100, "pad": "x" * 100 * 1024}).encode()
DEEP_ARRAYS = b"[" * 10_000 + b"]" * 10_000
DEEP_OBJECTS = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
LONG_NAME = json.dumps({"what": "needs", "node": "n" * 60_000}).encode()
ANSWERED = {"past the verb's 64 KiB": PAST_THE_VERB, "nested 10,000 deep (arrays)": DEEP_ARRAYS}
ANSWERED |= {"nested 10,000 deep (objects)": DEEP_OBJECTS, "a name of 60,000 bytes": LONG_NAME}


async def requests(access: Access, name: str, seconds: float, requesters: int) -> dict[str, Any]:
    answered = {what: Outcomes() for what in (*ANSWERED, "past the payload limit")}

    async def oversized() -> None:
        client, why = await attempt(access, name)
        if client is None:
            answered["past the payload limit"].add(f"connection refused: {why}")
            await anyio.sleep(0.05)
            return
        try:
            await client.publish(buckets.VERB_SUBJECT, OVERSIZED)
            await client.flush(timeout=5)
            with anyio.move_on_after(2):
                while not client.is_closed:
                    await anyio.sleep(0.01)
            answered["past the payload limit"].add(str(client.last_error).lower() or "not closed")
        except Exception as err:
            answered["past the payload limit"].add(f"{type(err).__name__}: {str(err).lower()}")
        finally:
            await client.close()

    async def requester(nc: Client, number: int) -> None:
        kinds = list(ANSWERED)
        turn = number
        while True:
            if turn % (len(kinds) + 1) == len(kinds):
                await oversized()
            else:
                what = kinds[turn % (len(kinds) + 1)]
                try:
                    msg = await nc.request(buckets.VERB_SUBJECT, ANSWERED[what], timeout=ANSWER_WAIT)
                    answered[what].add(code_of(msg.headers))
                except Exception as err:
                    answered[what].add(type(err).__name__)
            turn += 1

    nc = await access.raw(node(name), max_reconnect_attempts=-1)
    try:
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as tg:
                for number in range(requesters):
                    tg.start_soon(requester, nc, number)
    finally:
        await nc.close()
    return {what: outcomes.figures() for what, outcomes in answered.items()}


async def run(args: argparse.Namespace) -> None:
    access, name, seconds = Access.of(args), args.node, args.seconds
    filled = [FILLED[bucket] for bucket in args.buckets]
    acts: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "fill": lambda: figures_of(
            fill(access, name, filled, seconds, args.writers, in_headers=args.in_headers, value_bytes=args.value_bytes)
        ),
        "listings": lambda: listings(access, name, seconds, LISTINGS_AT_ONCE),
        "churn": lambda: figures_of(churn(access, name, seconds)),
        "requests": lambda: requests(access, name, seconds, REQUESTERS),
    }
    figures: dict[str, Any] = {"node": name, "acts": args.acts}

    async def act(which: str) -> None:
        figures[which] = await acts[which]()
        print(f"  hostile {name}: {which} done", flush=True)

    async with anyio.create_task_group() as tg:
        for which in args.acts:
            tg.start_soon(act, which)
    figures["cpu_seconds"] = own_cpu_seconds()
    args.out.write_text(json.dumps(figures, indent=2))


async def figures_of(done: Awaitable[Fill | Churn]) -> dict[str, Any]:
    return (await done).figures()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__)
    Access.add_arguments(parser)
    parser.add_argument("--node", required=True, help="the hostile node: a node party of the grants")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--acts", nargs="+", choices=ACTS, default=list(ACTS))
    parser.add_argument("--buckets", nargs="+", choices=sorted(FILLED), default=sorted(FILLED))
    parser.add_argument("--writers", type=int, default=8, help="concurrent writers of the fill (default 8)")
    parser.add_argument("--in-headers", action="store_true", help="the fill's bytes in a header of each put")
    parser.add_argument(
        "--value-bytes", type=int, default=VALUE_SIZE, help=f"of each put of the fill (default {VALUE_SIZE:,})"
    )
    parser.add_argument("--out", type=Path, required=True)
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
