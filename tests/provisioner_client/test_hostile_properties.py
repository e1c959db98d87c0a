"""A permanent property-based suite for the node client: random manifests (random JSON,
random bytes, deep and huge ones) and random ledgers get clear errors, and no file outside the
materialize folder is touched."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner_client.errors import ClientError
from provisioner_client.materializing.envfile import LEDGER
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from provisioner_client.resolving.manifest import MAX_MANIFEST_BYTES
from registry.wire import Bus
from tests.helpers import NODE

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_names = st.sampled_from(["app", "web", "x", "../up", "a/b", "", ".", "..", "café", "0", "A.b-c_d"])
_plausible = st.fixed_dictionaries(
    {
        "module": _names,
        "env": st.dictionaries(
            st.from_regex(r"[A-Z_]{1,5}", fullmatch=True),
            st.sampled_from(["${config:log-level}", "${x:y}", "${", "$$", "v"]),
            max_size=3,
        ),
    },
    optional={
        "contributes": st.dictionaries(st.text(max_size=5), st.lists(st.text(max_size=5), max_size=2)),
        "on_change": st.just({"command": ["true"]}),
    },
)
_contents = st.one_of(
    _plausible.map(lambda d: json.dumps(d).encode()),
    _json.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=200),
    st.integers(10_000, 50_000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.just(b" " * (MAX_MANIFEST_BYTES + 1)),
    _plausible.map(lambda d: json.dumps(d).encode()[:-1]),  # truncated
)
_ledger_names = st.sampled_from(
    [
        "app.env",
        "web.env",
        "x.env",
        "../sentinel.txt",
        "../../sentinel.txt",
        "{parent}/sentinel.txt",
        "{grand}/sentinel.txt",
        "",
        ".",
        "..",
        "sub/x.env",
        ".mesh-provisioner-client.key",
    ]
)
_ledgers = st.one_of(
    st.fixed_dictionaries(
        {
            "files": st.dictionaries(_ledger_names, _names, max_size=5),
            "manifests": st.dictionaries(st.sampled_from(["a.json", "../m.json", "/x.json"]), _names, max_size=3),
        }
    ).map(json.dumps),
    _json.map(json.dumps),
    st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
)
_examples = itertools.count()


def tree(root: Path, skip: Path) -> dict[str, bytes]:
    """Every file under `root` but those under `skip`, by path, with its bytes."""
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and skip not in p.parents}


async def reconcile_or_error(bus: Bus, plan: ClientPlan) -> Report | ClientError:
    try:
        return await reconcile(bus, plan)
    except ClientError as err:
        return err


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    manifests=st.dictionaries(st.from_regex(r"[a-z]{1,6}\.json", fullmatch=True), _contents, max_size=4),
    ledger=st.none() | _ledgers,
)
async def test_random_manifests_and_ledgers_get_clear_errors_and_touch_nothing_outside(
    provisioned: Bus, tmp_path: Path, manifests: dict[str, bytes], ledger: str | None
) -> None:
    grand = tmp_path / f"example-{next(_examples)}"
    parent = grand / "node"
    plan = ClientPlan(NODE, parent / "manifests", parent / "env")
    plan.manifests.mkdir(parents=True)
    plan.materialize.mkdir()
    for folder in (grand, parent):
        (folder / "sentinel.txt").write_text("untouched\n")
    for name, content in manifests.items():
        (plan.manifests / name).write_bytes(content)
    if ledger is not None:
        text = ledger.replace("{parent}", str(parent)).replace("{grand}", str(grand))
        (plan.materialize / LEDGER).write_text(text)
    before = tree(grand, plan.materialize)
    report = await reconcile_or_error(provisioned, plan)
    if isinstance(report, ClientError):
        assert str(report) and "\n" not in str(report) and len(str(report)) < 2000
    else:
        for error in report.manifest_errors:
            assert error.path.parent == plan.manifests and len(error.reason) <= 600
        for module in report.modules.values():
            assert all(len(reason) < 1000 for reason in module.applied.reasons)
    assert tree(grand, plan.materialize) == before
