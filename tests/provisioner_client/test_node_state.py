"""The node's own state (`provisioner_client.state`): every record of the env folder read, bounded,
validated and written in one place. A node upgraded in place reads what the previous version of
the client wrote (the files below are byte for byte what it wrote); each record refuses more than
its bound, a link or a folder in its place, and a write torn by a kill.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from provisioner_client.errors import MaterializeError
from provisioner_client.materializing.envfile import EnvFolder
from provisioner_client.resolving import own
from provisioner_client.resolving.memory import BucketState, Memory, ModuleState
from provisioner_client.rollout.gate import RolloutState
from provisioner_client.state import files, records
from provisioner_client.state.records import KEY, NotARecord, Record
from registry.wire import KvItem

NODE = "n1"
WEB = b'# x\nA="1"\n'
LAST_GOOD = b'# x\nA="0"\n'
OLD_KEY = bytes(range(32))

# What the previous version of the client left in an env folder, as it wrote them.
PREVIOUS_VERSION = {
    records.LEDGER.name: (
        b'{\n  "files": {\n    "web.env": "web"\n  },\n  "manifests": {\n    "web.json": "web"\n  }\n}\n'
    ),
    KEY: OLD_KEY,
    f"{records.LAST_GOOD}web": LAST_GOOD,
    records.REFUSALS.name: (
        b'{"node": "n1", "at": "2026-12-05T13:12:08+00:00", "buckets": {"needs": "maximum bytes exceeded"}}'
    ),
    records.ROLLOUT.name: (
        b'{"modules":{"web":{"action":null,"burst_since":null,"change":"c1","changed_at":null,"claimed":true,'
        b'"digest":"hmac-sha256:aa","pacing_applied":false,"pacing_change":"","queued":3,"reason":"",'
        b'"renewed_at":"2026-12-05T12:00:00Z","rolled_back":false,"saw_hold":false,"splay_until":null,'
        b'"stage":"running","started":true,"under_claim":true,"unreachable_since":null}}}'
    ),
    records.MEMORY.name: (
        b'{"version":1,"node":"n1","buckets":{"applied":{"stamp":14,"digest":"sha256:def","listed_at":1764900000.5,'
        b'"items":[["n1.web",14,"{\\"state\\":\\"applied\\"}"]]},"needs":{"stamp":12,"digest":"sha256:abc",'
        b'"listed_at":1764900000.5,"items":null}},"world":"sha256:w","world_parts":{"registry":"sha256:r",'
        b'"stamps":{"config":3}},"sources":[["config","{node}.{module}","n1.>"]],"modules":{"old":["sha256:j",'
        b'1764900000.0],"web":["sha256:i",1764900000.25,"sha256:m"]}}'
    ),
    records.WAITING.name: (
        b'{"node": "n1", "parts": {"applied": {"since": "2026-12-05T13:12:08+00:00", "how": "the applied writes '
        b'were answered NoResponders", "keys": ["n1.web"], "records": {"n1.web": "{\\"state\\":\\"applied\\"}"}}, '
        b'"lease": {"since": "2026-12-05T13:12:08+00:00", "how": "renewals answered timed out", "keys": []}}}'
    ),
    "web.env": WEB,
}


# What this version keeps besides.
SINCE = {
    records.ACTIONS.name: (
        b'{"modules":{"web":{"command":["true"],"digest":"hmac-sha256:aa","exit_code":0,'
        b'"finished_at":"2026-12-05T12:00:00+00:00","outcome":"succeeded"}}}'
    ),
}
WRITTEN = PREVIOUS_VERSION | SINCE


@pytest.fixture
def upgraded(tmp_path: Path) -> Path:
    """An env folder as the previous version of the client left it, with the records kept since."""
    folder = tmp_path / "env"
    folder.mkdir(mode=0o700)
    for name, content in WRITTEN.items():
        (folder / name).write_bytes(content)
        (folder / name).chmod(0o600)
    return folder


def test_a_node_upgraded_in_place_reads_every_record_the_previous_version_wrote(upgraded: Path) -> None:
    env = EnvFolder(upgraded)
    assert env.read_ledger().files == {"web.env": "web"}
    assert env.read_ledger().manifests == {"web.json": "web"}
    assert env.key() == OLD_KEY
    assert env.digest_on_disk("web") == env.digest(WEB)
    memory = Memory.load(upgraded, NODE)
    assert memory.missing == ""
    assert memory.buckets["needs"] == BucketState(12, "sha256:abc", 1764900000.5)
    assert memory.items_of("applied") == [KvItem("n1.web", b'{"state":"applied"}', 14)]
    assert memory.modules == {
        "web": ModuleState("sha256:i", 1764900000.25, "sha256:m"),
        "old": ModuleState("sha256:j", 1764900000.0),
    }
    assert memory.world == "sha256:w" and memory.world_parts == {"registry": "sha256:r", "stamps": {"config": 3}}
    waits = own.read_waiting(upgraded, NODE)
    assert waits is not None and set(waits.parts) == {"applied", "lease"}
    assert waits.applied_records("applied") == {"n1.web": b'{"state":"applied"}'}
    refused = own.read_refusals(upgraded, NODE)
    assert refused is not None and refused.buckets == {"needs": "maximum bytes exceeded"}
    rollout = RolloutState(upgraded)
    web = rollout.get("web")
    assert web is not None and (web.stage, web.started, web.queued, web.under_claim) == ("running", True, 3, True)
    assert rollout.last_good("web") == LAST_GOOD


def test_an_unchanged_memory_read_from_the_previous_version_is_not_written_again(upgraded: Path) -> None:
    before = (upgraded / records.MEMORY.name).stat().st_mtime_ns
    assert not Memory.load(upgraded, NODE).save()
    assert (upgraded / records.MEMORY.name).stat().st_mtime_ns == before


RECORDS = [
    pytest.param(records.LEDGER, id="the ledger"),
    pytest.param(records.MEMORY, id="the memory"),
    pytest.param(records.WAITING, id="the waiting writes"),
    pytest.param(records.REFUSALS, id="the refused writes"),
    pytest.param(records.ROLLOUT, id="the rollouts"),
    pytest.param(records.ACTIONS, id="the change actions"),
]


@pytest.mark.parametrize("record", RECORDS)
def test_each_record_written_again_is_read_back_as_it_was(record: Record[Any], upgraded: Path) -> None:
    found = record.read(upgraded)
    assert found is not None
    record.write(upgraded, found)
    assert record.read(upgraded) == found
    assert (upgraded / record.name).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("record", RECORDS)
def test_a_record_past_its_bound_is_refused_unread(record: Record[Any], upgraded: Path) -> None:
    (upgraded / record.name).write_bytes(b" " * (record.limit + 1))
    with pytest.raises(MaterializeError, match=f"more than the {record.limit:,} bytes allowed"):
        record.read(upgraded)


@pytest.mark.parametrize("record", RECORDS)
def test_a_link_or_a_folder_planted_in_a_records_place_is_never_followed(
    record: Record[Any],
    upgraded: Path,
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(WRITTEN[record.name])
    (upgraded / record.name).unlink()
    (upgraded / record.name).symlink_to(victim)
    with pytest.raises(MaterializeError, match="is a symbolic link, not a regular file"):
        record.read(upgraded)
    (upgraded / record.name).unlink()
    (upgraded / record.name).mkdir()
    with pytest.raises(MaterializeError, match="is a folder, not a regular file"):
        record.read(upgraded)
    assert victim.read_bytes() == WRITTEN[record.name]


@pytest.mark.parametrize("record", RECORDS)
def test_a_torn_record_is_refused_and_a_killed_writes_leftover_removed(
    record: Record[Any],
    upgraded: Path,
) -> None:
    whole = WRITTEN[record.name]
    leftover = upgraded / files.temporary_name(record.name)
    leftover.write_bytes(whole[: len(whole) // 2])  # killed while writing its temporary file
    assert records.remove_leftovers(upgraded, is_env_file=lambda _: False) == [leftover]
    assert record.read(upgraded) is not None  # the record as it was before the write
    (upgraded / record.name).write_bytes(whole[: len(whole) // 2])  # torn in place (not by the client's writes)
    with pytest.raises(MaterializeError, match="cannot be read"):
        record.read(upgraded)


@pytest.mark.parametrize("record", [r for r in RECORDS if r.values[0] is not records.LEDGER])
def test_json_of_another_shape_is_not_a_record(record: Record[Any], upgraded: Path) -> None:
    (upgraded / record.name).write_bytes(b'{"node": 1, "modules": [], "parts": 2, "buckets": null}')
    with pytest.raises(NotARecord, match=f"is not a record of {record.shape}"):
        record.read(upgraded)


def test_a_ledger_of_another_shape_is_read_as_empty_its_entries_judged_one_by_one(upgraded: Path) -> None:
    (upgraded / records.LEDGER.name).write_bytes(b"[1, 2]")
    assert EnvFolder(upgraded).read_ledger().files == {}
    (upgraded / records.LEDGER.name).write_bytes(b'{"files": {"web.env": "web", "../x": "x", "a.env": 1}}')
    ledger = EnvFolder(upgraded).read_ledger()
    assert ledger.files == {"web.env": "web"}
    assert len(ledger.problems) == 2


def test_nothing_outside_the_store_opens_a_file_of_the_env_folder_but_the_env_files() -> None:
    """Every atomic write and every bounded read of the env folder goes through `state`; outside
    it, only the env files themselves (`envfile`) are written with `state.files`."""
    package = Path(records.__file__).parent.parent
    opening = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.parent.name != "state"
        and re.search(
            r"from provisioner_client\.state(\.files)? import .*\bfiles\b|\bwrite_atomically\b", path.read_text()
        )
    ]
    assert opening == ["materializing/envfile.py"]
