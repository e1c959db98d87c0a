"""`mesh-provisioner rollout status|pause|resume|abort` end to end, as the operator on its own
account (static and JWT), against a real nats-server running the generated grants:
what each command prints, its exit code, and what it left in the fleet bucket."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from registry.access import Kind, creds_path, seed_path
from registry.contract import buckets, fleet
from registry.wire import Bus, get_latest, put
from tests.helpers import clean_environment, in_own_task, put_many
from tests.isolation import JwtMesh, Mesh, party

OPS, SEAT = party(Kind.OPERATOR, "ops"), party(Kind.SEAT)


NODES, MODULES = ("n1", "n2"), ("web", "api")
A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'


@pytest.fixture
async def seat(mesh: Mesh) -> AsyncIterator[Bus]:
    """The seat's connection, once n1 and n2 registered needs of web and api: their claims count."""
    async with in_own_task(mesh.connect(SEAT)) as bus:
        await put_many(
            bus, buckets.NEEDS, {f"{node}.{module}.config.x": A_NEED for node in NODES for module in MODULES}
        )
        yield bus


async def rollout(mesh: Mesh, *args: str) -> tuple[int, str, str]:
    """`mesh-provisioner rollout ...` as a child process on the operator's credentials, stdout a pipe."""
    if isinstance(mesh, JwtMesh):
        credentials = ["--nats-creds", str(creds_path(mesh.keys, OPS.label))]
    else:
        credentials = ["--nats-nkey", str(seed_path(mesh.keys, OPS))]
    command = [sys.executable, "-m", "provisioner.commands.cli", "rollout", *args]
    command += ["--nats-url", mesh.server.url, *credentials]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def hold_of(seat: Bus, module: str) -> tuple[fleet.Hold, int] | None:
    found = await get_latest(seat, fleet.FLEET, fleet.hold_key(module))
    if found is None or found.deleted:
        return None
    return fleet.Hold.model_validate_json(found.value), found.revision


def claim(state: str, reason: str = "") -> bytes:
    value = {"state": state, "change": "c7", "since": datetime.now(UTC).isoformat(), "ttl_seconds": 60}
    return json.dumps(value | {"reason": reason}).encode()


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.slow
async def test_pause_resume_and_abort_write_the_hold_and_say_what_they_did(mesh: Mesh, seat: Bus) -> None:
    code, out, _ = await rollout(mesh, "pause", "web", "--reason", "checking the db url", "--by", "alice")
    assert code == 0
    assert out.startswith("rollout of web paused by alice: no node takes a new slot of it")
    held = await hold_of(seat, "web")
    assert held is not None
    assert (held[0].state, held[0].by, held[0].reason, held[0].node) == ("paused", "alice", "checking the db url", None)

    code, out, _ = await rollout(mesh, "pause", "web", "--by", "bob")
    assert (code, out.split(" (")[0]) == (0, "rollout of web is paused already")
    assert await hold_of(seat, "web") == held, "a pause over a pause wrote"

    code, out, _ = await rollout(mesh, "abort", "web", "--by", "bob")
    assert code == 0
    assert out.startswith("rollout of web aborted by bob (it was paused: by alice since ")
    aborted = await hold_of(seat, "web")
    assert aborted is not None
    assert (aborted[0].state, aborted[0].by, aborted[0].reason) == ("aborted", "bob", "checking the db url")

    code, out, err = await rollout(mesh, "pause", "web")
    assert (code, out) == (11, "")
    assert "rollout of web is aborted (by bob since " in err and "left aborted" in err
    assert await hold_of(seat, "web") == aborted, "a pause over an abort wrote"

    code, out, _ = await rollout(mesh, "resume", "web")
    assert code == 0
    assert out.startswith("rollout of web resumed (its hold deleted: aborted, by bob since ")
    assert await hold_of(seat, "web") is None

    code, out, _ = await rollout(mesh, "resume", "web")
    assert (code, out) == (0, "rollout of web is not held: nothing to resume\n")


async def test_resume_deletes_the_seats_pause(mesh: Mesh, seat: Bus) -> None:
    paused = fleet.Hold(state="paused", since=datetime.now(UTC), by="seat", reason="n1 failed", node="n1")
    await put(seat, fleet.FLEET, fleet.hold_key("a.b"), paused.model_dump_json().encode())
    code, out, _ = await rollout(mesh, "resume", "a.b")
    assert code == 0
    assert "node n1: n1 failed" in out
    assert await hold_of(seat, "a.b") is None


async def test_resume_with_no_hold_names_the_failed_changes_that_hold_slots(mesh: Mesh, seat: Bus) -> None:
    """A failure nobody paused for (the node does not run the module by placement, or no seat ran)
    uses its slot up, and `resume` has no hold to delete: it says which nodes hold slots and how to
    free them."""
    await put(seat, fleet.FLEET, fleet.claim_key("web", "n1"), claim("failed", "exit 3"))
    await put(seat, fleet.FLEET, fleet.claim_key("web", "n2"), claim("waiting"))
    code, out, _ = await rollout(mesh, "resume", "web")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "rollout of web is not held: nothing to resume"
    assert lines[1].startswith("the failed changes of 1 node (n1) hold its slots, no pause followed them: ")
    assert "`rollout pause web`, then `rollout resume web`" in lines[1]


