"""The fleet's `what=nodes` answer as the seat's view builds it: keys out of shape kept by the node
they fall under (a node's own thousands answered to it, never to another), rows encoded again
only when what they say changed. Pure logic: the view's watches are tested in test_nodes.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from provisioner.verb.nodes import Fleet, answer_pages
from provisioner.verb.request import Query
from registry.contract import buckets
from registry.wire import Holder, KvItem, node_key

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
HOLDER = Holder(id="h", host="host", pid=1, since=NOW - timedelta(hours=1), ttl_seconds=30)


async def answer(fleet: Fleet, node: str | None = None, *, now: datetime = NOW) -> dict[str, object]:
    [page] = await answer_pages(fleet, Query(what="nodes", node=node), budget=1 << 20, cursor_of=str, now=now)
    answer: dict[str, object] = json.loads(page)
    return answer


def keys_out_of_shape(answered: dict[str, object]) -> list[tuple[str, str]]:
    found = answered["malformed"]
    assert isinstance(found, list)
    return [(entry["bucket"], entry["key"]) for entry in found]


def fleet_with_keys_out_of_shape() -> Fleet:
    fleet = Fleet()
    revision = 0
    for node in ("n1", "n2", "a.b"):
        revision += 1
        fleet.apply_lease(KvItem(node_key(node), HOLDER.model_dump_json().encode(), revision, stored_at=NOW))
    token = {"n1": "n1", "n2": "n2", "a.b": "a=2Eb"}
    for node in ("n1", "n2", "a.b"):
        for number in range(3):
            revision += 1
            fleet.apply_applied(KvItem(f"{token[node]}.bad{number}", b"[1", revision, stored_at=NOW))
    fleet.apply_lease(KvItem("node.n1.extra", b"{}", revision + 1, stored_at=NOW))
    return fleet


async def test_a_nodes_keys_out_of_shape_are_answered_to_it_and_never_to_another() -> None:
    fleet = fleet_with_keys_out_of_shape()
    applied = buckets.APPLIED.name
    assert keys_out_of_shape(await answer(fleet, "n1")) == [
        (applied, "n1.bad0"),
        (applied, "n1.bad1"),
        (applied, "n1.bad2"),
        (buckets.LEASES.name, "node.n1.extra"),
    ]
    assert keys_out_of_shape(await answer(fleet, "a.b")) == [(applied, f"a=2Eb.bad{n}") for n in range(3)]
    assert keys_out_of_shape(await answer(fleet, "a")) == []
    assert keys_out_of_shape(await answer(fleet, "nobody")) == []
    assert len(keys_out_of_shape(await answer(fleet))) == 10


async def test_a_key_out_of_shape_written_again_in_shape_or_purged_is_no_longer_said() -> None:
    fleet = fleet_with_keys_out_of_shape()
    fleet.apply_applied(KvItem("n1.bad0", b'{"state":"applied"}', 100, stored_at=NOW))
    fleet.apply_applied(KvItem("n1.bad1", b"", 101, stored_at=NOW, deleted=True))
    assert keys_out_of_shape(await answer(fleet, "n1")) == [
        (buckets.APPLIED.name, "n1.bad2"),
        (buckets.LEASES.name, "node.n1.extra"),
    ]
    fleet.forget_purged(buckets.APPLIED, "n2", 1000)
    assert keys_out_of_shape(await answer(fleet, "n2")) == []
    assert len(keys_out_of_shape(await answer(fleet))) == 5


async def test_a_row_says_what_changed_since_it_was_last_answered() -> None:
    fleet = fleet_with_keys_out_of_shape()
    first = (await answer(fleet, now=NOW + timedelta(seconds=5)))["entries"]
    assert isinstance(first, list) and first[0]["because"].startswith("lease renewed 5 s ago")
    fleet.apply_lease(KvItem(node_key("n1"), b"", 200, stored_at=NOW + timedelta(seconds=6), deleted=True))
    fleet.apply_applied(KvItem("n2.web", b'{"state":"pending"}', 201, stored_at=NOW))
    later = (await answer(fleet, now=NOW + timedelta(seconds=700)))["entries"]
    assert isinstance(later, list)
    rows = {row["node"]: row for row in later}
    assert rows["n1"]["lease"]["state"] == "released" and rows["n1"]["verdict"] == "stale"
    assert rows["n2"]["pending"] == 1 and rows["n2"]["verdict"] == "stale"
    assert rows["a.b"]["because"].startswith("no renewal for 11 min")
