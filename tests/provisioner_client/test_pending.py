"""What leaves a module pending, what a bad manifest does, and what the client refuses to write."""

from __future__ import annotations

import json
import logging

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from mesh_dev.standins import DEV_SECRETS, StandIns, stand_ins
from provisioner_client.errors import ForeignKeyError, ManifestError
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.resolving.scope import NodeScope
from registry.contract import AppliedValue, BucketAnswer, RegistryEntry, buckets, to_json
from registry.wire import Bus, get_latest, put, snapshot
from tests.helpers import NODE, last_sequence


async def applied_of(bus: Bus, module: str) -> AppliedValue:
    item = await get_latest(bus, buckets.APPLIED, buckets.APPLIED.shape.build(node=NODE, module=module))
    assert item is not None and not item.deleted, module
    return AppliedValue.model_validate_json(item.value)


def write_manifest(plan: ClientPlan, name: str, document: object) -> None:
    text = document if isinstance(document, str) else json.dumps(document)
    (plan.manifests / name).write_text(text)


async def test_the_secret_never_reaches_a_stream_or_a_log_line(
    domains: StandIns, bus: Bus, js: JetStreamContext, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    report = await reconcile(bus, plan)
    domains.vault.rotate("db-password", "rotated-s3cret-value")
    await reconcile(bus, plan)
    assert report.ok
    secrets = [s.encode() for s in [*DEV_SECRETS.values(), "rotated-s3cret-value"]]
    scanned = 0
    for info in await js.streams_info():
        for sequence in range(max(info.state.first_seq, 1), info.state.last_seq + 1):  # an empty stream: none
            message = await js.get_msg(info.config.name or "", seq=sequence)
            scanned += 1
            for secret in secrets:
                assert secret not in (message.data or b""), f"{info.config.name} message {sequence}"
                assert secret not in str(message.headers or {}).encode()
    assert scanned > 20
    logged = "\n".join(r.getMessage() + str(r.exc_info or "") for r in caplog.records)
    assert "wrote" in logged
    for secret in secrets:
        assert secret.decode() not in logged


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        pytest.param("{not json", "is not valid JSON", id="a file that is not JSON"),
        pytest.param(
            {"module": "bad", "env": {"X": "${nokind}"}},
            "env X: placeholder '${nokind}'",
            id="a placeholder without a kind",
        ),
        pytest.param({"module": "bad", "env": {"X": "${config:a"}}, "never closed", id="an unclosed placeholder"),
        pytest.param({"module": "bad", "envv": {}}, "envv: Extra inputs are not permitted", id="an unknown field"),
        pytest.param({"module": "bad", "env": {"1X": "v"}}, "env name '1X'", id="a bad variable name"),
    ],
)
async def test_a_malformed_manifest_is_named_and_the_other_modules_still_apply(
    domains: StandIns, bus: Bus, plan: ClientPlan, document: object, complaint: str
) -> None:
    write_manifest(plan, "bad.json", document)
    report = await reconcile(bus, plan)
    assert [str(e.path.name) for e in report.manifest_errors] == ["bad.json"]
    assert complaint in str(report.manifest_errors[0])
    assert {m: r.applied.state for m, r in report.modules.items()} == {
        "app": "applied",
        "postgres": "applied",
        "tools": "applied",
        "bad": "pending",
    }
    assert "bad.json" in (await applied_of(bus, "bad")).reasons[0]
    assert not report.ok


async def test_a_manifest_that_breaks_keeps_its_module_as_it_was(domains: StandIns, bus: Bus, plan: ClientPlan) -> None:
    await reconcile(bus, plan)
    before = (plan.materialize / "postgres.env").read_bytes()
    needs_before = {i.key for i in await snapshot(bus, buckets.NEEDS)}
    write_manifest(plan, "postgres.json", '{"module": "postgres", "env": {"PG_PORT": 5432}}')
    report = await reconcile(bus, plan)
    assert report.modules["postgres"].applied.state == "pending"
    assert "env.PG_PORT: Input should be a valid string" in report.modules["postgres"].applied.reasons[0]
    assert (plan.materialize / "postgres.env").read_bytes() == before
    assert {i.key for i in await snapshot(bus, buckets.NEEDS)} == needs_before


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        pytest.param({"X": "${nosuchkind:a}"}, "the registry knows no kind 'nosuchkind'", id="an unknown kind"),
        pytest.param({"X": "${config:absent}"}, "no value at mesh-config_values key 'absent'", id="a missing value"),
        pytest.param({"X": "${secret:unknown}"}, "mesh-vault.secret answered error 404", id="a vault error"),
        pytest.param(
            {"X": "${bound:mysql:db}"},
            "bucket mysql_bound does not exist here, has no direct get, or its stream has no leader yet",
            id="a missing bucket",
        ),
        pytest.param(
            {"X": "${port:none}"},
            "the plan at mesh-controller_assignments key 'node-1.app' has no port",
            id="a value missing from the plan",
        ),
    ],
)
async def test_an_unresolvable_placeholder_leaves_the_module_pending_and_its_file_intact(
    domains: StandIns, bus: Bus, plan: ClientPlan, env: dict[str, str], reason: str
) -> None:
    await reconcile(bus, plan)
    app = plan.materialize / "app.env"
    before = app.read_bytes()
    manifest = json.loads((plan.manifests / "app.json").read_text())
    write_manifest(plan, "app.json", {**manifest, "env": {**manifest["env"], **env}})
    report = await reconcile(bus, plan)
    applied = await applied_of(bus, "app")
    assert applied.state == "pending"
    assert any(reason in r for r in applied.reasons), applied.reasons
    assert report.modules["app"].applied == applied
    assert app.read_bytes() == before
    assert applied.digest is not None and applied.file == str(app)


