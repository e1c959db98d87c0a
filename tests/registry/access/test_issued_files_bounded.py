"""The JSON files grants reads back (grants.json, sites.json) and the seat reads (grants.json) are
bounded in depth by the one bounded JSON reader: nested too deep is a clear error, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.commands.cli import main
from provisioner.seat.server import read_grants
from registry.access import read_sites_file
from registry.errors import SettingsError

DEEP = b"[" * 5000 + b"]" * 5000


def test_grants_check_refuses_a_grants_json_nested_too_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "grants.json").write_bytes(DEEP)
    assert main(["grants", "--out", str(tmp_path), "--node", "n1", "--check"]) == 2
    said = capsys.readouterr().err
    assert "cannot be read as grants.json: it nests at least" in said and "Traceback" not in said


def test_the_seat_refuses_a_grants_file_nested_too_deep(tmp_path: Path) -> None:
    path = tmp_path / "grants.json"
    path.write_bytes(DEEP)
    with pytest.raises(SettingsError, match="nests at least"):
        read_grants(path)


def test_a_sites_json_nested_too_deep_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sites.json"
    path.write_bytes(b'{"version": 1, "hub": ' + DEEP + b"}")
    with pytest.raises(SettingsError, match=r"cannot be read as sites\.json: it nests at least"):
        read_sites_file(path)
