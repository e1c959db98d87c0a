"""The dev loop's provider side against a real PostgreSQL (the machine has one: scripts/test installs
it): `mesh-provisioner-dev`'s demo starts PostgreSQL, the provider writes `postgres_bound` from the
needs, the postgres provisioner in watch mode applies the vault's consumers, and module app's
DATABASE_URL logs in."""

from __future__ import annotations

import io
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from examples.postgres_provisioner.consumers import read_env_variable
from mesh_dev import local_postgres
from mesh_dev.database import local_database
from mesh_dev.demo import run_demo
from mesh_dev.local_postgres import give_away
from mesh_dev.loop import run_dev
from mesh_dev.standins import BOUND_BUCKET, DEV_SECRETS
from provisioner.seat.settings import ServerSettings
from registry.wire import BusOptions, connect, snapshot
from tests.postgres import binaries


async def test_the_dev_loop_gives_app_a_database_url_that_logs_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mesh_dev.database")
    binaries()  # fails, saying what to install, on a machine without PostgreSQL
    state = tmp_path / "state"
    stop = anyio.Event()
    seen: dict[str, object] = {}

    async def check(url: str) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(partial(run_demo, state_dir=state / "demo"), url)
            env = read_env_variable(state / "demo" / "env" / "app.env", "DATABASE_URL")
            seen["url"] = env
            seen["answer"] = await anyio.to_thread.run_sync(_select_one, env)
            async with connect(BusOptions(servers=(url,), name="test")) as bus:
                seen["bound"] = {i.key: json.loads(i.value) for i in await snapshot(bus, BOUND_BUCKET)}
            tg.cancel_scope.cancel()
        stop.set()

    with anyio.fail_after(90):
        await run_dev(state_dir=state, settings=ServerSettings(), stop=stop, participants=[check], out=io.StringIO())

    url = conninfo_to_dict(str(seen["url"]))
    assert seen["answer"] == (1, "app", "app")
    assert url["password"] == DEV_SECRETS["db-password"]
    assert seen["bound"] == {"node-1.app.db.host": "127.0.0.1", "node-1.app.db.port": int(str(url["port"]))}
    assert url["port"] != "5432", "the real server's port, not the stand-in's"
    out = capsys.readouterr().out
    assert "module app's DATABASE_URL connects: SELECT 1 answered 1 to role app in database app" in out
    assert "the postgres provisioner watches" in out and "1 roles created" in out
    assert DEV_SECRETS["db-password"] not in out
    assert "postgres provisioner: reconciled 1 consumers" in caplog.text  # its own process, its lines relayed
    assert DEV_SECRETS["db-password"] not in caplog.text
    # The first reconcile's wait for postgres_bound is the handshake's first step, not a warning.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert "module app is pending: ${bound:postgres:db:host}: no value at postgres_bound" in caplog.text
    with pytest.raises(psycopg.OperationalError):  # stopped with the loop
        _select_one(str(seen["url"]))


def _select_one(url: str) -> tuple[object, ...]:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT 1, current_user, current_database()").fetchone()
    assert row is not None
    return row


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A folder PostgreSQL's user reaches (pytest's are root's alone when run as root), so the
    cluster is kept there between starts, as under the demo's state folder."""
    folder = Path(tempfile.mkdtemp(prefix="mesh-dev-pg-test-"))
    folder.chmod(0o755)
    try:
        yield folder / "postgres"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_postgresql_left_running_by_a_killed_loop_is_stopped_and_started_again(reachable: Path) -> None:
    binaries()
    async with local_database(reachable) as made:  # the cluster, made once
        assert (made.server is not None, made.temporary) == (True, False), made.why_not
    sockets = Path(tempfile.mkdtemp(prefix="mesh-pg-"))
    give_away(sockets)
    leftover = local_postgres.start(reachable, sockets)  # as a killed loop leaves it: running
    try:
        async with local_database(reachable) as again:
            assert again.server is not None, again.why_not
            assert not _answers(leftover.admin_dsn), "the leftover server still runs"
            assert _answers(again.server.admin_dsn)
    finally:
        if local_postgres.running(leftover.data):
            local_postgres.stop(leftover)
        shutil.rmtree(sockets, ignore_errors=True)


async def test_a_postgresql_that_does_not_start_leaves_the_demo_running_without_it(
    reachable: Path, caplog: pytest.LogCaptureFixture
) -> None:
    binaries()
    folder = reachable
    async with local_database(folder) as made:
        assert (made.server is not None, made.temporary) == (True, False), made.why_not
    (folder / "data" / "postgresql.conf").write_text("shared_buffers = nonsense\n")
    async with local_database(folder) as broken:
        assert broken.server is None
    assert broken.why_not.startswith("did not start: "), broken.why_not
    assert f"(see {folder / 'postgres.log'})" in broken.why_not
    assert "\n" not in broken.why_not, "one line, not pg_ctl's whole log"
    assert "the demo goes on without it" in caplog.text


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True
