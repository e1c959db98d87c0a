"""Rollouts, the node's side (`provisioner_client.rollout`): the manifest's and the settings' words
validated; admission ordering (pure); pacing; and the gate on a real nats-server's fleet bucket:
who is admitted in which order, a renewal keeping its place, a failed claim kept and deleted on
resume, an unreachable coordination's bounded wait and fallbacks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from provisioner_client.errors import MaterializeError
from provisioner_client.resolving.manifest import LoadedManifest, Manifest, Rollout
from provisioner_client.rollout import Budget, RolloutGate, RolloutPlan, admission
from provisioner_client.rollout.admission import live_claims, verdict
from provisioner_client.rollout.budget import Unreachable
from provisioner_client.rollout.gate import RECORD, Claims
from provisioner_client.rollout.pacing import due_at, paced
from provisioner_client.settings import ClientSettings
from provisioner_client.state.records import ModuleRollout
from provisioner_client.watch.fleet import FleetInterest
from registry.access import Kind
from registry.contract import ActionRecord, fleet, to_json
from registry.wire import BucketConfig, Bus, KvItem, Message, create_bucket, delete, get_direct, put
from tests.helpers import put_many
from tests.isolation import Mesh, party

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _manifest(rollout: dict[str, Any] | None = None, **on_change: Any) -> Manifest:
    document: dict[str, Any] = {"module": "web", "env": {"A": "1"}}
    if rollout is not None:
        document["rollout"] = rollout
    if on_change:
        document["on_change"] = on_change
    return Manifest.model_validate(document)


@pytest.mark.parametrize(
    ("rollout", "said"),
    [
        ({"budget": 0}, "admits nobody"),
        ({"budget": -2}, "admits nobody"),
        ({"budget": "0%"}, "neither an integer"),
        ({"budget": "101%"}, "neither an integer"),
        ({"budget": "ten"}, "neither an integer"),
        ({"budget": True}, "not true or false"),
        ({"budget": 2.5}, "an integer >= 1"),
        ({"budget": 3, "splay_seconds": 5}, "for a module without a budget"),
        ({"wait_seconds": 10, "wait_max_seconds": 5}, "must be at least wait_seconds"),
        ({"splay_seconds": 7200}, "less than or equal to 3600"),
        ({"rollback": "yes please"}, "valid boolean"),
        ({"budgett": 3}, "Extra inputs"),
    ],
)
def test_a_bad_rollout_block_is_refused_saying_why(rollout: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        _manifest(rollout)


def test_a_health_check_is_checked_as_the_action_is() -> None:
    with pytest.raises(ValidationError, match="program must not be empty"):
        _manifest(command=["true"], health={"command": [""]})
    with pytest.raises(ValidationError, match="less than or equal to 3600"):
        _manifest(command=["true"], health={"command": ["true"], "timeout_seconds": 4000})
    found = _manifest(command=["true"], health={"command": ["curl", "-f", "localhost"], "timeout_seconds": 5})
    assert found.on_change is not None and found.on_change.health is not None
    assert found.on_change.health.command == ("curl", "-f", "localhost")


@pytest.mark.parametrize(
    ("given", "slots"),
    [(5, {1: 5, 100: 5}), ("3", {1: 3}), ("10%", {1: 1, 9: 1, 10: 1, 50: 5, 59: 5}), ("100%", {7: 7})],
)
def test_a_budget_gives_its_slots(given: int | str, slots: dict[int, int]) -> None:
    budget = Budget.of(given)
    assert {nodes: budget.slots(nodes) for nodes in slots} == slots


def test_the_default_budget_applies_to_modules_without_one_unless_they_pace_themselves() -> None:
    plan = RolloutPlan(budget=Budget.of(4))
    assert plan.budget_of(_manifest()) == Budget(count=4)
    assert plan.budget_of(_manifest({"budget": "20%"})) == Budget(percent=20)
    assert plan.budget_of(_manifest({"splay_seconds": 5})) is None
    assert RolloutPlan().budget_of(_manifest()) is None


def test_the_client_settings_take_a_budget_a_claim_ttl_a_wait_limit_and_a_fallback() -> None:
    settings = ClientSettings.model_validate(
        {"rollout_budget": 5, "rollout_claim_ttl": "PT1M", "rollout_wait_limit": 10, "rollout_unreachable": "hold"}
    )
    assert settings.rollout_budget == "5"
    assert settings.rollout_claim_ttl == timedelta(minutes=1)
    assert settings.rollout_unreachable == "hold"
    assert ClientSettings.model_validate({"rollout_budget": "10%"}).rollout_budget == "10%"
    assert ClientSettings().rollout_budget is None
    with pytest.raises(ValidationError, match="neither an integer"):
        ClientSettings.model_validate({"rollout_budget": "lots"})
    with pytest.raises(ValidationError):
        ClientSettings.model_validate({"rollout_unreachable": "sometimes"})


def _claim_item(node: str, revision: int, *, queued: int = 0, age: float = 0, ttl: float = 30, **extra: Any) -> KvItem:
    claim = fleet.Claim(state="waiting", change="c1", since=NOW, ttl_seconds=ttl, queued=queued, **extra)
    return KvItem(fleet.claim_key("web", node), to_json(claim), revision, stored_at=NOW - timedelta(seconds=age))


def test_claims_are_ordered_by_their_first_writes_revision_not_their_renewals() -> None:
    items = [
        _claim_item("a", 40, queued=10),  # renewed since: its place is its first write's
        _claim_item("b", 12),
        _claim_item("c", 11),
        _claim_item("d", 30, queued=13),
    ]
    assert [live.node for live in live_claims(items, NOW)] == ["a", "c", "b", "d"]


def test_a_dead_or_deleted_claim_holds_no_slot() -> None:
    items = [
        _claim_item("expired", 5, age=30 + 5 + 1),  # past its ttl and the clock skew allowed
        KvItem(fleet.claim_key("web", "deleted"), b"", 6, deleted=True),
        KvItem(fleet.claim_key("web", "garbage"), b"not a claim", 7),
        _claim_item("alive", 8, age=34),
        _claim_item("me", 9),
    ]
    claims = live_claims(items, NOW)
    assert [live.node for live in claims] == ["alive", "me"]
    assert verdict(claims, "me", Budget(count=1)).admitted is False
    assert verdict(claims, "me", Budget(count=2)).admitted is True


def test_failed_and_running_claims_use_their_slots_up() -> None:
    items = [
        KvItem(
            fleet.claim_key("web", "f"),
            to_json(fleet.Claim(state="failed", change="c1", since=NOW, ttl_seconds=30)),
            1,
            stored_at=NOW,
        ),
        _claim_item("r", 2),
        _claim_item("me", 3),
    ]
    found = verdict(live_claims(items, NOW), "me", Budget(count=2))
    assert not found.admitted
    assert found.holders == ("f", "r")
    assert "1 ahead" in found.describe()


def test_a_percent_budget_counts_the_nodes_holding_claims() -> None:
    items = [_claim_item(f"n{i}", i + 1) for i in range(20)]
    claims = live_claims(items, NOW)
    assert verdict(claims, "n1", Budget(percent=10)).admitted  # 2 slots of 20
    assert not verdict(claims, "n2", Budget(percent=10)).admitted


def test_a_quiet_period_moves_with_each_change_up_to_its_maximum() -> None:
    rollout = Rollout(wait_seconds=10, wait_max_seconds=25)
    first = paced(ModuleRollout(), rollout, "c1", NOW)
    assert due_at(first, rollout) == NOW + timedelta(seconds=10)
    second = paced(first, rollout, "c2", NOW + timedelta(seconds=8))
    assert due_at(second, rollout) == NOW + timedelta(seconds=18)
    third = paced(second, rollout, "c3", NOW + timedelta(seconds=20))
    assert due_at(third, rollout) == NOW + timedelta(seconds=25), "the burst's maximum"
    assert paced(third, rollout, "c3", NOW + timedelta(seconds=21)) == third, "the same change: timed as it was"


def test_a_change_after_the_last_one_was_due_begins_a_burst_of_its_own() -> None:
    """The burst of c1 ended when c1 was applied: c2, a minute later, waits its own quiet period,
    not the old burst's maximum, long past (which applied it at once)."""
    rollout = Rollout(wait_seconds=10, wait_max_seconds=25)
    first = paced(ModuleRollout(), rollout, "c1", NOW).model_copy(update={"pacing_applied": True})
    later = paced(first, rollout, "c2", NOW + timedelta(seconds=60))
    assert due_at(later, rollout) == NOW + timedelta(seconds=70)


