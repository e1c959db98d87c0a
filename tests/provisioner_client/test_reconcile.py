"""A reconcile end to end against a real nats-server, the registry and the stand-ins."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from nats.js import JetStreamContext

from mesh_dev.standins import CONFIG, StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.contract import buckets
from registry.wire import Bus, snapshot
from tests.helpers import NODE, sh_env


async def test_every_kind_resolves_into_an_env_file_of_mode_0600(domains: StandIns, bus: Bus, plan: ClientPlan) -> None:
    report = await reconcile(bus, plan)
    assert report.ok, report
    app = plan.materialize / "app.env"
    assert stat.S_IMODE(app.stat().st_mode) == 0o600
    assert sh_env(app) == {
        "DATABASE_URL": "postgres://app:dev-only-s3cret-password@127.0.0.1:5432/app",
        "LOG_LEVEL": "info",
        "GREETING": 'Hello, "world" $HOME #1\nsecond line: café',
        "STATE_DIR": "/var/lib/app",
        "HTTP_PORT": "8080",
        "DB_ACCESS": "read-write",
        "SEAT": "web-1",
        "MACHINE": NODE,
        "PLUGINS": "metrics\npg-stats",
        "ZSH_SNIPPETS": "alias app-logs='journalctl -u app'\nexport EDITOR=vi\nsetopt autocd",
        "EXTRA_ENV": "PGAPPNAME=app",
        "MOTD": "postgres serves db on this node",
        "PRICE": "costs $5",
    }
    assert sh_env(plan.materialize / "postgres.env") == {
        "PG_CONSUMERS": '{"consumers": [{"name": "app", "database": "app", "password": "dev-only-s3cret-password"}]}',
        "PG_DATA": "/var/lib/postgresql",
        "PG_PORT": "5432",
    }
    applied = {i.key: json.loads(i.value) for i in await snapshot(bus, buckets.APPLIED)}
    assert {k: v["state"] for k, v in applied.items()} == {
        "node-1.app": "applied",
        "node-1.postgres": "applied",
        "node-1.tools": "applied",
    }
    assert applied["node-1.app"]["action"]["outcome"] == "succeeded"
    needs = {i.key for i in await snapshot(bus, buckets.NEEDS)}
    assert "node-1.app.secret.db-password" in needs
    assert "node-1.app.bound.postgres=3Adb=3Ahost" in needs
    assert "node-1.app.shell.zsh=3Anormal" in needs
    collect = {i.key for i in await snapshot(bus, buckets.COLLECT)}
    assert collect == {
        "node-1.app-plugins.app",
        "node-1.app-plugins.postgres",
        "node-1.shell=3Azsh=3Anormal.app",
        "node-1.shell=3Azsh=3Anormal.tools",
        "node-1.environment=3Aapp.postgres",
        "node-1.contribution=3Amotd.postgres",
    }


async def stream_sequences(js: JetStreamContext) -> dict[str, int]:
    return {info.config.name: info.state.last_seq for info in await js.streams_info() if info.config.name}


def file_stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


async def test_a_second_reconcile_with_nothing_changed_writes_nothing(
    domains: StandIns, bus: Bus, js: JetStreamContext, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    sequences, stamps = await stream_sequences(js), file_stamps(plan.materialize)
    again = await reconcile(bus, plan)
    assert again.ok
    assert not any(again.writes.values())
    assert not any(m.written for m in again.modules.values())
    assert again.actions_run == []
    assert await stream_sequences(js) == sequences
    assert file_stamps(plan.materialize) == stamps


async def test_an_edited_env_file_and_a_changed_mode_are_put_back(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    app, postgres = plan.materialize / "app.env", plan.materialize / "postgres.env"
    original_app, original_postgres = app.read_bytes(), postgres.read_bytes()
    app.write_text("LOG_LEVEL=debug\n")
    postgres.chmod(0o644)
    report = await reconcile(bus, plan)
    assert (report.modules["app"].written, report.modules["postgres"].written) == (True, True)
    assert app.read_bytes() == original_app
    assert postgres.read_bytes() == original_postgres
    assert stat.S_IMODE(postgres.stat().st_mode) == 0o600
    assert report.actions_run == [], "putting back the same content is no change"


async def test_removing_a_module_removes_its_keys_and_file_and_nothing_else(
    domains: StandIns, bus: Bus, js: JetStreamContext, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    foreign = plan.materialize / "handmade.env"
    foreign.write_text("MINE=1\n")
    other_node = await js.key_value(buckets.NEEDS.name)
    await other_node.put("node-2.tools.config.x", b"{}")
    before = {b.name: {i.key for i in await snapshot(bus, b)} for b in buckets.OWN}
    (plan.manifests / "postgres.json").unlink()
    report = await reconcile(bus, plan)
    after = {b.name: {i.key for i in await snapshot(bus, b)} for b in buckets.OWN}
    gone = {name: before[name] - after[name] for name in before}
    assert gone[buckets.NEEDS.name] == {
        "node-1.postgres.consumers.db",
        "node-1.postgres.dir.data",
        "node-1.postgres.port.postgres",
    }
    assert gone[buckets.APPLIED.name] == {"node-1.postgres"}
    assert gone[buckets.COLLECT.name] == {
        "node-1.app-plugins.postgres",
        "node-1.environment=3Aapp.postgres",
        "node-1.contribution=3Amotd.postgres",
    }
    assert gone[buckets.REGISTRY.name] == set()
    assert all(after[name] <= before[name] for name in before)
    assert report.removed == [plan.materialize / "postgres.env"]
    assert sorted(p.name for p in plan.materialize.glob("*.env")) == ["app.env", "handmade.env", "tools.env"]
    assert foreign.read_text() == "MINE=1\n"
    assert "node-2.tools.config.x" in after[buckets.NEEDS.name]


async def test_a_domain_bucket_without_direct_get_leaves_the_module_pending_saying_so(
    provisioned: Bus, js: JetStreamContext, tmp_path: Path
) -> None:
    """A node reads values by direct get only (it may not ask the stream itself)."""
    await js.delete_key_value(CONFIG.name)  # the seat makes it as its own, with direct get
    config = await js.create_key_value(bucket=CONFIG.name)  # no direct get
    await config.put("log-level", b'"debug"')
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "web.json").write_text(json.dumps({"module": "web", "env": {"LEVEL": "${config:log-level}"}}))
    plan = ClientPlan(node=NODE, manifests=manifests, materialize=tmp_path / "env")
    report = await reconcile(provisioned, plan)
    (reason,) = report.modules["web"].applied.reasons
    assert reason.startswith(
        "${config:log-level}: nobody answers $JS.API.DIRECT.GET.KV_mesh-config_values.$KV.mesh-config_values."
        "log-level: account $G neither imports it nor serves it (nats-server's trace of the request)"
    )
    assert reason.endswith(
        "or bucket mesh-config_values does not exist here, has no direct get, or its stream has no leader yet"
    )


async def test_a_module_declared_again_is_written_over_its_delete_markers(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    """The verb lists no deleted key, so the client learns of a delete marker when its create loses."""
    await reconcile(bus, plan)
    manifest = plan.manifests / "postgres.json"
    text = manifest.read_text()
    manifest.unlink()
    await reconcile(bus, plan)
    manifest.write_text(text)
    report = await reconcile(bus, plan)
    assert report.ok, report.summary()
    assert "node-1.postgres.dir.data" in report.writes[buckets.NEEDS.name].written
    needs = {i.key for i in await snapshot(bus, buckets.NEEDS)}
    assert {"node-1.postgres.dir.data", "node-1.postgres.port.postgres"} <= needs
    again = await reconcile(bus, plan)
    assert not any(again.writes.values()), "a second reconcile writes nothing"


async def test_malformed_keys_under_the_node_are_its_footprint_and_removed(
    domains: StandIns, bus: Bus, js: JetStreamContext, plan: ClientPlan
) -> None:
    needs = await js.key_value(buckets.NEEDS.name)
    await needs.put("node-1.junk", b"{}")  # out of shape: two tokens
    await needs.put("node-1.old.config.x", b"not json")
    await needs.put("node-2.junk", b"{}")
    report = await reconcile(bus, plan)
    assert report.ok, report.summary()
    assert {"node-1.junk", "node-1.old.config.x"} <= set(report.writes[buckets.NEEDS.name].deleted)
    left = {i.key for i in await snapshot(bus, buckets.NEEDS)}
    assert "node-2.junk" in left
    assert not {"node-1.junk", "node-1.old.config.x"} & left
