"""A registry compile that gave up on its write, on a real nats-server paused and resumed.

A compile whose write the server is slow to acknowledge gives up on it (a timeout), and the write
is stored all the same once the server answers again, as one sent from nats-py's reconnect buffer
after an outage was. The next compile must not take the value this seat wrote itself for someone
else's hand."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.seat import registry_sync
from provisioner.seat.buckets import ensure_buckets
from provisioner.seat.registry_sync import Compiler
from registry.contract import Bucket, buckets
from registry.errors import BusError
from registry.wire import BucketConfig, Bus, KvItem, current_snapshot, get_direct, update
from tests.helpers import until
from tests.stalls import impatient_bus, paused

OTHER_CONFIG = """
[domains.config]
module = "mesh-config"
kinds = ["config"]
bucket = "mesh-config_other"
key = "<name>"
"""


async def config_entry(bus: Bus) -> bytes:
    found = await get_direct(bus, buckets.REGISTRY, "config")
    assert found is not None
    return found.value


async def compile_given_up_then_stored(
    server: LocalNats, bus: Bus, compiler: Compiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile that rewrites `config` while the server stalls between its read and its write: it
    gives up on the write (a timeout), which is stored once the server answers again (as nats-py's
    reconnect buffer sent one after an outage)."""
    before = await config_entry(bus)
    stalled = AsyncExitStack()

    async def read_then_stall(
        bus: Bus, bucket: Bucket, filters: Sequence[str] = (">",), **kwargs: bool
    ) -> list[KvItem]:
        items = await current_snapshot(bus, bucket, filters, **kwargs)
        await stalled.enter_async_context(paused(server, bus))
        return items

    assert compiler.domains_file is not None
    compiler.domains_file.write_text(OTHER_CONFIG)  # the operator's edit: the next compile rewrites `config`
    async with stalled:
        with monkeypatch.context() as patched:
            patched.setattr(registry_sync, "current_snapshot", read_then_stall)
            with pytest.raises(BusError, match="config"):
                await compiler.compile()

    async def stored() -> bool:
        return await config_entry(bus) != before

    # The resumed server answers the bus's flush once it has read the write; its stream stores it on
    # a goroutine of its own, a moment later on a loaded machine.
    assert await until(stored, 10), "the write given up on was not stored: nothing reproduced"


async def compiled_once(bus: Bus, tmp_path: Path) -> Compiler:
    domains = tmp_path / "domains.toml"
    domains.write_text("")
    compiler = Compiler(bus, domains)
    await compiler.compile()
    return compiler


def rewritten_by_someone_else(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().split(" were ")[0] for r in caplog.records if "by someone else" in r.getMessage()]


async def test_a_compile_whose_write_is_stored_after_it_gave_up_is_not_someone_elses(
    nats_server: LocalNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with impatient_bus(nats_server, buckets.SEAT) as bus:
        await ensure_buckets(bus, BucketConfig())
        compiler = await compiled_once(bus, tmp_path)
        await compile_given_up_then_stored(nats_server, bus, compiler, monkeypatch)
        with caplog.at_level(logging.INFO, logger="provisioner.seat.registry_sync"):
            changes = await compiler.compile()
    assert not changes
    assert rewritten_by_someone_else(caplog) == []


async def test_a_hand_edit_after_a_compile_given_up_on_is_still_someone_elses(
    nats_server: LocalNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What a compile given up on may have written is allowed for its kinds, and nothing else."""
    async with impatient_bus(nats_server, buckets.SEAT) as bus:
        await ensure_buckets(bus, BucketConfig())
        compiler = await compiled_once(bus, tmp_path)
        await compile_given_up_then_stored(nats_server, bus, compiler, monkeypatch)
        port = await get_direct(bus, buckets.REGISTRY, "port")
        assert port is not None
        await update(bus, buckets.REGISTRY, "port", b'{"by":"hand"}', last=port.revision)
        with caplog.at_level(logging.WARNING, logger="provisioner.seat.registry_sync"):
            await compiler.compile()
    assert rewritten_by_someone_else(caplog) == ["registry kinds port"]
