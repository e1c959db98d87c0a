"""`mesh-provisioner dev`, the periodic compile, and JSON logs."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from provisioner.dev import run_dev
from provisioner.query import ask
from provisioner.settings import ServerSettings
from registry import buckets
from registry.bus import Bus, BusOptions, connect
from registry.local_nats import LocalNats
from registry.logs import configure_logging
from tests.provisioner.conftest import bucket, serving


async def test_dev_starts_nats_and_the_server_then_its_participants(tmp_path: Path) -> None:
    stop = anyio.Event()
    answers: list[dict[str, object]] = []
    cancelled = anyio.Event()

    async def asker(url: str) -> None:
        async with connect(BusOptions(servers=(url,), name="participant")) as bus:
            answers.append(await ask(bus, {}))
        stop.set()

    async def lingerer(url: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    out = io.StringIO()
    with anyio.fail_after(20):
        await run_dev(
            state_dir=tmp_path / "state", settings=ServerSettings(), stop=stop, participants=[asker, lingerer], out=out
        )
    assert answers[0]["total"] == {"entries": 13, "malformed": 0}
    assert cancelled.is_set()
    assert "mesh-provisioner query" in out.getvalue()
    assert (tmp_path / "state" / "nats" / "jetstream").is_dir()


DROP_CONSUMERS = '[domains.vault-consumers]\nmodule = "mesh-vault"\nkinds = []\nverb = "mesh-vault.consumers"\n'


async def test_the_registry_is_compiled_again_every_interval(nats_server: LocalNats, bus: Bus, tmp_path: Path) -> None:
    domains = tmp_path / "domains.toml"
    domains.write_text("")
    async with serving(nats_server.url, domains_file=domains, compile_interval=timedelta(milliseconds=50)):
        watcher = await (await bucket(bus, buckets.REGISTRY)).watch("consumers", inactive_threshold=5.0)
        assert (await watcher.updates(timeout=5)) is not None  # its current value
        domains.write_text(DROP_CONSUMERS)
        with anyio.fail_after(5):
            update = await watcher.updates(timeout=5)
            while update is None or update.operation is None:
                update = await watcher.updates(timeout=5)
        await watcher.stop()
    assert update.operation == "DEL"


def test_json_logs_are_one_object_per_line() -> None:
    stream = io.StringIO()
    configure_logging(json_lines=True, level="INFO", stream=stream)
    try:
        logging.getLogger("provisioner.test").info("kind %s written", "config")
    finally:
        configure_logging(level="WARNING")
    event = json.loads(stream.getvalue())
    assert (event["level"], event["logger"], event["message"]) == ("info", "provisioner.test", "kind config written")


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    handlers = logging.getLogger().handlers[:]
    level = logging.getLogger().level
    yield None
    logging.getLogger().handlers[:] = handlers
    logging.getLogger().setLevel(level)
