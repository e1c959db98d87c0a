"""The registry bucket after start and restart."""

from __future__ import annotations

import json
from pathlib import Path

from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats
from provisioner.seat.buckets import ensure_bucket, ensure_buckets
from provisioner.seat.registry_sync import sync_registry
from registry.contract import KINDS, RegistryEntry, buckets
from registry.wire import BucketConfig, Bus, get_latest, snapshot
from tests.helpers import last_sequence, serving


async def registry_revisions(bus: Bus) -> dict[str, int]:
    return {item.key: item.revision for item in await snapshot(bus, buckets.REGISTRY)}


async def test_start_on_an_empty_server_writes_every_kind(server: LocalNats, bus: Bus) -> None:
    items = await snapshot(bus, buckets.REGISTRY)
    entries = {item.key: RegistryEntry.model_validate_json(item.value) for item in items}
    assert sorted(entries) == sorted(KINDS)
    for kind, entry in entries.items():
        assert entry.kind == kind
        assert entry.module
        if entry.answer.via == "bucket":
            assert entry.answer.bucket and entry.answer.key
    for kind in ("secret", "consumers"):
        value = json.loads(next(i.value for i in items if i.key == kind))
        assert value["answer"]["via"] == "verb"
        assert value["answer"]["subject"]
        assert "bucket" not in value["answer"]


async def test_start_makes_the_four_buckets_with_direct_get(server: LocalNats, js: JetStreamContext) -> None:
    for own in buckets.OWN:
        info = await js.stream_info(own.stream)
        assert info.config.allow_direct, own.name


async def test_restart_with_nothing_changed_writes_nothing(nats_server: LocalNats, bus: Bus) -> None:
    async with serving(nats_server.url):
        pass
    before = await last_sequence(bus, buckets.REGISTRY)
    async with serving(nats_server.url):
        pass
    assert await last_sequence(bus, buckets.REGISTRY) == before


async def test_restart_deletes_a_bogus_kind_and_keeps_the_other_revisions(
    nats_server: LocalNats, bus: Bus, js: JetStreamContext
) -> None:
    async with serving(nats_server.url):
        pass
    registry = await js.key_value(buckets.REGISTRY.name)
    await registry.put("bogus", b'{"kind":"bogus"}')
    revisions = await registry_revisions(bus)
    async with serving(nats_server.url):
        pass
    after = await registry_revisions(bus)
    assert "bogus" not in after
    gone = await get_latest(bus, buckets.REGISTRY, "bogus")
    assert gone is not None and gone.deleted
    del revisions["bogus"]
    assert after == revisions


async def test_a_domains_file_that_drops_a_kind_deletes_it(nats_server: LocalNats, bus: Bus, tmp_path: Path) -> None:
    async with serving(nats_server.url):
        pass
    domains = tmp_path / "domains.toml"
    domains.write_text('[domains.vault-consumers]\nmodule = "mesh-vault"\nkinds = []\nverb = "mesh-vault.consumers"\n')
    async with serving(nats_server.url, domains_file=domains):
        pass
    assert sorted(await registry_revisions(bus)) == sorted(set(KINDS) - {"consumers"})


async def test_a_second_compile_of_an_unchanged_catalogue_changes_nothing(bus: Bus) -> None:
    await ensure_buckets(bus, BucketConfig())
    first = await sync_registry(bus, domains_file=None)
    assert sorted(first.written) == sorted(KINDS)
    before = await last_sequence(bus, buckets.REGISTRY)
    assert not await sync_registry(bus, domains_file=None)
    assert await last_sequence(bus, buckets.REGISTRY) == before


async def test_an_existing_bucket_is_bound_not_recreated(bus: Bus, js: JetStreamContext) -> None:
    existing = await js.create_key_value(bucket=buckets.NEEDS.name, history=5)
    await existing.put("n1.m.config.x", b"{}")
    await ensure_bucket(bus, buckets.NEEDS, BucketConfig(history=1))
    info = await js.stream_info(buckets.NEEDS.stream)
    assert info.config.max_msgs_per_subject == 5
    assert (await existing.get("n1.m.config.x")).value == b"{}"
