"""The node client: hostile or corrupted input is a reason or an error, never a crash, a
leak or a file touched outside the materialize folder."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from mesh_dev.standins import StandIns
from provisioner_client.errors import MaterializeError
from provisioner_client.materializing.action import MAX_REASONS, inherited
from provisioner_client.materializing.envfile import LEDGER, read_ledger
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.resolving.manifest import MAX_MANIFEST_BYTES, load_manifests
from provisioner_client.resolving.memory import FILE, Memory
from provisioner_client.resolving.scope import NodeScope
from provisioner_client.state.records import KEY
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import MAX_DEPTH, JsonRefused, buckets, read_json
from registry.wire import Bus, get_direct, put
from tests.helpers import NODE

DEEP = b"[" * 30_000 + b"]" * 30_000  # 60 KB: under the buckets' 64 KiB value limit


async def applied_reasons(bus: Bus, module: str) -> tuple[str, ...]:
    item = await get_direct(bus, buckets.APPLIED, buckets.APPLIED.shape.build(node=NODE, module=module))
    assert item is not None and not item.deleted
    return tuple(json.loads(item.value)["reasons"])


@pytest.mark.parametrize(
    ("where", "key"),
    [
        pytest.param("bound", f"{NODE}.app.db.host", id="a provider's bound value"),
        pytest.param("config", "log-level", id="a config value"),
        pytest.param("assignments", f"{NODE}.app", id="the placement plan"),
    ],
)
async def test_a_deep_value_leaves_its_module_pending_naming_the_key_and_the_others_apply(
    domains: StandIns, bus: Bus, plan: ClientPlan, where: str, key: str
) -> None:
    bucket = {"bound": domains.bound, "config": domains.config, "assignments": domains.assignments}[where]
    await put(bus, bucket, key, DEEP)
    report = await reconcile(bus, plan)
    app = report.modules["app"].applied
    assert app.state == "pending"
    assert any(f"{bucket.name} key {key!r}" in r and "levels deep, more than the" in r for r in app.reasons), (
        app.reasons
    )
    others = {m: r.applied.state for m, r in report.modules.items() if m != "app"}
    assert set(others.values()) == {"applied"} and others


async def test_watch_mode_keeps_running_through_a_deep_value(domains: StandIns, bus: Bus, plan: ClientPlan) -> None:
    reports: list[dict[str, str]] = []
    changed = anyio.Event()

    def on_report(report: Report) -> None:
        reports.append({m: r.applied.state for m, r in report.modules.items()})
        changed.set()

    timing = WatchTiming(debounce=timedelta(0))
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, timing, on_report=on_report, task_status=task_status))
        key = f"{NODE}.app.db.host"
        await put(bus, domains.bound, key, DEEP)
        with anyio.fail_after(10):
            while not reports or reports[-1]["app"] != "pending":
                changed = anyio.Event()
                await changed.wait()
            await put(bus, domains.bound, key, b'"127.0.0.1"')
            while reports[-1]["app"] != "applied":
                changed = anyio.Event()
                await changed.wait()
        tg.cancel_scope.cancel()


def test_the_reader_bounds_depth_and_size_and_never_quotes_the_text() -> None:
    assert read_json(b'{"a": "[[[[[[", "b": [[1]]}') == {"a": "[[[[[[", "b": [[1]]}
    assert read_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(JsonRefused, match="65 levels deep"):
        read_json(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    with pytest.raises(JsonRefused, match="more than the 10 allowed") as refused:
        read_json(b'"secret-value-here"', max_bytes=10)
    assert "secret" not in refused.value.reason
    with pytest.raises(JsonRefused, match="not usable"):
        read_json(b"1" * 5000)  # more digits than Python converts


async def test_the_ledger_takes_only_plain_module_env_names_inside_its_folder(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    victims = [tmp_path / "elsewhere" / "victim.txt", tmp_path / "absolute-victim.txt", plan.materialize / "x.env"]
    plan.materialize.mkdir()
    for victim in victims:
        victim.write_text("keep me\n")
    ledger = {"files": {"../elsewhere/victim.txt": "x", str(victims[1]): "y", "x.env": "not-x", "/": "z"}}
    (plan.materialize / LEDGER).write_text(json.dumps(ledger))
    report = await reconcile(bus, plan)
    assert all(v.read_text() == "keep me\n" for v in victims)
    assert len(report.ledger_problems) == 4
    assert "ledger files entry '../elsewhere/victim.txt' ignored" in report.summary()
    assert report.modules["app"].applied.state == "applied"


async def test_a_corrupted_manifest_holds_the_module_it_declared_not_its_file_name(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    web = plan.manifests / "web.json"
    (plan.manifests / "app.json").rename(web)
    first = await reconcile(bus, plan)
    assert first.modules["app"].applied.state == "applied"
    needs_before = await bus_keys(bus, buckets.NEEDS, "app")
    web.write_bytes(web.read_bytes()[:-2])  # a byte or two lost
    held = await reconcile(bus, plan)
    assert set(held.modules) == set(first.modules)
    assert held.modules["app"].applied.state == "pending"
    assert any("web.json" in r for r in held.modules["app"].applied.reasons)
    assert (plan.materialize / "app.env").exists()
    assert held.removed == []
    assert await bus_keys(bus, buckets.NEEDS, "app") == needs_before
    assert (plan.materialize / "app.env").read_bytes()


async def bus_keys(bus: Bus, bucket: buckets.Bucket, module: str) -> list[str]:
    return sorted(i.key for i in await NodeScope(NODE).read(bus, bucket) if f".{module}." in f"{i.key}.")


async def test_thousands_of_pending_placeholders_still_make_a_bounded_applied_record(
    provisioned: Bus, plan: ClientPlan
) -> None:
    names = [f"${{nokind:{'x' * 300}-{i}}}" for i in range(3000)]
    manifest = {"module": "big", "env": {f"V{i}": name for i, name in enumerate(names)}}
    (plan.manifests / "big.json").write_text(json.dumps(manifest))
    report = await reconcile(provisioned, plan)
    reasons = await applied_reasons(provisioned, "big")
    assert len(reasons) == MAX_REASONS + 1
    assert reasons[-1] == f"... and {3000 - MAX_REASONS} more"
    assert report.modules["big"].applied.state == "pending"


def test_manifests_too_large_or_not_regular_files_are_reported_one_line_each_and_never_opened(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "manifests"
    (folder / "sub").mkdir(parents=True)
    (folder / "good.json").write_text(json.dumps({"module": "good"}))
    (folder / "huge.json").write_bytes(b" " * (MAX_MANIFEST_BYTES + 1))
    os.mkfifo(folder / "fifo.json")  # opening it for reading would block
    (folder / "device.json").symlink_to("/dev/null")
    (folder / "folder.json").symlink_to(folder / "sub")
    (folder / "long.json").write_text(json.dumps({"module": "long", "env": {"A": "${config:" + "y" * 600 + "}"}}))
    found = load_manifests(folder)
    assert list(found.modules) == ["good"]
    said = {e.path.name: e.reason for e in found.errors}
    assert said["huge.json"].startswith(f"is {MAX_MANIFEST_BYTES + 1:,} bytes or more")
    assert said["fifo.json"] == "is a FIFO, not a regular file: not read"
    assert said["device.json"] == "is a character device, not a regular file: not read"
    assert said["folder.json"] == "is a folder, not a regular file: not read"
    assert "longer than a key may be" in said["long.json"]
    assert all("\n" not in reason for reason in said.values())


async def test_the_change_action_gets_a_minimal_environment(
    domains: StandIns, bus: Bus, plan: ClientPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NATS_PASSWORD", "hunter2")
    monkeypatch.setenv("NATS_NKEY", "/secret/seed.nk")
    seen = tmp_path / "seen"
    manifest = {
        "module": "svc",
        "env": {"LEVEL": "${config:log-level}"},
        "on_change": {"command": ["sh", "-c", f"env > {seen}"]},
    }
    (plan.manifests / "svc.json").write_text(json.dumps(manifest))
    await reconcile(bus, plan)
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines())
    assert set(env) - {"PWD", "SHLVL", "_"} == {"PATH", "LANG", "MESH_NODE", "MESH_MODULE", "MESH_ENV_FILE"}
    assert env["MESH_ENV_FILE"] == str(plan.materialize / "svc.env")
    assert (env["MESH_MODULE"], env["MESH_NODE"]) == ("svc", NODE)
    assert inherited({"PATH": "/opt/bin", "NATS_PASSWORD": "p", "HOME": "/root"}) == {
        "PATH": "/opt/bin",
        "LANG": "C.UTF-8",
    }


async def test_the_applied_digest_is_keyed_and_a_new_key_rewrites_no_env_file(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    first = await reconcile(bus, plan)
    app = plan.materialize / "app.env"
    digest = first.modules["app"].applied.digest
    key_file = plan.materialize / KEY
    assert (key_file.stat().st_mode & 0o777) == 0o600 and len(key_file.read_bytes()) == 32
    assert digest != "sha256:" + hashlib.sha256(app.read_bytes()).hexdigest()
    assert digest == "hmac-sha256:" + hmac.new(key_file.read_bytes(), app.read_bytes(), hashlib.sha256).hexdigest()
    stamp = app.stat().st_ino, app.stat().st_mtime_ns
    key_file.unlink()  # lost: a new one is made
    again = await reconcile(bus, plan)
    assert (app.stat().st_ino, app.stat().st_mtime_ns) == stamp
    assert not again.modules["app"].written
    assert again.modules["app"].applied.digest != digest
    assert again.actions_run == ["app"]  # the documented cost: each change action runs once


def test_the_ledger_and_the_remembered_state_are_read_no_further_than_their_bound(tmp_path: Path) -> None:
    """Files of our own are bounded too: a huge ledger is refused after reading its bound's worth,
    a FIFO or a link in its place is never opened for reading (it would block, or lead elsewhere)."""
    ledger = tmp_path / LEDGER
    with ledger.open("wb") as file:
        file.truncate(8 * 1024**3)  # sparse: 8 GiB that read_bytes would try to hold
    with pytest.raises(MaterializeError, match="more than the 1,048,576 bytes allowed"):
        read_ledger(ledger)
    ledger.unlink()
    os.mkfifo(ledger)
    with pytest.raises(MaterializeError, match="not a regular file"):
        read_ledger(ledger)
    ledger.unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"files": {}, "manifests": {}}')
    ledger.symlink_to(elsewhere)
    with pytest.raises(MaterializeError, match="is a symbolic link, not a regular file"):
        read_ledger(ledger)
    state = tmp_path / FILE
    os.mkfifo(state)
    assert Memory.load(tmp_path, NODE).buckets == {}  # ignored, not blocked on: the keys are listed
