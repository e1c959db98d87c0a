"""Collections forget gone nodes, end to end on the generated grants, static
and JWT: the seat (its gone marks run beside it here, as `provisioner.seat.server` will run them),
two node clients on their own accounts, an operator asking the verb.

The seat's domains file shares one collection across the mesh (`[collections] shared`), read by
every node: n2 contributes to it and to a node-local one (`shell:zsh:normal`) and goes away (its
lease released); past `forget_after` the seat marks it gone: `query collect` lists its
contributions as forgotten and `what=nodes` says so; n1's next reconcile leaves n2's items out of
the shared collection (its env file and change action follow), under n1's own grants; n2 comes
back, its mark goes, and n1's next reconcile has its items again; `remove-node` still deletes its
contributions (and its mark with them). A node-local collection never held another node's items:
n1's is the same throughout.
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
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.resolving import resolve
from provisioner_client.watch.holding import holding
from provisioner_client.watch.watching import WatchTiming, watch
from registry.access import Kind
from registry.contract import buckets, fleet
from registry.errors import ServiceError
from registry.wire import Bus, ask, get_direct, get_last_many, put
from tests.helpers import in_own_task, sh_env
from tests.isolation import Mesh, jwt_mesh_server, mesh_server, party

FORGET_AFTER = timedelta(seconds=0.5)
EVERY = timedelta(seconds=0.1)
LEASE_TTL = timedelta(seconds=15)


SHARED = "ssh-known-hosts"
DOMAINS = f'[collections]\nshared = ["{SHARED}"]\n'


def plan_of(node: str, folder: Path) -> ClientPlan:
    manifests = folder / node / "manifests"
    manifests.mkdir(parents=True)
    contributes = {"shell:zsh:normal": [f"# from {node}"], SHARED: [f"{node} ssh-ed25519 KEY-{node}"]}
    tools = {"module": "tools", "contributes": contributes}
    zsh = {"module": "zsh", "env": {"ZSHRC": "${shell:zsh:normal}"}}
    hosts = {"module": "hosts", "env": {"KNOWN": f"${{collected:{SHARED}}}"}}
    for manifest in (tools, zsh, hosts):
        (manifests / f"{manifest['module']}.json").write_text(json.dumps(manifest))
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


def known_hosts(plan: ClientPlan) -> set[str]:
    """The nodes whose keys n1's env file of the shared collection holds."""
    text = (plan.materialize / "hosts.env").read_text()
    return {node for node in ("n1", "n2") if f"KEY-{node}" in text}


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
    (domains := tmp_path / "domains.toml").write_text(DOMAINS)
    marks = {"forget_after": FORGET_AFTER, "gone_marks_interval": EVERY}
    async with in_own_task(start(tmp_path / "mesh", seat=marks, domains_file=domains)) as running:
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
        assert known_hosts(n1_plan) == {"n1"}
        await run_once(n2, n2_plan)  # contributes, then releases its lease: gone from now on
        assert await reconciled(n1, n1_plan) == n1_env  # a node-local collection: n2's never in it
        assert known_hosts(n1_plan) == {"n1", "n2"}

        await until(lambda: _has(marked(seat), "n2"))
        assert "n1" not in await marked(seat)
        collect = await until(lambda: _forgotten(operator, "n2"))
        assert collect == {"n1": False, "n2": True}
        assert "forgotten by collections since" in await until(lambda: _because(operator, "n2"))
        assert await reconciled(n1, n1_plan) == n1_env
        assert known_hosts(n1_plan) == {"n1"}  # forgotten on n1's next reconcile
        stored = await get_direct(seat, buckets.COLLECT, f"n2.{SHARED}.tools")
        assert stored is not None and not stored.deleted  # left out by readers, not deleted

        async with holding(n2, "n2", LEASE_TTL):  # back, and held while the seat looks
            await reconciled(n2, n2_plan)
            assert known_hosts(n2_plan) == {"n1", "n2"}  # a node never leaves its own out
            await until(lambda: _lacks(marked(seat), "n2"))
            collect = await until(lambda: _not_forgotten(operator, "n2"))
            assert collect["n2"] is False
            await reconciled(n1, n1_plan)
            assert known_hosts(n1_plan) == {"n1", "n2"}  # back on n1's next reconcile

        removed = await remove_node(seat, "n2")
        assert removed[buckets.COLLECT.name] == ["n2.shell=3Azsh=3Anormal.tools", f"n2.{SHARED}.tools"]
        contribution = await get_direct(seat, buckets.COLLECT, "n2.shell=3Azsh=3Anormal.tools")
        assert contribution is not None and contribution.deleted
        await until(lambda: _lacks(marked(seat), "n2"))
        assert "n2" not in await forgotten_in_collect(operator)