async def test_the_gate_ends_a_burst_when_it_lets_its_change_through(fleet_bus: Bus, tmp_path: Path) -> None:
    manifest = _manifest({"wait_seconds": 0.2, "wait_max_seconds": 0.4})
    assert not (await _gate(fleet_bus, "a", tmp_path).admit("web", manifest, DIGEST_1, first=False)).go
    await anyio.sleep(0.3)  # the quiet period itself, injected short: the gate reads the clock
    assert (await _gate(fleet_bus, "a", tmp_path).admit("web", manifest, DIGEST_1, first=False)).go
    await anyio.sleep(0.5)  # past the first burst's maximum
    later = await _gate(fleet_bus, "a", tmp_path).admit("web", manifest, "hmac-sha256:" + "2" * 64, first=False)
    assert not later.go, "a new burst's first change applied with no quiet period"


def test_a_splay_is_drawn_once_per_change_within_its_bound() -> None:
    rollout = Rollout(splay_seconds=30)
    draws = {due_at(paced(ModuleRollout(), rollout, "c", NOW), rollout) for _ in range(50)}
    assert all(NOW <= due <= NOW + timedelta(seconds=30) for due in draws)
    assert len(draws) > 1


# --- the gate on a real fleet bucket -------------------------------------------------------------


@pytest.fixture
async def fleet_bus(bus: Bus) -> Bus:
    await create_bucket(bus, fleet.FLEET, BucketConfig(), live=True)
    return bus


