"""No node can fill a shared bucket: the seat cuts back a node over its quota, or the largest of a
bucket the nodes together fill past their share.

Attacks on a real nats-server with the accounts `mesh-provisioner grants` writes (static and JWT):
n1 writes its own needs keys as fast as its grants let it into a small bucket. Before the quota,
the bucket filled (`discard: new`) and n2's put of its own need and the seat's own put failed
(503 maximum bytes exceeded); now n1 is purged each time it passes its quota, everyone else's
writes succeed, n1 shows over quota, and the bucket ends under its bound. The same holds when n1's
bytes are in its headers (a put of `{}` under 15 KB of them), and when five nodes, each inside its
own quota, fill the bucket together: the victims' writes are stored.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import anyio
import pytest

from registry.access import Kind
from registry.contract import NodeRow, buckets
from registry.errors import BusError
from registry.wire import Bus, answer_of, delete, get_latest, put, snapshot
from registry.wire.feed import stored_size
from tests.attacks import fill_own_keys
from tests.helpers import in_own_task, until
from tests.isolation import NODES, Mesh, jwt_mesh_server, mesh_server, party

BUCKET_BYTES = 2 * 1024 * 1024
QUOTA = {"node_quota_keys": 100, "node_quota_bytes": 256 * 1024}
SEAT = {"bucket_max_bytes": BUCKET_BYTES, "bucket_max_value_size": 16 * 1024, **QUOTA}
VALUE = b"x" * 8000  # a need's value is JSON; the bytes are what fill a bucket
NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'
N1, N2, OPS, SEAT_PARTY = party(Kind.NODE, "n1"), party(Kind.NODE, "n2"), party(Kind.OPERATOR, "ops"), party(Kind.SEAT)


# A bucket of 1 MiB (the nodes' share 768 KiB), each node's quota a quarter of it: more than 100
# keys of 15 KB headers, or five nodes of 15 values of 15 KB each, would fill it.
TIGHT = {"bucket_max_bytes": 1024 * 1024, "bucket_max_value_size": 16 * 1024, **QUOTA}
ATTACKERS = ("n1", "n3", "n4", "n5", "n6")
PADDING = "p" * 15_000


@pytest.fixture(params=["static", "jwt"])
def start(request: pytest.FixtureRequest) -> Any:
    return mesh_server if request.param == "static" else jwt_mesh_server


@pytest.fixture
async def small_mesh(start: Any, tmp_path: Any) -> AsyncIterator[Mesh]:
    async with in_own_task(start(tmp_path / "mesh", seat=SEAT)) as running:
        yield running


@pytest.fixture
async def tight_mesh(start: Any, tmp_path: Any) -> AsyncIterator[Mesh]:
    async with in_own_task(start(tmp_path / "mesh", nodes=(*NODES, *ATTACKERS[1:]), seat=TIGHT)) as running:
        yield running


async def fill(n1: Bus, seconds: float) -> int:
    """n1 writing under its own keys of the needs for `seconds` (`fill_own_keys`); puts stored."""
    return await fill_own_keys(n1, buckets.NEEDS, lambda writer, index: f"n1.m{writer}.config.v{index}", VALUE, seconds)


async def n1_holds_at_most(seat: Bus, keys: int) -> bool:
    return len(await snapshot(seat, buckets.NEEDS, ["n1.>"], headers_only=True)) <= keys


async def test_a_node_filling_a_bucket_is_cut_back_and_every_other_write_succeeds(small_mesh: Mesh) -> None:
    async with small_mesh.connect(N1) as n1, small_mesh.connect(N2) as n2, small_mesh.connect(SEAT_PARTY) as seat:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(fill, n1, 3.0)
            for index in range(20):  # everyone else writes meanwhile: none is refused
                await anyio.sleep(0.1)
                await put(n2, buckets.NEEDS, f"n2.web.config.v{index}", NEED)
                await put(seat, buckets.NEEDS, f"seat-check.web.config.v{index}", NEED)
        assert (await get_latest(n2, buckets.NEEDS, "n2.web.config.v19")) is not None
        info = await seat.jetstream(buckets.NEEDS.info_api, operation="info")
        assert info["state"]["bytes"] < BUCKET_BYTES
        # What it wrote since the last cut, at most; the guard cuts by reads of its own, which may
        # still trail the writes when they stop on a loaded machine.
        assert await until(partial(n1_holds_at_most, seat, 4 * QUOTA["node_quota_keys"]), 10, every=0.1)
        async with small_mesh.connect(OPS) as ops:
            answer = await answer_of(ops, {"what": "nodes"})
    verdicts = {row.node: (row.verdict, row.because) for row in answer.entries if isinstance(row, NodeRow)}
    verdict, because = verdicts["n1"]
    assert verdict == "over-quota"
    assert "more than its 100 keys, 256.0 KiB" in because and buckets.NEEDS.name in because
    assert [node for node, (verdict, _) in verdicts.items() if verdict == "over-quota"] == ["n1"]


async def test_a_node_cut_back_in_applied_leaves_nothing_of_its_keys_in_the_nodes_view(small_mesh: Mesh) -> None:
    """A purge leaves no delete marker: the seat's view of the applied bucket forgets the purged
    keys itself, or `what=nodes` would list them (malformed) until the seat restarts."""
    async with small_mesh.connect(N1) as n1, small_mesh.connect(SEAT_PARTY) as seat:
        for index in range(QUOTA["node_quota_keys"] + 20):
            await put(n1, buckets.APPLIED, f"n1.m{index}", b"{}")  # no state: malformed, each
        async with small_mesh.connect(OPS) as ops:
            with anyio.fail_after(10):
                while True:
                    answer = await answer_of(ops, {"what": "nodes"})
                    verdicts = {row.node: row.verdict for row in answer.entries if isinstance(row, NodeRow)}
                    if verdicts.get("n1") == "over-quota":
                        break
                    await anyio.sleep(0.05)
        held = {item.key for item in await snapshot(seat, buckets.APPLIED, ["n1.>"])}
    shown = {bad.key for bad in answer.malformed if bad.key.startswith("n1.")}
    assert shown <= held, sorted(shown - held)[:5]


async def test_a_node_leaving_delete_markers_without_end_is_cut_back_too(small_mesh: Mesh) -> None:
    """The attack: n1 writes a key and deletes it, again and again under new names. Each delete
    leaves a marker the bucket keeps, so the node's live keys stay few while its footprint grows."""
    async with small_mesh.connect(N1) as n1:
        for index in range(QUOTA["node_quota_keys"] + 20):
            key = f"n1.m.config.v{index}"
            revision = await put(n1, buckets.NEEDS, key, NEED)
            with contextlib.suppress(BusError):  # purged meanwhile, once cut back
                await delete(n1, buckets.NEEDS, key, last=revision)
        async with small_mesh.connect(OPS) as ops:
            with anyio.fail_after(10):
                while True:
                    answer = await answer_of(ops, {"what": "nodes"})
                    verdicts = {row.node: row.verdict for row in answer.entries if isinstance(row, NodeRow)}
                    if verdicts.get("n1") == "over-quota":
                        break
                    await anyio.sleep(0.05)


