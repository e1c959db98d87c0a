"""The grants as an interface for a controller in any language: a JSON Schema for grants.json that
ships and is the model's, and that what `grants` writes follows."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from provisioner.commands.cli import main
from registry.access.schema import REGENERATE, SCHEMA_FILE, rendered_schema
from registry.access.schema import main as schema_main


def grants(*argv: str | Path) -> int:
    return main(["grants", *map(str, argv)])


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