def _gate(bus: Bus, node: str, folder: Path, **plan: Any) -> RolloutGate:
    rollout = RolloutPlan(**{"claim_ttl": timedelta(seconds=30), **plan})
    return RolloutGate(Claims(bus, node, rollout.claim_ttl), folder / node, rollout)


DIGEST_1 = "hmac-sha256:" + "1" * 64


async def test_nodes_are_admitted_in_the_order_they_claimed_and_a_renewal_keeps_its_place(
    fleet_bus: Bus, tmp_path: Path
) -> None:
    manifest = _manifest({"budget": 1})
    first = await _gate(fleet_bus, "a", tmp_path).admit("web", manifest, DIGEST_1, first=False)
    second = await _gate(fleet_bus, "b", tmp_path).admit("web", manifest, DIGEST_1, first=False)
    assert first.go and first.claimed
    assert not second.go
    assert second.reasons[0].startswith("rollout: waiting for a slot")
    # a renews (a write of a later revision than b's): still first
    gate_a = _gate(fleet_bus, "a", tmp_path)
    record = gate_a.state.get("web")
    assert record is not None
    await gate_a.claims.write("web", state="waiting", change=record.change, queued=record.queued, last=None)
    again = await _gate(fleet_bus, "b", tmp_path).admit("web", manifest, DIGEST_1, first=False)
    assert not again.go, "b stays behind a's first write"
    # a's change done: its slot freed, b is admitted
    await gate_a.claims.remove("web")
    admitted = await _gate(fleet_bus, "b", tmp_path).admit("web", manifest, DIGEST_1, first=False)
    assert admitted.go and admitted.claimed


async def test_a_first_env_file_and_a_module_without_budget_need_no_slot(fleet_bus: Bus, tmp_path: Path) -> None:
    gate = _gate(fleet_bus, "a", tmp_path)
    assert (await gate.admit("web", _manifest({"budget": 1}), DIGEST_1, first=True)).go
    assert (await gate.admit("web", _manifest(), DIGEST_1, first=False)).go
    assert await get_direct(fleet_bus, fleet.FLEET, fleet.claim_key("web", "a")) is None, "no claim written"


