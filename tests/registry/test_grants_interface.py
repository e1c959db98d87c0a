"""The grants as an interface for a controller in any language: a mesh file in, files out that are
the same for the same mesh and seeds, a JSON Schema for grants.json that ships and is the model's,
and `--check` saying exactly what a new mesh file changes, writing nothing."""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from provisioner.commands.cli import main
from registry.access import AccountGrant, Grants, Kind, claims_of, plan_grants
from registry.access.schema import REGENERATE, SCHEMA_FILE, rendered_schema
from registry.access.schema import main as schema_main
from tests.helpers import DEPLOY

MESH_A = """\
nodes = ["n1", "n2"]
operators = ["ops"]
[providers.postgres]
machines = ["n2"]
"""
# n2 gone, n3 and operator audit new, postgres moved from n2 to n1.
MESH_B = """\
nodes = ["n1", "n3"]
operators = ["ops", "audit"]
[providers.postgres]
machines = ["n1"]
"""


def mesh_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def grants(*argv: str | Path) -> int:
    return main(["grants", *map(str, argv)])


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_shipped_schema_is_the_one_the_model_generates() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == rendered_schema(), (
        f"{SCHEMA_FILE} is not the schema of registry.access.grants.Grants any more: run `{REGENERATE}` "
        "and commit the file"
    )