async def test_pause_abort_and_resume_say_what_they_did_as_json(mesh: Mesh, seat: Bus) -> None:
    await put(seat, fleet.FLEET, fleet.claim_key("web", "n1"), claim("failed", "exit 3"))
    code, out, _ = await rollout(mesh, "resume", "web", "--json")
    said = {"module": "web", "state": "resumed", "before": None, "failed_nodes": ["n1"], "changed": False}
    assert (code, json.loads(out)) == (0, said)
    code, out, _ = await rollout(mesh, "pause", "web", "--by", "alice", "--json")
    assert (code, json.loads(out)) == (0, {"module": "web", "state": "paused", "before": None, "changed": True})
    code, out, _ = await rollout(mesh, "abort", "web", "--json")
    aborted = json.loads(out)
    assert (code, aborted["changed"], aborted["before"]["by"]) == (0, True, "alice")
    code, out, _ = await rollout(mesh, "pause", "web", "--json")
    assert (code, json.loads(out)["state"], json.loads(out)["changed"]) == (11, "aborted", False)


@pytest.mark.slow
async def test_status_shows_each_modules_hold_and_claims_by_state(mesh: Mesh, seat: Bus) -> None:
    code, out, _ = await rollout(mesh, "status")
    assert (code, out.splitlines()[-1]) == (
        0,
        "0 modules: 0 paused, 0 aborted; claims: 0 waiting, 0 running, 0 failed, 0 expired",
    )
    paused = fleet.Hold(state="paused", since=datetime.now(UTC), by="seat", reason="exit 3", node="n1")
    await put(seat, fleet.FLEET, fleet.hold_key("web"), paused.model_dump_json().encode())
    for node, state in (("n1", "failed"), ("n2", "waiting")):
        await put(seat, fleet.FLEET, fleet.claim_key("web", node), claim(state, reason=f"{state} \x1b[31m"))
    await put(seat, fleet.FLEET, fleet.claim_key("api", "n2"), claim("running"))

    code, out, _ = await rollout(mesh, "status")
    lines = out.splitlines()
    assert code == 11
    assert cells(lines[0]) == ["MODULE", "HOLD", "BY", "SINCE", "WAITING", "RUNNING", "FAILED", "EXPIRED", "WHY"]
    assert cells(lines[1]) == ["api", "none", "0", "1", "0", "0"]
    web = cells(lines[2])
    assert web[:3] == ["web", "paused", "seat"] and web[4:] == ["1", "0", "1", "0", "node n1: exit 3"]
    assert lines[-1] == "2 modules: 1 paused, 0 aborted; claims: 1 waiting, 1 running, 1 failed, 0 expired"

    code, out, _ = await rollout(mesh, "status", "web")
    assert code == 11
    nodes = out.split("\n\n")[2].splitlines()
    assert cells(nodes[0]) == ["NODE", "STATE", "CHANGE", "SINCE", "WHY"]
    assert [cells(line)[:3] + cells(line)[4:] for line in nodes[1:]] == [
        ["n1", "failed", "c7", "failed \\x1b[31m"],
        ["n2", "waiting", "c7", "waiting \\x1b[31m"],
    ]

    code, out, _ = await rollout(mesh, "status", "web", "--json")
    shown = json.loads(out)["rollouts"]
    assert code == 11
    assert [(r["module"], r["hold"]["state"], r["claims"]["failed"]) for r in shown] == [("web", "paused", 1)]
    assert [n["node"] for n in shown[0]["nodes"]] == ["n1", "n2"]

    code, out, _ = await rollout(mesh, "status", "db")
    assert code == 0
    assert cells(out.splitlines()[1]) == ["db", "none", "0", "0", "0", "0"]


async def test_help_says_what_a_hold_does_and_the_exit_codes() -> None:
    command = [sys.executable, "-m", "provisioner.commands.cli", "rollout", "abort", "--help"]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    shown = result.stdout.decode()
    assert result.returncode == 0
    assert "usage: mesh-provisioner rollout abort" in shown
    assert '"rollout": {"rollback": true}' in shown
    assert "`status` exits 11 when a rollout shown is held" in shown


async def test_status_counts_the_claims_past_one_batch_read(server: LocalNats, bus: Bus) -> None:
    """More claims than one batch read answers (1,024): read in pages, every one counted."""
    paused = fleet.Hold(state="paused", since=datetime.now(UTC), by="seat")
    await put(bus, fleet.FLEET, fleet.hold_key("web"), paused.model_dump_json().encode())
    nodes = [f"n{i:04}" for i in range(1025)]
    await put_many(bus, buckets.NEEDS, {f"{node}.web.config.x": A_NEED for node in nodes})  # their claims count
    await put_many(bus, fleet.FLEET, {fleet.claim_key("web", node): claim("waiting") for node in nodes})
    command = [sys.executable, "-m", "provisioner.commands.cli", "rollout", "status", "--nats-url", server.url]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    lines = result.stdout.decode().splitlines()
    assert result.returncode == 11
    assert cells(lines[1])[:3] + cells(lines[1])[4:] == ["web", "paused", "seat", "1025", "0", "0", "0"]