async def test_a_hold_a_node_cannot_read_holds_it_as_every_view_shows_it(fleet_bus: Bus, tmp_path: Path) -> None:
    """A hold no party of the contract would write (a newer version's field, damaged bytes): the
    seat, `rollout status` and `top` show it paused; the node read it as no hold and changed."""
    newer = {"state": "paused", "since": NOW.isoformat(), "by": "ops", "ticket": "OPS-7"}
    for value in (json.dumps(newer).encode(), b"\x00 not a hold"):
        await put(fleet_bus, fleet.FLEET, fleet.hold_key("web"), value)
        found = await _gate(fleet_bus, "a", tmp_path).admit("web", _manifest({"budget": 5}), DIGEST_1, first=False)
        assert not found.go
        assert found.reasons == ("rollout: paused by ?: unreadable hold",)


async def test_a_hold_leaves_the_change_pending_saying_by_whom(fleet_bus: Bus, tmp_path: Path) -> None:
    hold = fleet.Hold(state="paused", since=NOW, by="ops", reason="looking into it", node="n7")
    await put(fleet_bus, fleet.FLEET, fleet.hold_key("web"), to_json(hold))
    found = await _gate(fleet_bus, "a", tmp_path).admit("web", _manifest({"budget": 5}), DIGEST_1, first=False)
    assert not found.go
    assert found.reasons == ("rollout: paused by ops after the change of node n7 failed: looking into it",)
    aborted = hold.model_copy(update={"state": "aborted"})
    await put(fleet_bus, fleet.FLEET, fleet.hold_key("web"), to_json(aborted))
    found = await _gate(fleet_bus, "a", tmp_path).admit("web", _manifest({"budget": 5}), DIGEST_1, first=False)
    assert found.reasons[0].startswith("rollout: aborted by ops")


async def test_a_hold_under_a_key_of_no_shape_is_skipped_and_the_others_still_read(
    fleet_bus: Bus, tmp_path: Path
) -> None:
    """An operator's grant (`rollout.*`) takes a non-canonical escape in its token (the seat erases
    it, tests/isolation/test_fleet_isolation.py; until then): such a key is no module's hold, and
    reading it must not end the node's reconcile."""
    hold = fleet.Hold(state="paused", since=NOW, by="ops", reason="looking into it")
    await put(fleet_bus, fleet.FLEET, "rollout.w=65b", to_json(hold))  # `web` escaped as no one escapes it
    await put(fleet_bus, fleet.FLEET, fleet.hold_key("web"), to_json(hold))
    found = await _gate(fleet_bus, "a", tmp_path).admit("web", _manifest({"budget": 5}), DIGEST_1, first=False)
    assert found.reasons == ("rollout: paused by ops: looking into it",)


async def test_a_failed_change_keeps_its_claim_until_the_rollout_is_resumed(fleet_bus: Bus, tmp_path: Path) -> None:
    manifest = _manifest({"budget": 1}, command=["false"])
    gate = _gate(fleet_bus, "a", tmp_path)
    assert (await gate.admit("web", manifest, DIGEST_1, first=False)).claimed

    async def unhealthy() -> str:
        return "the health check said no"

    _, problem = await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=None, health=unhealthy)
    assert problem == "the health check said no"
    stored = await get_direct(fleet_bus, fleet.FLEET, fleet.claim_key("web", "a"))
    assert stored is not None and (claim := fleet.read_claim(stored.value)) is not None
    assert claim.state == "failed"
    assert not (await _gate(fleet_bus, "b", tmp_path).admit("web", manifest, DIGEST_1, first=False)).go
    # the seat holds the rollout; the node sees it; then the operator resumes (the hold deleted)
    hold = fleet.Hold(state="paused", since=NOW, by="seat", node="a")
    revision = await put(fleet_bus, fleet.FLEET, fleet.hold_key("web"), to_json(hold))
    await _gate(fleet_bus, "a", tmp_path).prepare(_loaded(tmp_path, manifest))
    stored = await get_direct(fleet_bus, fleet.FLEET, fleet.claim_key("web", "a"))
    assert stored is not None and not stored.deleted, "kept while the rollout is held"
    await delete(fleet_bus, fleet.FLEET, fleet.hold_key("web"), last=revision)
    await _gate(fleet_bus, "a", tmp_path).prepare(_loaded(tmp_path, manifest))
    stored = await get_direct(fleet_bus, fleet.FLEET, fleet.claim_key("web", "a"))
    assert stored is not None and stored.deleted, "resumed: the failed claim deleted, its slot free"
    assert (await _gate(fleet_bus, "b", tmp_path).admit("web", manifest, DIGEST_1, first=False)).go


