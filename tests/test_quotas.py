"""No node can fill a shared bucket (issue 17): the seat cuts back a node over its quota.

Attacks on a real nats-server with the accounts `mesh-provisioner grants` writes (static and JWT):
n1 writes its own needs keys as fast as its grants let it into a small bucket. Before the quota,
the bucket filled (`discard: new`) and n2's put of its own need and the seat's own put failed
(503 maximum bytes exceeded); now n1 is purged each time it passes its quota, everyone else's
writes succeed, n1 shows over quota, and the bucket ends under its bound.
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
from tests.attacks import fill_own_keys
from tests.helpers import in_own_task, until
from tests.isolation import Mesh, jwt_mesh_server, mesh_server, party

BUCKET_BYTES = 2 * 1024 * 1024
QUOTA = {"node_quota_keys": 100, "node_quota_bytes": 256 * 1024}
SEAT = {"bucket_max_bytes": BUCKET_BYTES, "bucket_max_value_size": 16 * 1024, **QUOTA}
VALUE = b"x" * 8000  # a need's value is JSON; the bytes are what fill a bucket
NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'
N1, N2, OPS, SEAT_PARTY = party(Kind.NODE, "n1"), party(Kind.NODE, "n2"), party(Kind.OPERATOR, "ops"), party(Kind.SEAT)


@pytest.fixture(params=["static", "jwt"])
async def small_mesh(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Mesh]:
    start = mesh_server if request.param == "static" else jwt_mesh_server
    async with in_own_task(start(tmp_path / "mesh", seat=SEAT)) as running:
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
