"""A rollout's reasons for a pending module, as the node client words them, read in
their classes (`registry.contract.pending`, `registry.contract.fleet`): `query applied --by-reason`
shows one line per class however each node goes on (its place in the queue, who paused), against a
real seat."""

from __future__ import annotations

import json
import sys

import anyio

from mesh_dev.local_nats import LocalNats
from registry.contract import PENDING_CAUSES, buckets, fleet, pending_causes
from registry.wire import Bus
from tests.helpers import clean_environment, put_many

WAITING = [
    "rollout: waiting for a slot (3 ahead of it, budget 5)",
    "rollout: waiting for a slot (7 ahead of it, budget 5)",
]
PAUSED = "rollout: paused by seat: node n9's change c1 failed: exit 1"
APPLIED = {
    "n1.web": json.dumps({"state": "pending", "reasons": [WAITING[0]]}).encode(),
    "n2.web": json.dumps({"state": "pending", "reasons": [WAITING[1]]}).encode(),
    "n3.web": json.dumps({"state": "pending", "reasons": [PAUSED]}).encode(),
    "n4.api": json.dumps({"state": "pending", "reasons": ["config db:url: no value"]}).encode(),
}


def test_each_rollout_reason_is_a_class_of_its_own_told_by_how_it_starts() -> None:
    assert PENDING_CAUSES == (
        "verb_refused",
        "verb_unanswered",
        "rollout_waiting",
        "rollout_paused",
        "rollout_aborted",
        "rollout_unreachable",
        "other",
    )
    said = {
        WAITING[0]: "rollout_waiting",
        PAUSED: "rollout_paused",
        "rollout: aborted by ops: bad value": "rollout_aborted",
        "rollout: coordination unreachable for 30 s: proceeding without a slot": "rollout_unreachable",
        # a verb's words inside a rollout's reason: the rollout's class, by how it starts
        "rollout: coordination unreachable: nobody answers $KV.mesh-provisioner_fleet": "rollout_unreachable",
        "config x: the rollout: paused, said elsewhere": "other",
    }
    assert {reason: pending_causes([reason]) for reason in said} == {r: {c} for r, c in said.items()}
    assert fleet.reason_group(WAITING[1]) == "rollout: waiting for a slot"
    assert fleet.reason_group("config db:url: no value") == "config db:url: no value"


async def test_by_reason_groups_a_rollouts_reasons_by_class(server: LocalNats, bus: Bus) -> None:
    await put_many(bus, buckets.APPLIED, APPLIED)
    command = [sys.executable, "-m", "provisioner.commands.cli", "query", "applied", "--by-reason", "--json"]
    result = await anyio.run_process([*command, "--nats-url", server.url], env=clean_environment(), check=False)
    groups = json.loads(result.stdout)["reasons"]
    assert result.returncode == 0
    assert [(g["reason"], g["count"]) for g in groups] == [
        ("rollout: waiting for a slot", 2),
        ("config db:url: no value", 1),
        ("rollout: paused", 1),
    ]