def _loaded(folder: Path, manifest: Manifest) -> dict[str, LoadedManifest]:
    return {"web": LoadedManifest(folder / "web.json", manifest)}


@pytest.mark.parametrize("fallback", ["proceed", "hold"])
async def test_an_unreachable_coordination_is_waited_for_then_the_fallback_decides(
    bus: Bus, tmp_path: Path, fallback: Unreachable
) -> None:
    """No fleet bucket on this server: every read of it fails."""
    manifest = _manifest({"budget": 1})
    waiting = await _gate(bus, "a", tmp_path, wait_limit=timedelta(hours=1), unreachable=fallback).admit(
        "web", manifest, DIGEST_1, first=False
    )
    assert not waiting.go
    assert waiting.reasons[0].startswith("rollout: coordination unreachable")
    assert "waiting" in waiting.reasons[0]
    after = await _gate(bus, "a", tmp_path, wait_limit=timedelta(0), unreachable=fallback).admit(
        "web", manifest, DIGEST_1, first=False
    )
    assert after.go is (fallback == "proceed")
    assert after.reasons[0].startswith("rollout: coordination unreachable")
    assert not after.claimed


def test_the_watch_wakes_for_holds_freed_or_failed_slots_and_gone_marks_only() -> None:
    interest = FleetInterest("me")
    interest.modules, interest.waiting = {"web", "db"}, {"web"}
    prefix = fleet.FLEET.live_subject("")

    def wakes(key: str, value: bytes = b"", *, removed: bool = False) -> bool:
        headers = {"KV-Operation": "DEL"} if removed else {}
        return interest.wakes(Message(prefix + key, value, headers, "")) is not None

    waiting = to_json(fleet.Claim(state="waiting", change="c", since=NOW, ttl_seconds=30))
    failed = to_json(fleet.Claim(state="failed", change="c", since=NOW, ttl_seconds=30))
    assert wakes(fleet.hold_key("db")), "a hold of a module it declares"
    assert not wakes(fleet.hold_key("other")), "another module's hold"
    assert wakes(fleet.claim_key("web", "n2"), removed=True), "a slot freed"
    assert wakes(fleet.claim_key("web", "n2"), failed), "a slot failed"
    assert not wakes(fleet.claim_key("web", "n2"), waiting), "another node's renewal"
    assert not wakes(fleet.claim_key("db", "n2"), removed=True), "a module it does not wait on"
    assert not wakes(fleet.claim_key("web", "me"), removed=True), "its own claim"
    assert wakes(fleet.gone_key("n9")), "a node forgotten"
    assert wakes(fleet.gone_key("n9"), removed=True), "a node back"
    assert not wakes("nonsense.key.of.no.shape")


async def test_after_the_fallback_the_next_outage_is_waited_for_again(bus: Bus, tmp_path: Path) -> None:
    manifest = _manifest({"budget": 1})
    waited = await _gate(bus, "a", tmp_path, wait_limit=timedelta(0)).admit("web", manifest, DIGEST_1, first=False)
    assert waited.go, "proceeded without a slot"
    await anyio.sleep(0.5)  # time since the first outage is what the limit is measured against
    limit = timedelta(seconds=0.3)  # shorter than since the first outage began, longer than since it ended
    again = await _gate(bus, "a", tmp_path, wait_limit=limit).admit("web", manifest, DIGEST_1, first=False)
    assert not again.go and "waiting" in again.reasons[0], "the wait starts afresh, not from the first outage"