@pytest.mark.parametrize("jwt", [False, True], ids=["static", "jwt"])
def test_a_grants_json_written_by_the_command_validates_against_the_shipped_schema(
    tmp_path: Path, jwt: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    mode = ["--jwt"] if jwt else []
    parties = ["--node", "n1", "--node", "web.eu", "--provider", "postgres@n1", "--provider", "redis"]
    assert grants("--out", out, *parties, "--operator", "ops", *mode) == 0
    written = json.loads((out / "grants.json").read_text(encoding="utf-8"))
    validator = Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    assert list(validator.iter_errors(written)) == []
    assert all((grant["account_key"] is not None) == jwt for grant in written["parties"])
    without_wide = {key: value for key, value in written.items() if key != "wide"}
    for wrong in ({**written, "version": 2}, {**written, "unknown": 1}, without_wide):
        assert list(validator.iter_errors(wrong)) != [], "the schema lets a wrong file through"


def test_the_schema_module_writes_the_schema_and_checks_a_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "grants.schema.json"
    assert schema_main(["--out", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == rendered_schema()
    assert schema_main(["--check", "--out", str(target)]) == 0
    target.write_text(rendered_schema().replace('"const": 1', '"const": 2'), encoding="utf-8")
    assert schema_main(["--check", "--out", str(target)]) == 1
    assert f"run `{REGENERATE}`" in capsys.readouterr().err


def test_the_schema_ships_inside_the_package() -> None:
    shipped = resources.files("registry.access").joinpath("grants.schema.json").read_text(encoding="utf-8")
    assert json.loads(shipped)["properties"]["version"]["const"] == 1


def test_the_deploy_grants_validate_against_the_schema() -> None:
    validator = Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    validator.validate(json.loads((DEPLOY / "mesh" / "grants.json").read_text(encoding="utf-8")))


def test_the_deploy_mesh_file_writes_exactly_deploy_mesh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys"
    shutil.copytree(DEPLOY / "dev-keys", keys)
    assert grants("--out", tmp_path / "out", "--keys", keys, "--mesh", DEPLOY / "mesh.toml") == 0
    for name in ("accounts.conf", "grants.json"):
        assert (tmp_path / "out" / name).read_text() == (DEPLOY / "mesh" / name).read_text(), name


def test_the_same_mesh_and_seeds_write_the_same_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mesh, keys = mesh_file(tmp_path, "a.toml", MESH_A), tmp_path / "keys"
    assert grants("--out", tmp_path / "first", "--keys", keys, "--mesh", mesh, "--jwt") == 0
    first = files_of(tmp_path / "first")
    assert grants("--out", tmp_path / "second", "--keys", keys, "--mesh", mesh, "--jwt") == 0
    second = files_of(tmp_path / "second")
    for name in ("accounts.conf", "grants.json"):
        assert first[name] == second[name], name
    # A fresh folder signs each JWT anew (`iat`, and `jti` with it): the claims are the same.
    assert first.keys() == second.keys()
    for name in (n for n in first if n.endswith(".jwt")):
        assert _lasting(first[name]) == _lasting(second[name]), name
    # Issued again over its own output, every file is kept byte for byte.
    assert grants("--out", tmp_path / "first", "--keys", keys, "--mesh", mesh, "--jwt") == 0
    assert files_of(tmp_path / "first") == first


def _lasting(token: bytes) -> dict[str, object]:
    claims = claims_of(token.decode().strip())
    return {key: value for key, value in claims.items() if key not in ("iat", "jti")}


def test_check_reports_exactly_the_difference_of_two_mesh_files_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, keys = tmp_path / "out", tmp_path / "keys"
    a, b = mesh_file(tmp_path, "a.toml", MESH_A), mesh_file(tmp_path, "b.toml", MESH_B)
    assert grants("--out", out, "--keys", keys, "--mesh", a) == 0
    before = {**files_of(out), **files_of(keys)}
    capsys.readouterr()

    assert grants("--out", out, "--keys", keys, "--mesh", a, "--check") == 0
    assert capsys.readouterr().out == f"nothing would change (against {out / 'grants.json'})\n"

    assert grants("--out", out, "--keys", keys, "--mesh", b, "--check") == 8
    said = capsys.readouterr().out.splitlines()
    assert {**files_of(out), **files_of(keys)} == before  # no file written, no seed issued

    consumers = "service mesh-vault.consumers from vault, shared"
    n3_imports = len(_grant(out, "node-n1").imports)  # a machine, as n1 is
    audit_imports = len(_grant(out, "operator-ops").imports)
    assert said == [
        f"+ account node-n3: {n3_imports} imports",
        f"+ account operator-audit: {audit_imports} imports",
        "- account node-n2",
        f"~ account node-n1: widened: + {consumers}",
        f"accounts: 2 added, 1 removed, 1 changed (against {out / 'grants.json'})",
    ]
    # ... which is what issuing b does to the grants.
    old = Grants.model_validate_json((out / "grants.json").read_text())
    assert grants("--out", out, "--keys", keys, "--mesh", b) == 0
    new = Grants.model_validate_json((out / "grants.json").read_text())
    assert plan_grants(old, new).lines() == said[:-1]


def _grant(out: Path, label: str) -> AccountGrant:
    issued = Grants.model_validate_json((out / "grants.json").read_text())
    return next(g for g in issued.parties if g.party.label == label)


@pytest.mark.parametrize(
    ("in_file", "flags", "writers"),
    [
        pytest.param("", [], ["writer-config", "writer-placement"], id="named by neither: every one"),
        pytest.param("", ["--writer", "placement"], ["writer-placement"], id="named by a flag"),
        pytest.param(
            'writers = ["config"]', ["--writer", "placement"], ["writer-config", "writer-placement"], id="both"
        ),
        pytest.param("writers = []", [], [], id="none, said by the file"),
    ],
)
def test_the_writers_are_those_the_file_or_the_flags_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], in_file: str, flags: list[str], writers: list[str]
) -> None:
    mesh = mesh_file(tmp_path, "mesh.toml", f'nodes = ["n1"]\n{in_file}\n')
    assert grants("--out", tmp_path / "out", "--mesh", mesh, *flags) == 0
    issued = Grants.model_validate_json((tmp_path / "out" / "grants.json").read_text())
    assert [g.party.label for g in issued.parties if g.party.kind == Kind.WRITER] == writers


def test_a_writer_that_writes_no_bucket_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert grants("--out", tmp_path / "out", "--writer", "vault-secrets") == 2
    said = capsys.readouterr().err
    assert "the grants' writers: 'vault-secrets' is no domain of the catalogue writing a bucket" in said, said


def test_check_with_nothing_issued_yet_adds_every_account(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert grants("--out", tmp_path / "out", "--node", "n1", "--check") == 8
    said = capsys.readouterr().out
    assert "+ account node-n1: " in said and "+ account MESH (seat): 0 imports" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        pytest.param(["--push"], "grants: --push: pushes account JWTs: give --jwt too", id="--push without --jwt"),
        pytest.param(
            ["--domains-file", "other.toml"],
            "grants: --domains-file: the mesh file {mesh} names one already",
            id="a domains file in both the file and the flags",
        ),
        pytest.param(["--mesh", "absent.toml"], "grants: mesh file absent.toml: cannot be read", id="no mesh file"),
        pytest.param(
            ["--nats-url", "nats://127.0.0.1:4222"],
            "grants: --nats-url: applies only with --push",
            id="a URL unused",
        ),
        pytest.param(
            ["--jwt", "--push", "--nats-nkey", "seat.nk"],
            "grants: --nats-nkey: --push connects as the system account's user",
            id="a push with another credential",
        ),
    ],
)
def test_a_settings_mistake_exits_2_saying_what(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    mesh = mesh_file(tmp_path, "mesh.toml", 'nodes = ["n1"]\ndomains_file = "domains.toml"\n')
    assert grants("--out", "out", "--mesh", mesh.name, *argv) == 2
    assert capsys.readouterr().err.startswith(f"mesh-provisioner {said.format(mesh=mesh.name)}")


def test_check_and_push_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        grants("--out", "out", "--jwt", "--check", "--push")
    assert raised.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
