"""The demo against a real nats-server: stand-ins, the example manifests, a printed summary; the
provider side for real when the machine has PostgreSQL, else the stand-in's fixed values and what
to install."""

from __future__ import annotations

import json
import subprocess
from functools import partial
from pathlib import Path

import anyio
import pytest

from mesh_dev import local_postgres
from mesh_dev.demo import EXAMPLES, run_demo, seed_examples
from mesh_dev.local_nats import LocalNats
from mesh_dev.placement import PLACEMENT_FILE, PlacementRefused, place, seed_placement
from mesh_dev.standins import ASSIGNMENTS
from provisioner_client.settings import ClientSettings
from registry.edge import BusSettings, load_settings
from registry.wire import Bus, Changes, snapshot
from tests.helpers import sh_env, until


async def test_the_demo_applies_every_example_and_says_where_the_files_are(
    provisioned: Bus, nats_server: LocalNats, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(60):
            await tg.start(run_demo, nats_server.url, tmp_path)
        tg.cancel_scope.cancel()
    out = capsys.readouterr().out
    assert "node-1.app.secret.db-password  ${secret:db-password}" in out
    for module in ("app", "postgres", "tools"):
        assert f"{module}: applied -> {tmp_path / 'env' / module}.env (written)" in out
    assert f"env files are in {tmp_path / 'env'}" in out
    assert "provider side: a real PostgreSQL" in out
    assert "module app's DATABASE_URL connects: SELECT 1 answered 1" in out
    assert "dev-only-s3cret-password" not in out


WITHOUT = {
    "not installed": "PostgreSQL not installed on this machine: install it to see the provider side for real "
    "(Debian: sudo apt-get install postgresql)",
    "not wanted": "PostgreSQL not started (--no-postgres)",
}


@pytest.mark.usefixtures("provisioned")
@pytest.mark.parametrize("absent", list(WITHOUT), ids=["on a machine without PostgreSQL", "with --no-postgres"])
async def test_without_postgresql_the_demo_keeps_the_stand_ins_fixed_values_and_says_what_to_install(
    nats_server: LocalNats,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    absent: str,
) -> None:
    if absent == "not installed":
        monkeypatch.setattr(local_postgres, "find_binaries", lambda: None)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(15):
            await tg.start(
                lambda task_status: run_demo(
                    nats_server.url, tmp_path, postgres=absent != "not wanted", task_status=task_status
                )
            )
        tg.cancel_scope.cancel()
    out = capsys.readouterr().out
    assert f"app: applied -> {tmp_path / 'env' / 'app'}.env (written)" in out
    assert WITHOUT[absent] in out
    assert "postgres_bound holds the stand-in's fixed values (127.0.0.1:5432)" in out
    assert "@127.0.0.1:5432/app" in sh_env(tmp_path / "env" / "app.env")["DATABASE_URL"]
    assert not (tmp_path / "postgres").exists()


async def _run_demo_once(url: str, state: Path) -> None:
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            await tg.start(lambda task_status: run_demo(url, state, postgres=False, task_status=task_status))
        tg.cancel_scope.cancel()


@pytest.mark.usefixtures("provisioned")
async def test_a_restarted_demo_keeps_the_manifests_as_edited_and_a_deleted_one_stays_deleted(
    nats_server: LocalNats, tmp_path: Path
) -> None:
    await _run_demo_once(nats_server.url, tmp_path)
    manifests = tmp_path / "manifests"
    app = json.loads((manifests / "app.json").read_text())
    app["env"]["EDITED"] = "by hand"
    (manifests / "app.json").write_text(json.dumps(app))
    (manifests / "tools.json").unlink()

    await _run_demo_once(nats_server.url, tmp_path)

    assert sorted(p.name for p in manifests.iterdir()) == ["app.json", "postgres.json"]
    assert json.loads((manifests / "app.json").read_text())["env"]["EDITED"] == "by hand"
    assert sh_env(tmp_path / "env" / "app.env")["EDITED"] == "by hand"


@pytest.mark.usefixtures("provisioned")
async def test_the_demo_writes_a_settings_file_the_clients_status_reads(nats_server: LocalNats, tmp_path: Path) -> None:
    state = tmp_path / "state"
    await _run_demo_once(nats_server.url, state)
    settings = load_settings(ClientSettings, {}, state / "client.toml", {})
    assert (settings.node, settings.manifests, settings.materialize) == ("node-1", state / "manifests", state / "env")
    assert load_settings(BusSettings, {}, state / "client.toml", {}).url == nats_server.url


def test_an_example_added_later_is_seeded_once_and_a_users_file_of_its_name_is_left_alone(tmp_path: Path) -> None:
    examples, folder, record = tmp_path / "examples", tmp_path / "manifests", tmp_path / "seeded"
    examples.mkdir()
    (examples / "a.json").write_text("a example")
    assert seed_examples(folder, record, examples) == ["a.json"]
    (examples / "b.json").write_text("b example")
    (examples / "c.json").write_text("c example")
    folder.joinpath("c.json").write_text("the user's own c")
    folder.joinpath("a.json").unlink()

    assert seed_examples(folder, record, examples) == ["b.json"]
    assert seed_examples(folder, record, examples) == []
    assert {p.name: p.read_text() for p in folder.iterdir()} == {"b.json": "b example", "c.json": "the user's own c"}
    assert record.read_text().split() == ["a.json", "b.json", "c.json"]


def test_the_first_start_seeds_every_example(tmp_path: Path) -> None:
    names = sorted(p.name for p in EXAMPLES.glob("*.json"))
    assert seed_examples(tmp_path / "manifests", tmp_path / "seeded") == names
    assert sorted(p.name for p in (tmp_path / "manifests").iterdir()) == names


RUN = Path(__file__).parents[2] / "scripts" / "run"


@pytest.mark.parametrize("where", [[], ["--state-dir", "elsewhere"], ["--state-dir=elsewhere"]])
def test_scripts_run_reset_deletes_the_dev_state_and_exits_without_starting(tmp_path: Path, where: list[str]) -> None:
    """Run in a copy of the script, so the repository's own ./state is never touched."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "run"
    script.write_bytes(RUN.read_bytes())
    script.chmod(0o755)
    state = tmp_path / (where[-1].split("=")[-1] if where else "state")
    (state / "demo" / "env").mkdir(parents=True)
    (state / "demo" / "env" / "app.env").write_text("DB_PASSWORD=dev-only-s3cret-password\n")

    done = subprocess.run([script, "--reset", *where], capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (
        0,
        f"removed {state.name}: the next ./scripts/run starts from the examples again\n",
    )
    assert not state.exists()
    assert not (tmp_path / ".venv").exists()  # it never installed anything
    again = subprocess.run([script, "--reset", *where], capture_output=True, text=True, check=False, timeout=30)
    assert (again.returncode, again.stdout) == (0, f"nothing to remove: {state.name} does not exist\n")


@pytest.mark.usefixtures("provisioned")
async def test_a_module_of_ones_own_is_placed_by_adding_it_to_the_placement_file(
    nats_server: LocalNats, tmp_path: Path
) -> None:
    placement = tmp_path / PLACEMENT_FILE
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(60):
            await tg.start(partial(run_demo, nats_server.url, tmp_path, postgres=False))
        (tmp_path / "manifests" / "web.json").write_text('{"module": "web", "env": {"HTTP_PORT": "${port:http}"}}')
        plans = json.loads(placement.read_text())
        assert set(plans) == {"app", "postgres"}, "the examples' placements, written at the first start"
        placement.write_text("{not json")  # refused with a warning, the demo goes on
        placement.write_text(json.dumps(plans | {"web": {"port": {"http": 8081}}}))
        assert await until((tmp_path / "env" / "web.env").exists, 30), "web never placed"
        tg.cancel_scope.cancel()
    assert sh_env(tmp_path / "env" / "web.env")["HTTP_PORT"] == "8081"


@pytest.mark.usefixtures("provisioned")
async def test_a_placement_file_that_is_not_one_is_refused_and_the_placements_stay(
    nats_server: LocalNats, provisioned: Bus, tmp_path: Path
) -> None:
    path = tmp_path / PLACEMENT_FILE
    seed_placement(path, "node-1")
    assert (await place(provisioned, "node-1", path)).written == ["node-1.app", "node-1.postgres"]
    before = await snapshot(provisioned, ASSIGNMENTS)
    for broken in ('{"web": 3}', "[1]", '{"web": {"port": 8081}}', '{"": {}}', "x" * 300_000):
        path.write_text(broken)
        with pytest.raises(PlacementRefused):
            await place(provisioned, "node-1", path)
    assert await snapshot(provisioned, ASSIGNMENTS) == before
    path.write_text('{"app": {"port": {"http": 9090}}}')
    assert await place(provisioned, "node-1", path) == Changes(written=["node-1.app"], deleted=["node-1.postgres"])