async def test_a_node_whose_claim_died_queues_again_behind_those_admitted_meanwhile(
    fleet_bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Budget 1: c runs, b waits second, a third. b's client stops past its claim's ttl (its claim
    dead); c finishes and a is admitted. b comes back: it queues behind a, not at its old place ahead
    of it, which ran it beside a."""
    monkeypatch.setattr(admission, "SKEW", timedelta(0))
    manifest = _manifest({"budget": 1})
    assert (await _gate(fleet_bus, "c", tmp_path).admit("web", manifest, DIGEST_1, first=False)).go
    short = {"claim_ttl": timedelta(seconds=0.5)}
    assert not (await _gate(fleet_bus, "b", tmp_path, **short).admit("web", manifest, DIGEST_1, first=False)).go
    assert not (await _gate(fleet_bus, "a", tmp_path).admit("web", manifest, DIGEST_1, first=False)).go
    await anyio.sleep(0.8)  # b's claim dead: its 0.5 s ttl run out is what is under test
    await _gate(fleet_bus, "c", tmp_path).claims.remove("web")
    assert (await _gate(fleet_bus, "a", tmp_path).admit("web", manifest, DIGEST_1, first=False)).go
    back = await _gate(fleet_bus, "b", tmp_path, **short).admit("web", manifest, DIGEST_1, first=False)
    assert not back.go, "two nodes run under a budget of 1"
    assert "the 1 slots held by a" in back.reasons[0]


async def test_a_failure_under_a_claim_leaves_as_itself(fleet_bus: Bus, tmp_path: Path) -> None:
    """The record cannot be written after the action (a folder in its place, as a full disk would
    fail it): the `MaterializeError` leaves as itself, which the watch loop catches and retries,
    not wrapped in the renewal's task group's exception group, which ended the client."""
    manifest = _manifest({"budget": 1})
    gate = _gate(fleet_bus, "a", tmp_path)
    assert (await gate.admit("web", manifest, DIGEST_1, first=False)).claimed
    record = tmp_path / "a" / RECORD

    async def action() -> ActionRecord:
        record.unlink()
        record.mkdir()
        return ActionRecord(command=("true",), digest=DIGEST_1, outcome="succeeded", exit_code=0, finished_at="x")

    async def healthy() -> None:
        return None

    with pytest.raises(MaterializeError):
        await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=action, health=healthy)


async def test_a_renewal_during_the_health_check_keeps_the_actions_outcome(fleet_bus: Bus, tmp_path: Path) -> None:
    """The claim renewed while the health command runs: the record on disk still says how the action
    ended (a client killed then reports it, not "(interrupted)")."""
    manifest = _manifest({"budget": 1})
    gate = _gate(fleet_bus, "a", tmp_path, claim_ttl=timedelta(seconds=0.3))  # renewed every 0.1 s
    assert (await gate.admit("web", manifest, DIGEST_1, first=False)).claimed
    done = ActionRecord(command=("true",), digest=DIGEST_1, outcome="succeeded", exit_code=0, finished_at="x")
    seen: list[ModuleRollout] = []

    async def action() -> ActionRecord:
        return done

    async def health() -> None:
        await anyio.sleep(0.4)  # a health check longer than the 0.1 s renewal: a renewal falls inside it
        on_disk = RolloutGate(gate.claims, tmp_path / "a", gate.plan).state.get("web")
        assert on_disk is not None
        seen.append(on_disk)

    admitted = gate.state.get("web")
    assert admitted is not None and admitted.renewed_at is not None
    await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=action, health=health)
    assert seen[0].renewed_at is not None and seen[0].renewed_at > admitted.renewed_at, "no renewal during the check"
    assert seen[0].action == done


async def test_an_outage_whose_change_went_away_is_not_counted_into_the_next(bus: Bus, tmp_path: Path) -> None:
    """No fleet bucket: c1 waits for the coordination, then goes away (reverted: the module is not
    asked). A later outage's change waits afresh, not from when c1's began."""
    manifest = _manifest({"budget": 1})
    waiting = _gate(bus, "a", tmp_path, wait_limit=timedelta(hours=1))
    assert not (await waiting.admit("web", manifest, DIGEST_1, first=False)).go
    await waiting.finish()
    await _gate(bus, "a", tmp_path).finish()  # c1 reverted
    await anyio.sleep(0.5)  # longer than the next limit since c1's outage began: what is under test
    later = _gate(bus, "a", tmp_path, wait_limit=timedelta(seconds=0.3))
    again = await later.admit("web", manifest, "hmac-sha256:" + "2" * 64, first=False)
    assert not again.go and "waiting" in again.reasons[0], again.reasons


async def test_a_module_with_more_claim_keys_than_one_batch_read_still_queues(fleet_bus: Bus, tmp_path: Path) -> None:
    """1,025 nodes once changed `web` under its budget: their claims are deleted, but each key keeps
    its delete marker, and one batch read answers at most 1,024 keys. Read so, every later admission
    was "coordination unreachable", then applied without a slot (the default fallback), fleet-wide."""
    gone = to_json(fleet.Claim(state="waiting", change="old", since=datetime.now(UTC), ttl_seconds=30))
    for number in range(1025):
        key = fleet.claim_key("web", f"n{number:04d}")
        await delete(fleet_bus, fleet.FLEET, key, last=await put(fleet_bus, fleet.FLEET, key, gone))
    manifest = _manifest({"budget": 1})
    first = await _gate(fleet_bus, "a", tmp_path, wait_limit=timedelta(0)).admit("web", manifest, DIGEST_1, first=False)
    assert first.go and first.claimed, first.reasons
    second = await _gate(fleet_bus, "b", tmp_path, wait_limit=timedelta(0)).admit(
        "web", manifest, DIGEST_1, first=False
    )
    assert not second.go and second.reasons[0].startswith("rollout: waiting for a slot"), second.reasons


async def test_a_node_reads_a_modules_claims_past_one_batch_under_its_own_grants(mesh: Mesh) -> None:
    """The paged read is a batch direct get too, which the generated grants let a node ask of the
    fleet bucket (static and JWT)."""
    value = to_json(fleet.Claim(state="waiting", change="c", since=datetime.now(UTC), ttl_seconds=30))
    async with mesh.connect(party(Kind.SEAT)) as seat, mesh.connect(party(Kind.NODE, "n1")) as n1:
        await put_many(seat, fleet.FLEET, {fleet.claim_key("web", f"n{number:04d}"): value for number in range(1100)})
        items = await Claims(n1, "n1", timedelta(seconds=30)).of_module("web")
    assert len({item.key for item in items}) == 1100


# --- the slot's invariants, one test each: held while the action and its health check run, and
# left on every exit path (freed on success, kept failed on a failure, the gate's renewals ended) --


async def _claim_state(bus: Bus, node: str) -> str | None:
    """`node`'s claim of `web` as stored: its state, "deleted", or None if never written."""
    item = await get_direct(bus, fleet.FLEET, fleet.claim_key("web", node))
    if item is None:
        return None
    if item.deleted:
        return "deleted"
    claim = fleet.read_claim(item.value)
    return claim.state if claim is not None else "unreadable"


async def _admitted_gate(bus: Bus, folder: Path) -> RolloutGate:
    gate = _gate(bus, "a", folder)
    assert (await gate.admit("web", _manifest({"budget": 1}), DIGEST_1, first=False)).claimed
    return gate


async def _slot_seen_by_b(bus: Bus, folder: Path) -> bool:
    """Whether node b, asking now under the same budget of 1, is admitted (its claim withdrawn after)."""
    other = _gate(bus, "b", folder)
    admitted = (await other.admit("web", _manifest({"budget": 1}), DIGEST_1, first=False)).go
    await other.claims.remove("web")
    other.state.forget("web")
    return admitted


def _outcome(ok: bool) -> ActionRecord:
    return ActionRecord(
        command=("x",),
        digest=DIGEST_1,
        outcome="succeeded" if ok else "failed",
        exit_code=0 if ok else 1,
        finished_at="x",
    )


async def _healthy() -> None:
    return None


async def test_the_slot_is_held_while_the_action_runs(fleet_bus: Bus, tmp_path: Path) -> None:
    gate = await _admitted_gate(fleet_bus, tmp_path)
    during: list[tuple[str | None, bool]] = []

    async def action() -> ActionRecord:
        during.append((await _claim_state(fleet_bus, "a"), await _slot_seen_by_b(fleet_bus, tmp_path)))
        return _outcome(ok=True)

    await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=action, health=_healthy)
    assert during == [("running", False)], "the claim stands running, b kept out, while the action runs"