async def test_a_watching_node_follows_a_shared_collection_live(mesh: Mesh, tmp_path: Path) -> None:
    """n1 watches with its refresh and manifest poll an hour away: only the live updates its grants
    import (other nodes' contributions to the shared collection, the fleet's gone marks) can move
    its env file, and they do: n2's items come, go when n2 is forgotten, and come back."""
    n1_plan, n2_plan = plan_of("n1", tmp_path), plan_of("n2", tmp_path)
    timing = WatchTiming(debounce=timedelta(seconds=0.05), refresh=timedelta(hours=1), poll=timedelta(hours=1))
    async with (
        mesh.connect(party(Kind.SEAT)) as seat,
        mesh.connect(party(Kind.NODE, "n1")) as n1,
        mesh.connect(party(Kind.NODE, "n2")) as n2,
        anyio.create_task_group() as tasks,
    ):
        reports: list[Report] = []
        await tasks.start(
            lambda task_status: watch(n1, n1_plan, timing, on_report=reports.append, task_status=task_status)
        )
        assert known_hosts(n1_plan) == {"n1"}
        await until(lambda: _at_least(reports, 2))  # and its resync once it follows what it read

        await run_once(n2, n2_plan)
        await until(lambda: _known(n1_plan, {"n1", "n2"}))
        await until(lambda: _has(marked(seat), "n2"))
        await until(lambda: _known(n1_plan, {"n1"}))
        async with holding(n2, "n2", LEASE_TTL):
            await reconciled(n2, n2_plan)
            await until(lambda: _lacks(marked(seat), "n2"))
            await until(lambda: _known(n1_plan, {"n1", "n2"}))
        tasks.cancel_scope.cancel()


async def _heard(heard: list[str], key: str) -> bool:
    return any(subject.endswith(f"{buckets.COLLECT.name}.{key}") for subject in heard)


async def _at_least(reports: list[Report], count: int) -> bool:
    return len(reports) >= count


async def _known(plan: ClientPlan, nodes: set[str]) -> bool:
    return known_hosts(plan) == nodes