async def test_a_vault_that_does_not_answer_leaves_the_module_pending(provisioned: Bus, plan: ClientPlan) -> None:
    async with stand_ins(provisioned, NODE, with_vault=False):
        report = await reconcile(provisioned, plan)
    reasons = report.modules["app"].applied.reasons
    unserved = (
        "neither imports it nor serves it (nats-server's trace of the request): the grants do not give it to this "
        "party (a node name its key does not cover, or grants not yet loaded), or what serves it here is not running"
    )
    assert reasons == (f"${{secret:db-password}}: nobody answers mesh-vault.secret: account $G {unserved}",)
    assert report.modules["postgres"].applied.reasons == (
        f"${{consumers:db}}: nobody answers mesh-vault.consumers: account $G {unserved}",
    )
    assert not (plan.materialize / "app.env").exists(), "never a partial file"


async def test_a_vault_that_hangs_leaves_the_module_pending_after_the_timeout(
    provisioned: Bus, nc: Client, plan: ClientPlan
) -> None:
    async def swallow(msg: Msg) -> None:
        pass

    async with stand_ins(provisioned, NODE, with_vault=False):
        await nc.subscribe("mesh-vault.*", cb=swallow)
        await nc.flush()
        report = await reconcile(provisioned, plan)
    assert report.modules["app"].applied.reasons == (
        "${secret:db-password}: mesh-vault.secret did not answer within 1 s",
    )


async def test_the_client_refuses_another_nodes_key_before_the_bus(provisioned: Bus) -> None:
    scope = NodeScope("node-1")
    sequence = await last_sequence(provisioned, buckets.NEEDS)
    for key in ["node-2.app.config.x", "node-10.app", "node-1", "node-1x.app"]:
        with pytest.raises(ForeignKeyError, match=f"refused to write mesh-provisioner_needs key '{key}'"):
            await scope.converge(provisioned, buckets.NEEDS, [], {"node-1.app.config.x": b"{}", key: b"{}"})
    assert await last_sequence(provisioned, buckets.NEEDS) == sequence


def test_a_node_name_that_needs_escaping_owns_only_its_escaped_keys() -> None:
    scope = NodeScope("node.1")
    assert scope.filter == "node=2E1.>"
    assert scope.owns("node=2E1.app")
    assert not scope.owns("node.1.app")


async def test_a_missing_manifests_folder_is_an_error_not_an_empty_node(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await reconcile(bus, plan)
    moved = plan.manifests.rename(plan.manifests.with_name("elsewhere"))
    with pytest.raises(ManifestError, match="the manifests folder does not exist"):
        await reconcile(bus, plan)
    assert (plan.materialize / "app.env").exists()
    assert len(await snapshot(bus, buckets.APPLIED)) == 3
    assert moved.is_dir()


async def test_items_of_a_bucket_other_than_the_nodes_collections_cannot_be_listed(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    """A node lists nothing itself: its own collections are listed by the verb, nothing else is."""
    answer = BucketAnswer(bucket="elsewhere_collect", key=buckets.COLLECT.shape.text, name="<collection>", read="items")
    entry = RegistryEntry(kind="collected", domain="collected", module="elsewhere", answer=answer)
    await put(bus, buckets.REGISTRY, "collected", to_json(entry))
    write_manifest(plan, "lister.json", {"module": "lister", "env": {"X": "${collected:app-plugins}"}})
    report = await reconcile(bus, plan)
    assert report.modules["lister"].applied.reasons == (
        "${collected:app-plugins}: bucket elsewhere_collect cannot be listed without a listing grant: a node "
        "lists only its own collections, through the provisioning verb",
    )
