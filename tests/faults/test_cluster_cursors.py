"""A listing of many pages on a three-server cluster with a seat per server: whichever seat the
queue group picks answers each page, the seat that began it may stop or restart half-way, and
every key comes back exactly once; a cursor forged, altered or brought by another party is
refused."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from provisioner.verb.cursors import Continuation, CursorSeal
from registry.access import Kind, MeshParties, issue_grants, seed_path
from registry.contract import buckets
from registry.wire import Bus, BusOptions, connect
from tests.cluster import Cluster, cluster
from tests.helpers import in_own_task, put_many, until
from tests.isolation import party

PAGE_BYTES = 16384
RETRIES = 10
KEYS = 6000  # about 55 pages of 16 KiB
NEED = b'{"placeholder":"${config:x}","used_in":["etc/app.conf"]}'
OPS, N1, SEAT = party(Kind.OPERATOR, "ops"), party(Kind.NODE, "n1"), party(Kind.SEAT)


class Seats:
    """A seat per server of the cluster, each started and stopped on its own."""

    def __init__(self, servers: Cluster, keys: Path, tasks: TaskGroup) -> None:
        self.servers = servers
        self.keys = keys
        self.tasks = tasks
        self.stops: dict[int, anyio.Event] = {}
        self.done: dict[int, anyio.Event] = {}
        self.scopes: dict[int, anyio.CancelScope] = {}

    async def start(self, index: int) -> None:
        stop, done = anyio.Event(), anyio.Event()
        self.stops[index], self.done[index] = stop, done
        options = BusOptions(
            servers=(self.servers.urls[index],), name=f"seat-{index}", nkey_seed=seed_path(self.keys, SEAT)
        )
        settings = ServerSettings(bucket_replicas=3, bucket_max_value_size=8192, grants_file=self.keys / "grants.json")

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                with anyio.CancelScope() as self.scopes[index]:
                    await run_server(bus_options=options, settings=settings, stop=stop, task_status=task_status)
            finally:
                done.set()

        await self.tasks.start(run)

    async def stop(self, index: int) -> None:
        self.stops[index].set()
        await self.done[index].wait()

    async def kill(self, index: int) -> None:
        """Cancels the seat: what it holds in memory is gone, nothing is finished in order."""
        self.scopes[index].cancel()
        await self.done[index].wait()


@pytest.fixture
async def mesh_cluster(tmp_path: Path) -> AsyncIterator[tuple[Cluster, Path]]:
    keys = tmp_path / "keys"
    issue_grants(keys, MeshParties(nodes=("n1",), providers=(), operators=("ops",)))
    extra = f"include ./accounts.conf\nmax_payload: {PAGE_BYTES}\n"
    async with in_own_task(cluster(tmp_path / "cluster", extra)) as servers:
        for peer in servers.peers:
            peer.state_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(keys / "accounts.conf", peer.state_dir / "accounts.conf")
        await servers.start()
        yield servers, keys


def asker(servers: Cluster, keys: Path, who: Any) -> BusOptions:
    return BusOptions(servers=servers.urls, name=who.label, nkey_seed=seed_path(keys, who))


async def page(bus: Bus, request: Mapping[str, object]) -> tuple[str, dict[str, Any]]:
    """The code and body of one page asked, asked again on a 503 (the verb's "retry") a few times."""
    for _ in range(RETRIES):
        reply = await bus.request(buckets.VERB_SUBJECT, json.dumps(request).encode())
        code = reply.headers.get("Nats-Service-Error-Code", "200")
        if code != "503":
            break
        await anyio.sleep(0.2)  # a pause before a retry, as answer_patiently makes
    return code, json.loads(reply.data)


async def filled(bus: Bus) -> dict[str, bytes]:
    values = {f"n{i % 10}.module-{i:06d}.config.name": NEED for i in range(KEYS)}
    await put_many(bus, buckets.NEEDS, values)
    return values


async def answered(bus: Bus) -> bool:
    try:
        code, _ = await page(bus, {"what": "needs", "node": "n1", "module": "none"})
    except Exception:  # not served yet
        return False
    return code == "200"


async def test_a_listing_continues_on_any_seat_across_a_kill_and_a_restart(
    mesh_cluster: tuple[Cluster, Path],
) -> None:
    servers, keys = mesh_cluster
    async with anyio.create_task_group() as tasks:
        seats = Seats(servers, keys, tasks)
        await seats.start(0)
        async with connect(asker(servers, keys, SEAT)) as data, connect(asker(servers, keys, OPS)) as ops:
            values = await filled(data)
            # Begun by seat 0 alone; then seats 1 and 2 share the queue group; seat 0 is killed half-way.
            keys_met, first = [], await page(ops, {"what": "needs"})
            code, body = first
            assert code == "200"
            await seats.start(1)
            await seats.start(2)
            while body["next"] is not None:
                keys_met += [entry["key"] for entry in body["entries"]]
                if body["page"] == 25:
                    await seats.kill(0)
                last = body["page"]
                code, body = await page(ops, {"cursor": body["next"]})
                assert code == "200", (body, last)
            keys_met += [entry["key"] for entry in body["entries"]]
            assert body["page"] >= 50
            assert sorted(keys_met) == sorted(values)  # each once
            assert body["total"] == {"entries": KEYS, "malformed": 0}

            # One seat left, restarted half-way: it forgot the listing, and resumes it from the cursor.
            await seats.stop(2)
            code, body = await page(ops, {"what": "needs"})
            keys_met = []
            while body["next"] is not None:
                keys_met += [entry["key"] for entry in body["entries"]]
                if body["page"] == 25:
                    await seats.stop(1)
                    await seats.start(1)
                    assert await until(lambda: answered(ops), within=30)
                last = body["page"]
                code, body = await page(ops, {"cursor": body["next"]})
                assert code == "200", (body, last)
            keys_met += [entry["key"] for entry in body["entries"]]
            assert sorted(keys_met) == sorted(values)
        await seats.stop(1)


async def test_a_cursor_forged_altered_or_of_another_party_is_refused(mesh_cluster: tuple[Cluster, Path]) -> None:
    servers, keys = mesh_cluster
    async with anyio.create_task_group() as tasks:
        seats = Seats(servers, keys, tasks)
        for index in range(3):
            await seats.start(index)
        async with (
            connect(asker(servers, keys, SEAT)) as data,
            connect(asker(servers, keys, OPS)) as ops,
            connect(asker(servers, keys, N1)) as n1,
        ):
            await filled(data)
            _, first = await page(ops, {"what": "needs"})
            cursor = first["next"]
            body, mac = cursor.split(".")
            sealed = json.loads(_unb64(body))
            widened = {**sealed, "party": "node-n1"}
            forged = CursorSeal(b"not the seats' key" * 2).seal(Continuation(**{**sealed, "party": "node-n1"}))
            altered = f"{_b64(json.dumps(widened, separators=(',', ':')).encode())}.{mac}"
            flipped = f"{body}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}"
            for who, bad in ((n1, cursor), (n1, forged), (n1, altered), (ops, flipped), (ops, forged)):
                code, _ = await page(who, {"cursor": bad})
                assert code == "410"
            code, second = await page(ops, {"cursor": cursor})  # the barrier: the honest cursor still serves
            assert (code, second["page"]) == ("200", 2)
        for index in range(3):
            await seats.stop(index)


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
