"""The client's incremental memory (`provisioner_client.resolving.memory`) says what a reconcile may skip and,
when it may not, why, in words an operator reads in a debug line; it is saved only when it changed.

Reasons that come from the bus (a stamp moved, a value rotated behind a verb) are shown on a real
nats-server with the seat and the stand-ins; the others on the memory alone."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from mesh_dev.standins import StandIns
from provisioner_client.materializing.envfile import EnvFolder
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.resolving import memory
from provisioner_client.resolving.manifest import LoadedManifest, load_manifest
from provisioner_client.resolving.memory import UNREAD, BucketState, Memory, World, digest_of, world_of
from provisioner_client.resolving.resolve import Registry
from provisioner_client.resolving.scope import NodeScope
from registry.contract import ActionRecord, AppliedValue, buckets
from registry.wire import Bus, KvItem, delete, get_direct, put
from tests.helpers import NODE

NEEDS = buckets.NEEDS.name
APPLIED = buckets.APPLIED.name
WORLD = World("world-1", {"mesh-config_values": 7}, {"registry": "r1", "collect": "c1", "verbs": "v1"})
AS_BEFORE = "inputs and env file as remembered"


class Applied:
    """One module, `web`, applied and remembered: its manifest, env folder, applied record and memory."""

    def __init__(self, tmp_path: Path, *, on_change: bool = False) -> None:
        self.manifests = tmp_path / "manifests"
        self.manifests.mkdir()
        self.folder = EnvFolder(tmp_path / "env")
        self.memory = Memory.load(tmp_path / "env", NODE)
        self.loaded = self.manifest({"X": "plain"}, on_change=on_change)
        done = self.folder.materialize("web", b"X=plain\n")
        action = ActionRecord(command=("true",), digest=done.digest, outcome="succeeded", finished_at="now")
        self.applied = AppliedValue(
            state="applied", digest=done.digest, file=str(done.path), action=action if on_change else None
        )
        self.memory.record_applied(WORLD, set(), {"web": self.loaded}, set(), self.folder)

    def manifest(self, env: dict[str, str], *, on_change: bool = False) -> LoadedManifest:
        document: dict[str, object] = {"module": "web", "env": env}
        if on_change:
            document["on_change"] = {"command": ["true"]}
        path = self.manifests / "web.json"
        path.write_text(json.dumps(document))
        return load_manifest(path)

    def verdict(self, world: World = WORLD, *, applied: AppliedValue | None = None) -> memory.Verdict:
        return self.memory.verdict(self.loaded, world, applied or self.applied, self.folder)


def test_a_module_applied_from_the_inputs_it_has_now_is_not_resolved_again(tmp_path: Path) -> None:
    web = Applied(tmp_path)
    assert web.verdict() == memory.Verdict(as_before=True, reason=AS_BEFORE)


def moved_stamp(web: Applied) -> World:
    return replace(WORLD, digest="world-2", stamps={"mesh-config_values": 8})


def moved_parts(web: Applied) -> World:
    return replace(WORLD, digest="world-2", parts={"registry": "r2", "collect": "c1", "verbs": "v2"})


def moved_manifest(web: Applied) -> World:
    web.loaded = web.manifest({"X": "other"})
    return WORLD


def old_memory(web: Applied) -> World:
    web.memory.modules["web"] = replace(web.memory.modules["web"], at=time.time() - memory.TRUSTED_FOR - 1)
    return WORLD


def future_memory(web: Applied) -> World:
    web.memory.modules["web"] = replace(web.memory.modules["web"], at=time.time() + 60)
    return WORLD


def forgotten_module(web: Applied) -> World:
    web.memory.modules = {"other": web.memory.modules.pop("web")}
    return WORLD


def memory_without_parts(web: Applied) -> World:
    """A memory written before the world's parts and the manifest's digest were kept."""
    web.memory.world_parts = {}
    web.memory.modules["web"] = replace(web.memory.modules["web"], manifest=None)
    return moved_stamp(web)


def edited_file(web: Applied) -> World:
    web.folder.path_of("web").write_text("X=edited\n")
    return WORLD


def unknown_world(web: Applied) -> World:
    return world_of(Registry(), {"mesh-config_values": UNREAD}, {}, {})


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(moved_stamp, "stamp of mesh-config_values moved", id="a stamp of a bucket read moved"),
        pytest.param(moved_parts, "the registry changed; a verb's answer changed", id="the registry and a verb"),
        pytest.param(moved_manifest, "manifest digest changed", id="its manifest changed"),
        pytest.param(old_memory, "memory older than 10 min", id="remembered too long ago"),
        pytest.param(future_memory, "memory dated in the future (the clock moved back)", id="the clock moved back"),
        pytest.param(forgotten_module, "not remembered as resolved", id="not remembered"),
        pytest.param(memory_without_parts, "inputs changed", id="a memory that kept no parts"),
        pytest.param(edited_file, "env file on disk is not the one applied", id="its file edited by hand"),
        pytest.param(unknown_world, "stamp of mesh-config_values not read", id="a stamp that could not be read"),
    ],
)
def test_a_module_is_resolved_again_saying_what_moved(
    tmp_path: Path, change: Callable[[Applied], World], reason: str
) -> None:
    web = Applied(tmp_path)
    world = change(web)
    assert web.verdict(world) == memory.Verdict(as_before=False, reason=reason)


def test_a_module_pending_or_never_applied_or_whose_action_did_not_run_is_resolved_again(tmp_path: Path) -> None:
    web = Applied(tmp_path, on_change=True)
    assert web.verdict().as_before
    pending = AppliedValue(state="pending", reasons=("x: no value",))
    assert web.verdict(applied=pending).reason == "pending last time"
    assert web.memory.verdict(web.loaded, WORLD, None, web.folder).reason == "no applied record"
    assert web.applied.action is not None
    other_file = web.applied.model_copy(update={"action": web.applied.action.model_copy(update={"digest": "old"})})
    assert web.verdict(applied=other_file).reason == "change action not run on this file"


def test_what_the_memory_says_without_a_memory(tmp_path: Path) -> None:
    web = Applied(tmp_path)
    first = Memory.load(tmp_path / "elsewhere", NODE)
    assert first.verdict(web.loaded, WORLD, web.applied, web.folder).reason == "first run"
    assert first.keys(NEEDS, 5, {}).reason == "first run"
    state = tmp_path / "elsewhere" / memory.FILE
    state.parent.mkdir()
    state.write_text(json.dumps({"version": 1, "node": "node-2", "buckets": {}}))
    assert Memory.load(state.parent, NODE).keys(NEEDS, 5, {}).reason == "memory of another node"
    state.write_text(json.dumps({"version": 2, "node": NODE, "buckets": {}}))
    assert Memory.load(state.parent, NODE).keys(NEEDS, 5, {}).reason == "memory of another version"
    state.write_text("{not json")
    assert Memory.load(state.parent, NODE).keys(NEEDS, 5, {}).reason.startswith("memory unreadable")
    for wrong in ({"needs": [1, 2]}, {"needs": {"stamp": "x"}}, {"needs": None}):  # JSON, of the wrong shape
        state.write_text(json.dumps({"version": 1, "node": NODE, "buckets": wrong}))
        assert Memory.load(state.parent, NODE).keys(NEEDS, 5, {}).reason == "memory unreadable (not a remembered state)"


def test_keys_listed_again_and_found_as_remembered_are_not_saved_again(tmp_path: Path) -> None:
    """A held module has its needs listed at every reconcile: finding them as remembered writes nothing."""
    item = KvItem(f"{NODE}.web.config.x", b"{}", 7)
    first = Memory.load(tmp_path, NODE)
    first.keep_keys(NEEDS, first.converged(NEEDS, 7, [item], {item.key: b"{}"}, {}, listed=True))
    assert first.save()
    again = Memory.load(tmp_path, NODE)
    again.keep_keys(NEEDS, again.converged(NEEDS, 7, [item], {item.key: b"{}"}, {}, listed=True))
    assert not again.save()
    moved = Memory.load(tmp_path, NODE)
    moved.keep_keys(NEEDS, moved.converged(NEEDS, 8, [replace(item, revision=8)], {item.key: b"{}"}, {}, listed=True))
    assert moved.save()


def remembered_keys(at: float = 0.0) -> Memory:
    found = Memory(NODE)
    listed_at = at or time.time()
    found.buckets[NEEDS] = BucketState(10, digest_of({"k": b"v"}), listed_at)
    found.buckets[APPLIED] = BucketState(4, digest_of({"m": b"r"}), listed_at, (KvItem("m", b"r", 4),))
    return found


@pytest.mark.parametrize(
    ("bucket", "stamp", "wanted", "reason"),
    [
        pytest.param(NEEDS, 11, {"k": b"v"}, "stamp of needs moved", id="the stamp moved"),
        pytest.param(NEEDS, 9, {"k": b"v"}, "stamp of needs went back: the bus lost writes", id="the stamp went back"),
        pytest.param(NEEDS, -1, {"k": b"v"}, "stamp of needs not read", id="the stamp was not read"),
        pytest.param(NEEDS, 10, {"k": b"w"}, "the needs wanted differ from those remembered", id="other needs"),
        pytest.param(NEEDS, 10, None, "modules held: the needs keys are listed to keep theirs", id="modules held"),
        pytest.param(APPLIED, 5, None, "stamp of applied moved", id="the applied stamp moved"),
        pytest.param(buckets.COLLECT.name, 0, {}, "collect not remembered", id="a bucket forgotten"),
    ],
)
def test_the_nodes_keys_are_listed_saying_why(
    bucket: str, stamp: int, wanted: dict[str, bytes] | None, reason: str
) -> None:
    assert remembered_keys().keys(bucket, stamp, wanted) == memory.Verdict(as_before=False, reason=reason)


def test_the_nodes_keys_are_taken_as_remembered_while_their_stamp_holds_at_most_ten_minutes() -> None:
    found = remembered_keys()
    assert found.keys(NEEDS, 10, {"k": b"v"}).as_before
    assert found.keys(APPLIED, 4, None).as_before
    assert found.items_of(APPLIED) == [KvItem("m", b"r", 4)]
    assert found.items_of(NEEDS) is None
    old = remembered_keys(at=time.time() - memory.TRUSTED_FOR - 1)
    assert old.keys(NEEDS, 10, {"k": b"v"}).reason == "memory older than 10 min"


def test_the_memory_is_saved_only_when_it_changed(tmp_path: Path) -> None:
    web = Applied(tmp_path)
    assert web.memory.save()
    state = tmp_path / "env" / memory.FILE
    written = state.stat().st_mtime_ns
    again = Memory.load(tmp_path / "env", NODE)
    again.record_applied(WORLD, set(), {"web": web.loaded}, {"web"}, web.folder)
    assert not again.save()
    assert state.stat().st_mtime_ns == written
    again.keep_keys(NEEDS, None)  # nothing to forget: nothing changed
    assert not again.save()
    again.record_applied(replace(WORLD, digest="world-2"), set(), {"web": web.loaded}, set(), web.folder)
    assert again.save()
    kept = Memory.load(tmp_path / "env", NODE)
    assert kept.world == "world-2" and kept.modules == again.modules
    assert kept.modules["web"].manifest == web.loaded.digest


def test_nothing_but_the_memory_and_the_store_name_the_state_file() -> None:
    """So nothing else reads or writes it: the memory, through the node's store that keeps it."""
    package = Path(memory.__file__).parent.parent  # the whole client, not only its resolving
    naming = [p.name for p in package.rglob("*.py") if re.search(rf"{re.escape(memory.FILE)}|\bFILE\b", p.read_text())]
    assert sorted(naming) == ["memory.py", "records.py"]