async def test_the_slot_is_held_while_the_health_check_runs(fleet_bus: Bus, tmp_path: Path) -> None:
    gate = await _admitted_gate(fleet_bus, tmp_path)
    during: list[tuple[str | None, bool]] = []

    async def health() -> None:
        during.append((await _claim_state(fleet_bus, "a"), await _slot_seen_by_b(fleet_bus, tmp_path)))

    async def action() -> ActionRecord:
        return _outcome(ok=True)

    await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=action, health=health)
    assert during == [("running", False)], "the claim stands running, b kept out, while the health check runs"


async def test_the_slot_is_freed_once_the_action_and_its_health_check_succeeded(fleet_bus: Bus, tmp_path: Path) -> None:
    gate = await _admitted_gate(fleet_bus, tmp_path)

    async def action() -> ActionRecord:
        return _outcome(ok=True)

    await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=action, health=_healthy)
    assert await _claim_state(fleet_bus, "a") == "deleted"
    assert await _slot_seen_by_b(fleet_bus, tmp_path)


async def test_a_failed_action_keeps_its_slot_failed_and_skips_the_health_check(fleet_bus: Bus, tmp_path: Path) -> None:
    gate = await _admitted_gate(fleet_bus, tmp_path)
    checked: list[bool] = []

    async def action() -> ActionRecord:
        return _outcome(ok=False)

    async def health() -> None:
        checked.append(True)

    done, problem = await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=action, health=health)
    assert done is not None and not done.ok and problem is None and not checked
    assert await _claim_state(fleet_bus, "a") == "failed"
    assert not await _slot_seen_by_b(fleet_bus, tmp_path), "a failure uses its slot up until a resume"


