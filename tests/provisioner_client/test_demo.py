"""The demo against a real nats-server: stand-ins, the example manifests, a printed summary."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mesh_dev.demo import run_demo
from mesh_dev.local_nats import LocalNats
from registry.bus import Bus


async def test_the_demo_applies_every_example_and_says_where_the_files_are(
    provisioned: Bus, nats_server: LocalNats, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(15):
            await tg.start(run_demo, nats_server.url, tmp_path)
        tg.cancel_scope.cancel()
    out = capsys.readouterr().out
    assert "node-1.app.secret.db-password  ${secret:db-password}" in out
    for module in ("app", "postgres", "tools"):
        assert f"{module}: applied -> {tmp_path / 'env' / module}.env (written)" in out
    assert f"env files are in {tmp_path / 'env'}" in out
    assert "dev-only-s3cret-password" not in out
