"""The development loop (`mesh_dev.loop`) around the server, the periodic compile, and JSON logs."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from mesh_dev.local_nats import LocalNats
from mesh_dev.loop import run_dev
from provisioner.seat.settings import ServerSettings
from registry.contract import buckets
from registry.runtime import configure_logging, event
from registry.wire import BusOptions, ask, connect
from tests.helpers import serving


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


async def test_the_registry_is_compiled_again_every_interval(
    nats_server: LocalNats, js: JetStreamContext, tmp_path: Path
) -> None:
    domains = tmp_path / "domains.toml"
    domains.write_text("")
    async with serving(nats_server.url, domains_file=domains, compile_interval=timedelta(milliseconds=50)):
        registry = await js.key_value(buckets.REGISTRY.name)
        assert await holds(registry, "consumers")  # compiled at start
        domains.write_text(DROP_CONSUMERS)
        with anyio.fail_after(5):  # the next compile deletes it; no event says when
            while await holds(registry, "consumers"):
                await anyio.sleep(0.02)


async def holds(kv: KeyValue, key: str) -> bool:
    try:
        await kv.get(key)
    except KeyNotFoundError:  # and KeyDeletedError, its subclass
        return False
    return True


def test_json_logs_are_one_object_per_line() -> None:
    stream = io.StringIO()
    configure_logging(log_format="json", level="INFO", stream=stream)
    try:
        logging.getLogger("provisioner.test").info("kind %s written", "config", extra=event(kind="config"))
    finally:
        configure_logging(level="WARNING")
    entry = json.loads(stream.getvalue())
    assert (entry["level"], entry["logger"], entry["message"]) == ("info", "provisioner.test", "kind config written")
    assert entry["kind"] == "config"


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    handlers = logging.getLogger().handlers[:]
    level = logging.getLogger().level
    yield None
    logging.getLogger().handlers[:] = handlers
    logging.getLogger().setLevel(level)
