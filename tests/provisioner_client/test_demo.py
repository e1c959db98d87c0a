"""The demo against a real nats-server: stand-ins, the example manifests, a printed summary; the
provider side for real when the machine has PostgreSQL, else the stand-in's fixed values and what
to install."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mesh_dev import local_postgres
from mesh_dev.demo import run_demo
from mesh_dev.local_nats import LocalNats
from registry.bus import Bus
from tests.helpers import sh_env


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
            await tg.start(lambda task_status: run_demo(nats_server.url, tmp_path, postgres=absent != "not wanted",
                                                        task_status=task_status))  # fmt: skip
        tg.cancel_scope.cancel()
    out = capsys.readouterr().out
    assert f"app: applied -> {tmp_path / 'env' / 'app'}.env (written)" in out
    assert WITHOUT[absent] in out
    assert "postgres_bound holds the stand-in's fixed values (127.0.0.1:5432)" in out
    assert "@127.0.0.1:5432/app" in sh_env(tmp_path / "env" / "app.env")["DATABASE_URL"]
    assert not (tmp_path / "postgres").exists()
