"""A reconcile that finds the node's keys as the last one left them does not list them
(`provisioner_client.resolving.memory`); anything that moved them, or a remembered state it cannot
vouch for, makes it list them again. On a real nats-server, the seat and the stand-ins."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.resolving import memory
from provisioner_client.resolving.scope import NodeScope
from registry.contract import buckets
from registry.wire import Bus, delete, get_direct, put, snapshot

OWN = {buckets.NEEDS.name, buckets.COLLECT.name, buckets.APPLIED.name}


async def test_an_unchanged_reconcile_lists_none_of_the_nodes_keys_and_writes_nothing(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    first = await reconcile(bus, plan)
    assert first.listed == OWN
    state = plan.materialize / memory.FILE
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    written = state.stat().st_mtime_ns
    again = await reconcile(bus, plan)
    assert again.ok
    assert again.listed == set()
    assert not any(again.writes.values())
    assert state.stat().st_mtime_ns == written, "nothing new to remember"
    assert b"dev-only-s3cret" not in state.read_bytes()


async def test_the_stamp_is_the_revision_of_the_latest_entry_under_the_node_deletions_included(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    scope = NodeScope(plan.node)
    needs = [i for i in await snapshot(bus, buckets.NEEDS) if scope.owns(i.key)]
    assert await scope.stamp(bus, buckets.NEEDS) == max(i.revision for i in needs)
    await put(bus, buckets.NEEDS, "node-2.web.config.x", b"{}")  # another node's key moves nothing of ours
    assert await scope.stamp(bus, buckets.NEEDS) == max(i.revision for i in needs)
    revision = await delete(bus, buckets.NEEDS, needs[0].key, last=needs[0].revision)
    assert await scope.stamp(bus, buckets.NEEDS) == revision
    assert await NodeScope("node-9").stamp(bus, buckets.NEEDS) == 0


async def test_a_key_changed_behind_the_clients_back_is_listed_and_put_back(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    key = "node-1.app.secret.db-password"
    item = await get_direct(bus, buckets.NEEDS, key)
    assert item is not None
    await delete(bus, buckets.NEEDS, key, last=item.revision)
    again = await reconcile(bus, plan)
    assert again.listed == {buckets.NEEDS.name}
    assert again.writes[buckets.NEEDS.name].written == [key]
    restored = await get_direct(bus, buckets.NEEDS, key)
    assert restored is not None and not restored.deleted and restored.value == item.value
    assert (await reconcile(bus, plan)).listed == set()


async def test_a_changed_manifest_lists_and_converges_what_it_changes(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    tools = plan.manifests / "tools.json"
    document = json.loads(tools.read_text())
    document["env"] = {"EXTRA": "${config:log-level}"}
    document["contributes"] = {}
    tools.write_text(json.dumps(document))
    again = await reconcile(bus, plan)
    assert again.ok, again.summary()
    assert {buckets.NEEDS.name, buckets.COLLECT.name} <= again.listed
    assert "node-1.tools.config.log-level" in again.writes[buckets.NEEDS.name].written
    assert again.writes[buckets.COLLECT.name].deleted
    assert (await reconcile(bus, plan)).listed == set()


async def test_a_remembered_state_too_old_unreadable_or_another_nodes_is_not_trusted(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    state = plan.materialize / memory.FILE
    document = json.loads(state.read_text())
    for bucket in document["buckets"].values():
        bucket["listed_at"] -= memory.TRUSTED_FOR + 1
    state.write_text(json.dumps(document))
    assert (await reconcile(bus, plan)).listed == OWN
    state.write_text(json.dumps({**json.loads(state.read_text()), "node": "node-2"}))
    assert (await reconcile(bus, plan)).listed == OWN
    state.write_bytes(b"{not json")
    report = await reconcile(bus, plan)
    assert report.ok and report.listed == OWN and not any(report.writes.values())
    assert (await reconcile(bus, plan)).listed == set()


async def test_a_stamp_that_does_not_agree_is_listed_and_remembered_again(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    state = plan.materialize / memory.FILE
    document = json.loads(state.read_text())
    document["buckets"][buckets.NEEDS.name]["digest"] = "not what is wanted"
    document["buckets"][buckets.NEEDS.name]["stamp"] = -5
    state.write_text(json.dumps(document))
    again = await reconcile(bus, plan)
    assert buckets.NEEDS.name in again.listed and not any(again.writes.values())
    assert json.loads(state.read_text())["buckets"][buckets.NEEDS.name]["stamp"] > 0


async def test_modules_whose_inputs_are_as_before_are_not_resolved_and_their_sources_still_followed(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    first = await reconcile(bus, plan)
    files = {p.name: p.read_bytes() for p in plan.materialize.glob("*.env")}
    again = await reconcile(bus, plan)
    assert again.unchanged == {"app", "postgres", "tools"}
    assert {m: r.applied for m, r in again.modules.items()} == {m: r.applied for m, r in first.modules.items()}
    assert again.sources == first.sources
    assert {p.name: p.read_bytes() for p in plan.materialize.glob("*.env")} == files
    assert not any(again.writes.values()) and again.actions_run == []


async def test_a_value_changed_in_a_bucket_moves_its_stamp_and_every_module_is_resolved_again(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    await put(bus, domains.config, "log-level", json.dumps("debug").encode())
    again = await reconcile(bus, plan)
    assert again.unchanged == set()
    assert 'LOG_LEVEL="debug"' in (plan.materialize / "app.env").read_text()
    assert (await reconcile(bus, plan)).unchanged == {"app", "postgres", "tools"}


async def test_a_rotated_secret_is_seen_by_its_digest_and_the_module_written_again(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    domains.vault.rotate("db-password", "rotated-password")
    again = await reconcile(bus, plan)
    assert "app" not in again.unchanged and again.modules["app"].written
    assert "rotated-password" in (plan.materialize / "app.env").read_text()
    assert b"rotated-password" not in (plan.materialize / memory.FILE).read_bytes()


async def test_a_file_changed_on_disk_resolves_that_module_only_and_puts_it_back(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    postgres = plan.materialize / "postgres.env"
    content = postgres.read_bytes()
    postgres.chmod(0o644)
    again = await reconcile(bus, plan)
    assert again.unchanged == {"app", "tools"} and again.modules["postgres"].written
    assert stat.S_IMODE(postgres.stat().st_mode) == 0o600 and postgres.read_bytes() == content
    assert not any(again.writes.values())
    assert (await reconcile(bus, plan)).unchanged == {"app", "postgres", "tools"}


async def test_a_changed_contribution_changes_the_world_and_reaches_the_collection(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    tools = plan.manifests / "tools.json"
    tools.write_text(tools.read_text().replace("setopt autocd", "setopt autocd extendedglob"))
    again = await reconcile(bus, plan)
    assert again.unchanged == set()
    assert "extendedglob" in (plan.materialize / "app.env").read_text()
    assert (await reconcile(bus, plan)).unchanged == {"app", "postgres", "tools"}


async def test_a_module_resolved_longer_ago_than_trusted_is_resolved_again(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    state = plan.materialize / memory.FILE
    document = json.loads(state.read_text())
    document["modules"]["app"][1] -= memory.TRUSTED_FOR + 1
    state.write_text(json.dumps(document))
    again = await reconcile(bus, plan)
    assert again.unchanged == {"postgres", "tools"}
    assert not any(again.writes.values())
    assert (await reconcile(bus, plan)).unchanged == {"app", "postgres", "tools"}


async def test_a_bucket_that_does_not_exist_is_a_stable_stamp_and_spares_the_other_modules(
    provisioned: Bus, tmp_path: Path
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "web.json").write_text(json.dumps({"module": "web", "env": {"LEVEL": "${config:log-level}"}}))
    (manifests / "plain.json").write_text(json.dumps({"module": "plain", "env": {"GREETING": "hello"}}))
    plan = ClientPlan(node="node-1", manifests=manifests, materialize=tmp_path / "env")
    first = await reconcile(provisioned, plan)
    assert first.modules["web"].applied.state == "pending" and first.modules["plain"].applied.state == "applied"
    again = await reconcile(provisioned, plan)
    assert again.unchanged == {"plain"}, "the pending module is resolved again, the applied one is not"
    assert again.modules["web"].applied == first.modules["web"].applied
    assert not any(again.writes.values())
