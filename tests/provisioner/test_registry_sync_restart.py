"""The registry compile across a NATS outage (issue 18, the review of writes that land after their
caller gave up), on a real nats-server stopped and started again on the same port and store.

A compile whose write waits in nats-py's reconnect buffer gives up on it (a timeout), and the
write is stored all the same once the connection is back. The next compile must not take the
value this seat wrote itself for someone else's hand."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from provisioner.seat import registry_sync
from provisioner.seat.buckets import ensure_buckets
from provisioner.seat.registry_sync import Compiler
from registry.contract import Bucket, buckets
from registry.errors import BusError
from registry.wire import BucketConfig, Bus, BusOptions, KvItem, connect, current_snapshot, get_direct, update
from tests.helpers import RestartableNats, in_own_task, restartable_nats

BOUND = 20.0
OTHER_CONFIG = """
[domains.config]
module = "mesh-config"
kinds = ["config"]
bucket = "mesh-config_other"
key = "<name>"
"""


@dataclass
class OnNats:
    server: RestartableNats
    bus: Bus


@pytest.fixture
async def on_nats(tmp_path: Path) -> AsyncIterator[OnNats]:
    async with in_own_task(restartable_bus(tmp_path)) as running:
        yield running


@asynccontextmanager
async def restartable_bus(tmp_path: Path) -> AsyncIterator[OnNats]:
    async with restartable_nats(tmp_path / "nats") as server:
        options = BusOptions(
            servers=(server.url,),
            name="seat",
            reconnect_wait=timedelta(seconds=0.1),
            request_timeout=timedelta(seconds=0.5),
        )
        async with connect(options) as bus:
            await ensure_buckets(bus, BucketConfig())
            yield OnNats(server, bus)


async def config_entry(bus: Bus) -> bytes:
    found = await get_direct(bus, buckets.REGISTRY, "config")
    assert found is not None
    return found.value


async def compile_given_up_then_stored(on_nats: OnNats, compiler: Compiler, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile that rewrites `config` while NATS goes away between its read and its write: it
    gives up on the write (a timeout), which is stored once the connection is back."""
    bus, server = on_nats.bus, on_nats.server
    before = await config_entry(bus)
    seen = bus.reconnects

    async def read_then_lose_nats(
        bus: Bus, bucket: Bucket, filters: Sequence[str] = (">",), **kwargs: bool
    ) -> list[KvItem]:
        items = await current_snapshot(bus, bucket, filters, **kwargs)
        await server.stop()
        with anyio.fail_after(BOUND):
            while bus.connected:
                await anyio.sleep(0.01)  # until nats-py knows it is away: the write waits in its buffer
        return items

    assert compiler.domains_file is not None
    compiler.domains_file.write_text(OTHER_CONFIG)  # the operator's edit: the next compile rewrites `config`
    with monkeypatch.context() as patched:
        patched.setattr(registry_sync, "current_snapshot", read_then_lose_nats)
        with pytest.raises(BusError, match="config"):
            await compiler.compile()
    await server.start()
    with anyio.fail_after(BOUND):
        await bus.reconnected(seen)
    await bus.flush()
    assert await config_entry(bus) != before, "the buffered write was not stored: nothing reproduced"


async def compiled_once(bus: Bus, tmp_path: Path) -> Compiler:
    domains = tmp_path / "domains.toml"
    domains.write_text("")
    compiler = Compiler(bus, domains)
    await compiler.compile()
    return compiler


def rewritten_by_someone_else(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().split(" were ")[0] for r in caplog.records if "by someone else" in r.getMessage()]


async def test_a_compile_whose_write_is_stored_after_it_gave_up_is_not_someone_elses(
    on_nats: OnNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compiler = await compiled_once(on_nats.bus, tmp_path)
    await compile_given_up_then_stored(on_nats, compiler, monkeypatch)
    with caplog.at_level(logging.INFO, logger="provisioner.seat.registry_sync"):
        changes = await compiler.compile()
    assert not changes
    assert rewritten_by_someone_else(caplog) == []


async def test_a_hand_edit_after_a_compile_given_up_on_is_still_someone_elses(
    on_nats: OnNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What a compile given up on may have written is allowed for its kinds, and nothing else."""
    compiler = await compiled_once(on_nats.bus, tmp_path)
    await compile_given_up_then_stored(on_nats, compiler, monkeypatch)
    port = await get_direct(on_nats.bus, buckets.REGISTRY, "port")
    assert port is not None
    await update(on_nats.bus, buckets.REGISTRY, "port", b'{"by":"hand"}', last=port.revision)
    with caplog.at_level(logging.WARNING, logger="provisioner.seat.registry_sync"):
        await compiler.compile()
    assert rewritten_by_someone_else(caplog) == ["registry kinds port"]