def test_a_memory_kept_nowhere_is_never_written(tmp_path: Path) -> None:
    nowhere = Memory(NODE)
    nowhere.keep_keys(NEEDS, BucketState(1, "d", time.time()))
    assert not nowhere.save()


async def test_the_first_reconcile_says_first_run_and_the_next_skips_everything(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    first = await reconcile(bus, plan)
    assert {str(v) for v in [*first.verdicts.values(), *first.key_verdicts.values()]} == {"first run"}
    again = await reconcile(bus, plan)
    assert {m: str(v) for m, v in again.verdicts.items()} == dict.fromkeys(("app", "postgres", "tools"), AS_BEFORE)
    assert all(v.as_before for v in again.key_verdicts.values())


async def test_a_key_deleted_behind_the_clients_back_moves_the_stamp_of_needs(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    await reconcile(bus, plan)
    key = "node-1.app.secret.db-password"
    item = await get_direct(bus, buckets.NEEDS, key)
    assert item is not None
    await delete(bus, buckets.NEEDS, key, last=item.revision)
    with caplog.at_level(logging.DEBUG, logger="provisioner_client.resolving.own"):
        again = await reconcile(bus, plan)
    assert again.key_verdicts[NEEDS] == memory.Verdict(as_before=False, reason="stamp of needs moved")
    assert again.key_verdicts[APPLIED].as_before
    assert f"node {NODE}: {NEEDS} listed: stamp of needs moved" in caplog.messages


async def test_writes_the_bus_lost_are_written_again_and_said_in_one_line(
    domains: StandIns, bus: Bus, js: JetStreamContext, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    """As a server whose store rolled back to an earlier prefix: the node's last need is gone, and the
    stamp of its needs is below the one the client remembers."""
    await reconcile(bus, plan)
    last = max(await NodeScope(NODE).read(bus, buckets.NEEDS), key=lambda item: item.revision)
    await js.purge_stream(buckets.NEEDS.stream, subject=buckets.NEEDS.subject(last.key))
    with caplog.at_level(logging.WARNING, logger="provisioner_client.resolving.own"):
        again = await reconcile(bus, plan)
    assert again.key_verdicts[NEEDS] == memory.Verdict(
        as_before=False, reason="stamp of needs went back: the bus lost writes"
    )
    restored = await get_direct(bus, buckets.NEEDS, last.key)
    assert restored is not None and restored.value == last.value
    said = [m for m in caplog.messages if "the bus lost writes" in m]
    assert len(said) == 1 and f"its {NEEDS} keys (their stamp went back from {last.revision} to " in said[0], said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="provisioner_client.resolving.own"):
        await reconcile(bus, plan)
    assert not [m for m in caplog.messages if "the bus lost writes" in m]


async def test_a_value_changed_in_a_bucket_read_moves_its_stamp_for_every_module(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    await reconcile(bus, plan)
    await put(bus, domains.config, "log-level", json.dumps("debug").encode())
    with caplog.at_level(logging.DEBUG, logger="provisioner_client.reconcile"):
        again = await reconcile(bus, plan)
    moved = f"stamp of {domains.config.name} moved"
    assert {m: str(v) for m, v in again.verdicts.items()} == dict.fromkeys(("app", "postgres", "tools"), moved)
    assert f"node {NODE}: module app resolved: {moved}" in caplog.messages


async def test_a_rotated_secret_is_a_verbs_answer_changed(domains: StandIns, bus: Bus, plan: ClientPlan) -> None:
    await reconcile(bus, plan)
    domains.vault.rotate("db-password", "rotated-password")
    again = await reconcile(bus, plan)
    assert str(again.verdicts["app"]) == "a verb's answer changed"


async def test_a_changed_manifest_resolves_that_module_alone(domains: StandIns, bus: Bus, plan: ClientPlan) -> None:
    await reconcile(bus, plan)
    tools = plan.manifests / "tools.json"
    tools.write_text(json.dumps({**json.loads(tools.read_text()), "env": {"EXTRA": "plain"}}))
    again = await reconcile(bus, plan)
    assert {m: str(v) for m, v in again.verdicts.items()} == {
        "app": AS_BEFORE,
        "postgres": AS_BEFORE,
        "tools": "manifest digest changed",
    }
    assert again.ok and again.unchanged == {"app", "postgres"}


async def test_a_changed_contribution_changes_the_nodes_collections_for_every_module(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    tools = plan.manifests / "tools.json"
    tools.write_text(tools.read_text().replace("setopt autocd", "setopt autocd extendedglob"))
    again = await reconcile(bus, plan)
    collections = "the node's collections changed"
    assert {m: str(v) for m, v in again.verdicts.items()} == {
        "app": collections,
        "postgres": collections,
        "tools": f"manifest digest changed; {collections}",
    }