async def shown(mesh: Mesh) -> dict[str, tuple[str, str]]:
    """Each node's verdict and why, as an operator is shown them."""
    async with mesh.connect(OPS) as ops:
        answer = await answer_of(ops, {"what": "nodes"})
    return {row.node: (row.verdict, row.because) for row in answer.entries if isinstance(row, NodeRow)}


async def stored_in_the_end(bus: Bus, key: str, value: bytes) -> bool:
    """A victim's put, tried once: whether it is stored (a full bucket refuses it)."""
    with contextlib.suppress(BusError):
        await put(bus, buckets.NEEDS, key, value)
    return (await get_latest(bus, buckets.NEEDS, key)) is not None


@pytest.mark.parametrize(
    "headers",
    [{"X-Pad": PADDING}, {"X-Pad": PADDING, "Nats-Msg-Size": "0"}],
    ids=["a padding header", "a padding header and a forged value size"],
)
async def test_a_nodes_headers_count_against_its_quota(tight_mesh: Mesh, headers: dict[str, str]) -> None:
    """n1 puts `{}` under 15 KB of headers, 95 keys (fewer than its 100): 1.4 MB, more than the
    bucket. Counted by their values (2 bytes each) they never passed n1's quota and the bucket filled."""
    async with tight_mesh.connect(N1) as n1, tight_mesh.connect(N2) as n2, tight_mesh.connect(SEAT_PARTY) as seat:
        padding = len(PADDING)
        for index in range(95):  # refused, the next header is half as long: the bucket's last bytes go too
            sent = headers | {"X-Pad": PADDING[:padding]}
            try:
                await n1.store(buckets.NEEDS.subject(f"n1.m.config.v{index}"), b"{}", headers=sent, operation="fill")
            except BusError:
                padding = max(padding // 2, 16)
        assert await until(partial(stored_in_the_end, n2, "n2.web.config.after", NEED), 10, every=0.1)
        assert await until(partial(stored_in_the_end, seat, "seat-check.web.config.after", NEED), 10, every=0.1)
    verdict, because = (await shown(tight_mesh))["n1"]
    assert verdict == "over-quota"
    assert "more than its 100 keys, 256.0 KiB" in because


async def test_nodes_each_inside_their_quota_cannot_fill_a_bucket_together(tight_mesh: Mesh) -> None:
    """Five nodes write 15 values of 15 KB each, 226 KB, inside their quota (256 KiB), at once:
    1.1 MB together, more than the bucket (then smaller values, to its last bytes). The largest is
    cut back first; n2's need written before stays, and n2's and the seat's writes after are stored."""
    async with tight_mesh.connect(N2) as n2, tight_mesh.connect(SEAT_PARTY) as seat:
        await put(n2, buckets.NEEDS, "n2.web.config.before", NEED)

        async def attack(name: str) -> None:
            """15 values of 15 KB, then, refused, one of half the size and so on to 64 bytes: the
            bucket's last bytes are taken too, and the node stays inside its quota."""
            size, written = 15_000, 0
            async with tight_mesh.connect(party(Kind.NODE, name)) as attacker:
                for index in range(40):
                    if size < 64 or written + size > 240_000:  # 40 keys and 243 KB at most: inside its quota
                        return
                    try:
                        await put(attacker, buckets.NEEDS, f"{name}.m.config.v{index}", b"x" * size)
                        written += size
                    except BusError:
                        size //= 2

        async with anyio.create_task_group() as attackers:
            for name in ATTACKERS:
                attackers.start_soon(attack, name)
        assert await until(partial(stored_in_the_end, n2, "n2.web.config.after", NEED), 10, every=0.1)
        assert await until(partial(stored_in_the_end, seat, "seat-check.web.config.after", NEED), 10, every=0.1)
        assert await get_latest(n2, buckets.NEEDS, "n2.web.config.before") is not None
    verdicts = await shown(tight_mesh)
    cut = [node for node, (verdict, _) in verdicts.items() if verdict == "over-quota"]
    assert cut and set(cut) <= set(ATTACKERS), verdicts
    assert "the most of any node while the nodes held more than their 768.0 KiB" in verdicts[cut[0]][1]


async def test_the_guards_measure_of_a_put_is_what_the_stream_counts(small_mesh: Mesh) -> None:
    """Subject, headers, value and the store's framing, as the stream's `bytes` grows by them."""
    async with small_mesh.connect(N1) as n1, small_mesh.connect(SEAT_PARTY) as seat:
        grown = []
        for index, headers in enumerate(({}, {"X-Pad": "p" * 1000}, {"A": "1", "B": "22"})):
            before = (await seat.jetstream(buckets.NEEDS.info_api, operation="info"))["state"]["bytes"]
            await n1.store(buckets.NEEDS.subject(f"n1.m.config.v{index}"), NEED, headers=headers, operation="put")
            after = (await seat.jetstream(buckets.NEEDS.info_api, operation="info"))["state"]["bytes"]
            grown.append(after - before)
        items = await snapshot(seat, buckets.NEEDS, ["n1.>"], headers_only=True)
        measured = [item.stored for item in sorted(items, key=lambda item: item.key)]
    # A put sent without headers reads back with a block of the server's own: taken as sent, 16 bytes high.
    assert [seen - counted for seen, counted in zip(measured, grown, strict=True)] == [16, 0, 0]
    assert stored_size(b"$KV.b.k", None, 2) == 30 + 7 + 2
