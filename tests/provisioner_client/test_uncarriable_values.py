"""Values an env file cannot carry: a NUL, which sh reads as the value's end (`a\\0b` as
`ab`), and a lone surrogate, which is no UTF-8 text (it crashed the reconcile). From the bus they
leave their module pending with a reason naming the key or the placeholder, never written; in a
manifest they make the file a manifest error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mesh_dev.standins import StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from provisioner_client.resolving.manifest import load_manifests
from registry.wire import Bus, put


async def test_a_nul_in_a_bucket_value_is_refused_naming_the_key_and_never_written(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    first = await reconcile(bus, plan)
    assert first.modules["app"].applied.state == "applied"
    before = (plan.materialize / "app.env").read_bytes()
    await put(bus, domains.config, "log-level", b'"info\\u0000; rm -rf /"')
    report = await reconcile(bus, plan)
    app = report.modules["app"].applied
    assert app.state == "pending"
    said = f"${{config:log-level}}: the value at {domains.config.name} key 'log-level' holds a NUL character"
    assert any(reason.startswith(said) for reason in app.reasons), app.reasons
    assert (plan.materialize / "app.env").read_bytes() == before
    assert {m: r.applied.state for m, r in report.modules.items() if m != "app"} == {
        "postgres": "applied",
        "tools": "applied",
    }


async def test_a_nul_in_a_vaults_answer_is_refused_naming_the_placeholder(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    domains.vault.rotate("db-password", "s3cr3t\0v4lue")
    report = await reconcile(bus, plan)
    app = report.modules["app"].applied
    assert app.state == "pending"
    assert any(r.startswith("${secret:db-password}: ") and "holds a NUL character" in r for r in app.reasons)
    assert not (plan.materialize / "app.env").exists()
    assert all("s3cr3t" not in reason for reason in app.reasons), "a secret is never in a reason"


async def test_a_lone_surrogate_in_a_value_is_refused_naming_the_key_not_a_crash(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    await put(bus, domains.config, "log-level", b'"info\\ud800"')
    report = await reconcile(bus, plan)
    app = report.modules["app"].applied
    assert app.state == "pending"
    said = f"${{config:log-level}}: the value at {domains.config.name} key 'log-level' cannot be used: it holds a lone"
    assert any(reason.startswith(said) for reason in app.reasons), app.reasons


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        pytest.param({"env": {"A": "x\ud800"}}, "lone surrogate", id="a lone surrogate in an env value"),
        pytest.param({"env": {"A": "${config:x\udfff}"}}, "lone surrogate", id="a lone surrogate in a placeholder"),
        pytest.param({"contributes": {"c\ud800": ["a"]}}, "lone surrogate", id="a lone surrogate in a collection"),
        pytest.param({"contributes": {"c": ["a\0b"]}}, "collection 'c': an item holds a NUL", id="a NUL in an item"),
    ],
)
def test_a_manifest_holding_what_no_file_can_carry_is_a_manifest_error_not_a_crash(
    tmp_path: Path, manifest: dict[str, object], said: str
) -> None:
    (tmp_path / "m.json").write_text(json.dumps({"module": "m", **manifest}))
    found = load_manifests(tmp_path)
    assert not found.modules
    assert [error.path.name for error in found.errors] == ["m.json"]
    assert said in found.errors[0].reason
