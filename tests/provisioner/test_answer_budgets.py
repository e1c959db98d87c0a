"""Each party is sent at most its rate of answers' bytes (`provisioner.verb.budgets`): a node listing
its own large values as fast as it can ask waits for its budget, and no one else waits for it.
The buckets against an injected clock; the seat on a real mesh of generated grants (static)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from provisioner.verb.budgets import BURST_SECONDS, AnswerBudgets, AnswerRates
from registry.access import Kind
from registry.contract import buckets
from registry.wire import Bus, ask, ask_page, put
from tests.helpers import in_own_task
from tests.isolation import Mesh, mesh_server, party

RATE = 100_000  # bytes a second to a node, in the mesh below
N1, OPS, SEAT = party(Kind.NODE, "n1"), party(Kind.OPERATOR, "ops"), party(Kind.SEAT)


def test_a_party_overdrawing_its_bucket_waits_for_what_it_owes_and_another_party_does_not() -> None:
    now = [0.0]
    budgets = AnswerBudgets(AnswerRates(node=1000, reader=0), clock=lambda: now[0])
    burst = int(1000 * BURST_SECONDS)
    assert budgets.wait_for(N1, burst) == 0  # a full bucket: at once
    assert budgets.wait_for(N1, 500) == pytest.approx(0.5)  # owes 500 bytes at 1,000 a second
    assert budgets.wait_for(N1, 500) == pytest.approx(1.0)  # and then 1,000
    assert budgets.wait_for(OPS, 10**9) == 0  # a reader unbounded (rate 0)
    assert budgets.wait_for(None, 10**9) == 0  # the seat's own account
    now[0] = 3.0  # paid back, and 2 s of filling on top
    assert budgets.wait_for(N1, 0) == 0 and budgets.wait_for(N1, 2500) == pytest.approx(0.5)


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[Mesh]:
    seat = {"node_answer_rate": RATE, "reader_answer_rate": 0}
    async with in_own_task(mesh_server(tmp_path / "mesh", seat=seat)) as running:
        yield running


async def listed(bus: Bus) -> int:
    page = await ask_page(bus, {"what": "needs"})
    return len(page["entries"])


async def test_a_node_listing_its_large_values_waits_for_its_budget_and_the_operator_does_not(mesh: Mesh) -> None:
    value = b'{"placeholder":"${config:x}","pad":"' + b"x" * 9000 + b'"}'
    async with mesh.connect(N1) as n1, mesh.connect(OPS) as ops:
        for index in range(10):  # about 90 KB of n1's own needs: one page
            await put(n1, buckets.NEEDS, f"n1.m{index}.config.x", value)
        started = time.monotonic()
        for _ in range(BURST_SECONDS.__int__() + 4):  # past its burst: the rest at its rate
            assert await listed(n1) == 10
        spent = time.monotonic() - started
        answered_ops = time.monotonic()
        with anyio.fail_after(5):
            await ask(ops, {"what": "registry"})
        ops_waited = time.monotonic() - answered_ops
    sent = (int(BURST_SECONDS) + 4) * 90_000
    assert spent >= (sent - RATE * BURST_SECONDS) / RATE * 0.9  # no faster than its rate allows
    assert ops_waited < spent  # the operator waited for none of it
