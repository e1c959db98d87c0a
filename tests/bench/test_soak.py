"""`bench --soak` runs end to end at tiny sizes, so that CI runs its code: a hostile node's
whole repertoire, honest nodes, an operator; and the soak's check of the honest keys sees a change."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.honest import HonestNode, check_honest_keys
from bench.register import reconcile_once
from bench.soak import SoakSizes, run_soak
from mesh_dev.local_nats import LocalNats
from provisioner_client.resolving.own import OwnKeys
from registry.contract import buckets
from registry.wire import Bus, get_latest, put
from tests.helpers import serving

# Quotas a few of the hostile node's values pass, and buckets small enough for them to matter. Not
# smaller: the guard cuts the filler back after the fact, and at its 15 MB/s a 4 MiB bucket was full
# before a loaded machine's guard reacted (2 honest writes refused in one full run; tests/bench/test_fill.py
# uses 16 MiB too). No refusal at real sizes is the bench's to show (`python -m bench --soak`).
SMALL = {"node_quota_keys": 100, "node_quota_bytes": 256 * 1024, "bucket_max_bytes": 16 * 1024 * 1024}


@pytest.mark.slow
async def test_the_soak_runs_every_party_and_finds_no_honest_key_changed(tmp_path: Path) -> None:
    sizes = SoakSizes(seconds=3, nodes=3, rate=10, every=1, idle_seconds=1, seat=SMALL, hostile_writers=2)
    report, details = await run_soak(tmp_path, sizes, jwt=False)
    honest = details["honest"]
    assert (honest["registered"], honest["failed"], honest["writes_refused"]) == (3, 0, 0), honest["failures"]
    assert honest["writes_after_registering"] == 0
    assert details["changed"] == []
    assert details["verdict"]["verdict"] == "over-quota", details["verdict"]
    assert set(details["hostile"]) >= {"fill", "listings", "churn", "requests"}
    assert details["hostile"]["churn"]["connection_refused_why"], "the churn went past the connection limit"
    shown = {figure.name: figure.value for figure in report.figures}
    assert shown["honest keys checked against what their node wrote"] == 3 * 110


async def test_a_key_rewritten_or_added_by_anyone_but_its_node_is_found(nats_server: LocalNats, bus: Bus) -> None:
    honest = HonestNode(7)
    async with serving(nats_server.url):
        await reconcile_once(bus, OwnKeys(bus, honest.scope, honest.memory), honest.number)
        ledgers = {"n00007": honest.ledger}
        assert (await check_honest_keys(bus, ledgers)).changed == [], "as its node left them"
        same = await get_latest(bus, buckets.NEEDS, "n00007.m0.config.v0")
        assert same is not None
        await put(bus, buckets.NEEDS, "n00007.m0.config.v0", same.value)  # the same content, written by another
        await put(bus, buckets.NEEDS, "n00007.m0.config.v1", b'{"placeholder":"${config:other}","used_in":[]}')
        await put(bus, buckets.APPLIED, "n00007.planted", b'{"state":"applied"}')
        checked = await check_honest_keys(bus, ledgers)
    assert checked.keys == 110
    changed = sorted(change.split(":")[0] for change in checked.changed)
    assert changed == [
        "mesh-provisioner_applied n00007.planted",
        "mesh-provisioner_needs n00007.m0.config.v0",
        "mesh-provisioner_needs n00007.m0.config.v1",
    ]
