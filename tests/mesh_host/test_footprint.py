"""The footprint in --state: written whole and at once, read back as written, refused when not ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mesh_host.applying import footprint as footprint_module
from mesh_host.applying.footprint import (
    FILE,
    Before,
    Footprint,
    OwnedDirectory,
    OwnedFile,
    OwnedService,
    holding,
    load,
    save,
)
from mesh_host.errors import StateError

OWNED = Footprint(
    owned=(
        OwnedDirectory(
            path="/etc/app", created=True, mode=0o755, unknown="module", module="app", knows=("/etc/app/k",)
        ),
        OwnedFile(path="/etc/app/app.toml", created=False, mode=0o640, owner="root", sha256="0" * 64),
        OwnedService(unit="app.service", state="running", enabled=True, before=Before(running=False, enabled=False)),
    )
)


def test_no_footprint_yet_is_an_empty_one(tmp_path: Path) -> None:
    assert load(tmp_path / "state") == Footprint()


def test_a_footprint_is_read_back_as_written_with_nothing_left_beside_it(tmp_path: Path) -> None:
    save(tmp_path / "state", OWNED)
    assert load(tmp_path / "state") == OWNED
    assert sorted(path.name for path in (tmp_path / "state").iterdir()) == [FILE]
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "state" / FILE).stat().st_mode & 0o777 == 0o600


def test_a_save_replaces_the_file_by_renaming_a_new_one_over_it(tmp_path: Path) -> None:
    save(tmp_path, OWNED)
    before = (tmp_path / FILE).stat().st_ino
    save(tmp_path, OWNED.forgetting(("service", "app.service")))
    assert (tmp_path / FILE).stat().st_ino != before
    assert [owned.key for owned in load(tmp_path).owned] == [("directory", "/etc/app"), ("file", "/etc/app/app.toml")]


def test_keeping_replaces_an_entry_in_its_place_and_appends_a_new_one() -> None:
    moved = OwnedFile(path="/etc/app/app.toml", created=False, mode=0o600, sha256="1" * 64)
    kept = OWNED.keeping(moved).keeping(OwnedFile(path="/etc/b", created=True, mode=0o600, sha256="2" * 64))
    assert [owned.key[1] for owned in kept.owned] == ["/etc/app", "/etc/app/app.toml", "app.service", "/etc/b"]
    assert kept.entry(("file", "/etc/app/app.toml")) == moved


def _file_at(path: str) -> str:
    return json.dumps({"owned": [{"type": "file", "path": path, "created": True, "mode": 420, "sha256": "0" * 64}]})


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not a footprint this host reads"),
        ('{"footprint": 2, "owned": []}', "footprint: Input should be 1"),
        (_file_at("etc"), r"owned.0.file.path: .*'etc' is relative"),
        (_file_at("/etc/app/../../root/.ssh/authorized_keys"), "owned.0.file.path: .*not a plain absolute path"),
        (
            '{"owned": [{"type": "service", "unit": "--root=/x.service", "state": "running", "enabled": true,'
            ' "before": {"running": false, "enabled": false}}]}',
            "owned.0.service.unit: .*not a unit name",
        ),
    ],
    ids=["not JSON", "another version", "a relative path", "a path with ..", "a unit that is an option"],
)
def test_a_footprint_not_ours_is_refused_saying_how_to_start_afresh(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / FILE).write_text(text)
    with pytest.raises(StateError, match=said) as refused:
        load(tmp_path)
    assert "Move it away to start afresh" in str(refused.value)


def test_a_second_apply_on_the_same_state_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    with holding(tmp_path), pytest.raises(StateError, match="another mesh-host is applying"), holding(tmp_path):
        pass
    with holding(tmp_path):  # released
        pass


def test_keeping_what_it_holds_already_is_itself_not_a_copy() -> None:
    assert all(OWNED.keeping(owned) is OWNED for owned in OWNED.owned)
    changed = OWNED.owned[1].model_copy(update={"mode": 0o600})
    assert OWNED.keeping(changed) is not OWNED and OWNED.keeping(changed).entry(changed.key) == changed


def test_a_footprint_too_large_to_be_read_back_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save(tmp_path, Footprint())
    monkeypatch.setattr(footprint_module, "MAX_FOOTPRINT_BYTES", 100)
    with pytest.raises(StateError, match="would be larger than the 100 bytes it may hold: not written"):
        save(tmp_path, OWNED)
    monkeypatch.undo()
    assert load(tmp_path) == Footprint()  # the one written before stands