async def test_a_failed_health_check_keeps_its_slot_failed(fleet_bus: Bus, tmp_path: Path) -> None:
    gate = await _admitted_gate(fleet_bus, tmp_path)

    async def action() -> ActionRecord:
        return _outcome(ok=True)

    async def unhealthy() -> str:
        return "the health check said no"

    _, problem = await gate.run_under_claim("web", DIGEST_1, replaced=b"old", action=action, health=unhealthy)
    assert problem == "the health check said no"
    assert await _claim_state(fleet_bus, "a") == "failed"
    assert not await _slot_seen_by_b(fleet_bus, tmp_path)


async def test_a_change_cancelled_mid_action_keeps_its_slot_until_the_next_start_fails_it(
    fleet_bus: Bus, tmp_path: Path
) -> None:
    """The client stopped while the action ran: the claim is not freed (the action may have done
    half its work), and the next start writes it failed, "interrupted": it stays in its slot."""
    gate = await _admitted_gate(fleet_bus, tmp_path)
    started = anyio.Event()

    async def action() -> ActionRecord:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("never ends")

    async with anyio.create_task_group() as tasks:
        run = partial(gate.run_under_claim, "web", DIGEST_1, replaced=b"old", action=action, health=_healthy)
        tasks.start_soon(run)
        await started.wait()
        tasks.cancel_scope.cancel()
    assert await _claim_state(fleet_bus, "a") == "running", "a cancelled change keeps its slot"
    assert not await _slot_seen_by_b(fleet_bus, tmp_path)
    await _gate(fleet_bus, "a", tmp_path).prepare(_loaded(tmp_path, _manifest({"budget": 1})))
    stored = await get_direct(fleet_bus, fleet.FLEET, fleet.claim_key("web", "a"))
    assert stored is not None and (claim := fleet.read_claim(stored.value)) is not None
    assert (claim.state, claim.reason) == ("failed", "interrupted")
    assert not await _slot_seen_by_b(fleet_bus, tmp_path)