async def test_a_nodes_contributions_past_its_share_are_left_out_and_said_and_the_others_are_read(
    mesh: Mesh, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile n2 writes its own contributions as large as the bucket takes (20 of 60 KB, within
    its quota), against readers bounded here to `MAX_SHARED_PAGES` = 1 page: before, n1's module
    waited ("past 1 pages"); now the seat answers n2's entries only up to its share, the rest said
    as one malformed key, and n1's env file holds n1's items."""
    monkeypatch.setattr(resolve, "MAX_SHARED_PAGES", 1)
    n1_plan = plan_of("n1", tmp_path)
    async with (
        mesh.connect(party(Kind.NODE, "n1")) as n1,
        mesh.connect(party(Kind.NODE, "n2")) as n2,
    ):
        item = json.dumps({"items": ["k" * 60_000]}).encode()
        for number in range(20):
            await put(n2, buckets.COLLECT, f"n2.{SHARED}.m{number:02d}", item)
        await put(n2, buckets.COLLECT, f"n2.{SHARED}.a", json.dumps({"items": ["n2 ssh-ed25519 KEY-n2"]}).encode())
        report = await reconcile(n1, n1_plan)
        hosts = report.modules["hosts"].applied
        assert hosts.state == "applied", hosts.reasons
        assert known_hosts(n1_plan) == {"n1", "n2"}  # n2's small contribution, first by key, fits its share
        assert "kkkk" not in (n1_plan.materialize / "hosts.env").read_text()
        answer = await ask(n1, {"what": "collect", "collection": SHARED})
        assert {entry["key"] for entry in answer["entries"]} == {f"n1.{SHARED}.tools", f"n2.{SHARED}.a"}
        [said] = answer["malformed"]
        assert said["key"] == f"n2.{SHARED}.m00"
        assert "left out with 19 more of node n2's contributions" in said["reason"], said


async def test_a_shared_collection_is_in_key_order_and_leaves_out_a_contribution_holding_a_nul(
    mesh: Mesh, tmp_path: Path
) -> None:
    """Node, then contributor: n1's `tools` before n2's `a` (by contributor alone, n2's came first).
    A hostile n2's contribution holding a NUL, which no env file can carry, is left out and said;
    before, it left the whole collection pending on every node."""
    n1_plan = plan_of("n1", tmp_path)
    async with (
        mesh.connect(party(Kind.NODE, "n1")) as n1,
        mesh.connect(party(Kind.NODE, "n2")) as n2,
    ):
        await put(n2, buckets.COLLECT, f"n2.{SHARED}.a", json.dumps({"items": ["n2 ssh-ed25519 KEY-n2"]}).encode())
        await put(n2, buckets.COLLECT, f"n2.{SHARED}.b", json.dumps({"items": ["evil\u0000"]}).encode())
        report = await reconcile(n1, n1_plan)
        assert report.modules["hosts"].applied.state == "applied", report.modules["hosts"].applied.reasons
        text = (n1_plan.materialize / "hosts.env").read_text()
        assert text.index("KEY-n1") < text.index("KEY-n2")
        assert "evil" not in text


async def test_a_node_is_answered_every_node_of_a_shared_collection_and_its_own_of_any_other(
    mesh: Mesh, tmp_path: Path
) -> None:
    """The verb's scope, asked as a hostile node would: the shared collection whole, any other
    narrowed to the asking node, whatever it names; another node named is refused."""
    heard: list[str] = []
    listener = await mesh.raw(party(Kind.NODE, "n1"))  # all n1's account is sent, on any subject

    async def hear(msg: Any) -> None:
        heard.append(msg.subject)

    await listener.subscribe(">", cb=hear)
    await listener.flush()
    async with (
        mesh.connect(party(Kind.NODE, "n1")) as n1,
        mesh.connect(party(Kind.NODE, "n2")) as n2,
    ):
        await run_once(n1, plan_of("n1", tmp_path))
        await run_once(n2, plan_of("n2", tmp_path))
        await until(lambda: _heard(heard, f"n2.{SHARED}.tools"))
        of_n2 = [subject for subject in heard if f"{buckets.COLLECT.name}.n2." in subject]
        assert not [subject for subject in of_n2 if f".{SHARED}." not in subject]  # n2's shell never reaches n1
        await listener.close()

        async def nodes_of(request: dict[str, str]) -> set[str]:
            return {entry["node"] for entry in (await ask(n1, request))["entries"]}

        assert await nodes_of({"what": "collect", "collection": SHARED}) == {"n1", "n2"}
        assert await nodes_of({"what": "collect", "collection": SHARED, "module": "tools"}) == {"n1", "n2"}
        assert await nodes_of({"what": "collect", "collection": "shell:zsh:normal"}) == {"n1"}
        assert await nodes_of({"what": "collect"}) == {"n1"}
        assert await nodes_of({"what": "collect", "collection": f"{SHARED}2"}) == set()
        assert await nodes_of({"what": "needs"}) == {"n1"}
        for other in ({"collection": SHARED, "node": "n2"}, {"node": "n2"}):
            with pytest.raises(ServiceError, match="a node is answered about its own keys"):
                await ask(n1, {"what": "collect", **other})


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


async def test_each_item_of_a_shared_collection_reaches_its_reader_under_the_node_that_wrote_it(
    mesh: Mesh, tmp_path: Path
) -> None:
    """A hostile n1 contributes a `@cert-authority` line, and tries to pass lines as n2's: an item
    reading as an author's line, an item of two lines, a line break at an item's end. n2's env file
    of the shared collection holds each line under the node that wrote it: n1's CA line under n1's
    author line (a known_hosts consumer can trust by author), and none of the forgeries."""
    n2_plan = plan_of("n2", tmp_path)
    author = "# mesh-provisioner node=n2 contributor=tools"
    async with mesh.connect(party(Kind.NODE, "n1")) as n1, mesh.connect(party(Kind.NODE, "n2")) as n2:
        await put(
            n1, buckets.COLLECT, f"n1.{SHARED}.ca", json.dumps({"items": ["@cert-authority * ssh-ed25519 CA"]}).encode()
        )
        forgeries = (
            [author, "@cert-authority * ssh-ed25519 F1"],
            [f"x\n{author}\n* ssh-ed25519 F2"],
            ["y\r", "* ssh-ed25519 F3"],
        )
        for number, items in enumerate(forgeries):
            await put(n1, buckets.COLLECT, f"n1.{SHARED}.f{number}", json.dumps({"items": items}).encode())
        report = await reconcile(n2, n2_plan)
        assert report.modules["hosts"].applied.state == "applied", report.modules["hosts"].applied.reasons
    lines = sh_value(n2_plan, "KNOWN").split("\n")
    assert lines == [
        "# mesh-provisioner node=n1 contributor=ca",
        "@cert-authority * ssh-ed25519 CA",
        author,
        "n2 ssh-ed25519 KEY-n2",
    ]


def sh_value(plan: ClientPlan, name: str) -> str:
    """A variable of the hosts module's env file, as sh reads it."""
    return sh_env(plan.materialize / "hosts.env")[name]


async def test_a_contributor_past_its_share_is_told_on_its_own_node(
    mesh: Mesh, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """n2's own manifest contributes more than a node's share: its own reconcile says so, and the
    readers of the collection are told which of its keys were left out."""
    n2_plan = plan_of("n2", tmp_path)
    large = {"module": "large", "contributes": {SHARED: ["k" * 20_000]}}
    (n2_plan.manifests / "large.json").write_text(json.dumps(large))
    async with mesh.connect(party(Kind.NODE, "n2")) as n2:
        with caplog.at_level("WARNING", logger="provisioner_client.reconcile"):
            assert (await reconcile(n2, n2_plan)).ok
        said = [r.getMessage() for r in caplog.records if "past a node's share" in r.getMessage()]
        assert said and f"shared collection {SHARED!r}" in said[0], said
        answer = await ask(n2, {"what": "collect", "collection": SHARED})
        assert [bad["key"] for bad in answer["malformed"]] == [f"n2.{SHARED}.large"]
