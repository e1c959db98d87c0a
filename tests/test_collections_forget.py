"""Collections forget gone nodes, end to end (issue 23, must-show 4) on the generated grants, static
and JWT: the seat (its gone marks run beside it here, as `provisioner.seat.server` will run them),
two node clients on their own accounts, an operator asking the verb.

n2 contributes to `shell:zsh:normal` and goes away (its lease released); past `forget_after` the
seat marks it gone: `query collect` lists its contributions as forgotten and `what=nodes` says so;
n1's reconcile, which reads the marks under its own grants, goes on; n2 comes back and its mark
goes; `remove-node` still deletes its contributions (and its mark with them).

What this cannot show: a collection on n1 losing n2's items. A collection is read from the node's
own contributions alone (`${collected:...}` is "the items of collection ... contributed on this
node"; the resolver refuses another node's, and a node's grants let it read only its own `<node>.>`
of the collect bucket), so no node's collection ever held another node's items to forget. The test
pins that too: n1's env file is the same before, during and after n2's absence.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from provisioner.commands.removal import remove_node
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.watch.holding import holding
from registry.access import Kind
from registry.contract import buckets, fleet
from registry.wire import Bus, ask, get_direct, get_last_many
from tests.helpers import in_own_task
from tests.isolation import Mesh, jwt_mesh_server, mesh_server, party

FORGET_AFTER = timedelta(seconds=0.5)
EVERY = timedelta(seconds=0.1)
LEASE_TTL = timedelta(seconds=15)


def plan_of(node: str, folder: Path) -> ClientPlan:
    manifests = folder / node / "manifests"
    manifests.mkdir(parents=True)
    tools = {"module": "tools", "contributes": {"shell:zsh:normal": [f"# from {node}"]}}
    zsh = {"module": "zsh", "env": {"ZSHRC": "${shell:zsh:normal}"}}
    (manifests / "tools.json").write_text(json.dumps(tools))
    (manifests / "zsh.json").write_text(json.dumps(zsh))
    return ClientPlan(node, manifests, folder / node / "env", timedelta(seconds=2), lease_ttl=LEASE_TTL)


async def run_once(bus: Bus, plan: ClientPlan) -> str:
    """One reconcile under the node's lease, released after, as the one-shot CLI runs it."""
    async with holding(bus, plan.node, plan.lease_ttl):
        return await reconciled(bus, plan)


async def reconciled(bus: Bus, plan: ClientPlan) -> str:
    """One reconcile; the zsh env file after."""
    report = await reconcile(bus, plan)
    assert report.ok, report
    return (plan.materialize / "zsh.env").read_text()


async def until(check: Callable[[], Any], within: float = 15.0) -> Any:
    with anyio.fail_after(within):
        while not (found := await check()):
            await anyio.sleep(0.05)
    return found


async def forgotten_in_collect(operator: Bus) -> dict[str, bool]:
    answer = await ask(operator, {"what": "collect", "collection": "shell:zsh:normal"})
    return {entry["node"]: entry.get("forgotten", False) for entry in answer["entries"]}


async def because_of(operator: Bus, node: str) -> str:
    answer = await ask(operator, {"what": "nodes"})
    return next((e["because"] for e in answer["entries"] if e["node"] == node), "")


async def marked(seat: Bus) -> set[str]:
    items = await get_last_many(seat, fleet.FLEET, f"{fleet.GONE}.>")
    return {fleet.parse_fleet_key(item.key).node or "" for item in items if not item.deleted}


@pytest.fixture(params=["static", "jwt"], ids=["static accounts", "decentralized JWT accounts"])
async def mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mesh]:
    """The mesh of tests/conftest.py, its seat keeping the gone marks with a short `forget_after`."""
    start = mesh_server if request.param == "static" else jwt_mesh_server
    marks = {"forget_after": FORGET_AFTER, "gone_marks_interval": EVERY}
    async with in_own_task(start(tmp_path / "mesh", seat=marks)) as running:
        yield running


async def test_a_gone_node_is_forgotten_then_back_then_removed(mesh: Mesh, tmp_path: Path) -> None:
    n1_plan, n2_plan = plan_of("n1", tmp_path), plan_of("n2", tmp_path)
    async with (
        mesh.connect(party(Kind.SEAT)) as seat,
        mesh.connect(party(Kind.NODE, "n1")) as n1,
        mesh.connect(party(Kind.NODE, "n2")) as n2,
        mesh.connect(party(Kind.OPERATOR, "ops")) as operator,
        holding(n1, "n1", LEASE_TTL),
    ):  # n1 stays, as a watching client does
        n1_env = await reconciled(n1, n1_plan)
        assert "# from n1" in n1_env
        await run_once(n2, n2_plan)  # contributes, then releases its lease: gone from now on

        await until(lambda: _has(marked(seat), "n2"))
        assert "n1" not in await marked(seat)
        collect = await until(lambda: _forgotten(operator, "n2"))
        assert collect == {"n1": False, "n2": True}
        assert "forgotten by collections since" in await until(lambda: _because(operator, "n2"))
        assert await reconciled(n1, n1_plan) == n1_env  # n1's collection never held n2's items

        async with holding(n2, "n2", LEASE_TTL):  # back, and held while the seat looks
            await reconciled(n2, n2_plan)
            await until(lambda: _lacks(marked(seat), "n2"))
            collect = await until(lambda: _not_forgotten(operator, "n2"))
            assert collect["n2"] is False

        removed = await remove_node(seat, "n2")
        assert removed[buckets.COLLECT.name] == ["n2.shell=3Azsh=3Anormal.tools"]
        contribution = await get_direct(seat, buckets.COLLECT, "n2.shell=3Azsh=3Anormal.tools")
        assert contribution is not None and contribution.deleted
        await until(lambda: _lacks(marked(seat), "n2"))
        assert "n2" not in await forgotten_in_collect(operator)


async def _has(found: Any, node: str) -> bool:
    return node in await found


async def _lacks(found: Any, node: str) -> bool:
    return node not in await found


async def _forgotten(operator: Bus, node: str) -> dict[str, bool] | None:
    found = await forgotten_in_collect(operator)
    return found if found.get(node) else None


async def _not_forgotten(operator: Bus, node: str) -> dict[str, bool] | None:
    found = await forgotten_in_collect(operator)
    return found if node in found and not found[node] else None


async def _because(operator: Bus, node: str) -> str | None:
    because = await because_of(operator, node)
    return because if "forgotten" in because else None
