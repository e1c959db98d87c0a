"""The dev loop's provider side against a real PostgreSQL (the machine has one: scripts/test installs
it): `mesh-provisioner-dev`'s demo starts PostgreSQL, the provider writes `postgres_bound` from the
needs, the postgres provisioner in watch mode applies the vault's consumers, and module app's
DATABASE_URL logs in."""

from __future__ import annotations

import io
import json
import logging
from functools import partial
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from examples.postgres_provisioner.consumers import read_env_variable
from mesh_dev.demo import run_demo
from mesh_dev.loop import run_dev
from mesh_dev.standins import BOUND_BUCKET, DEV_SECRETS
from provisioner.settings import ServerSettings
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
