"""Buckets that cannot be wiped or bent: the seat creates its buckets and each
provider's `_bound` bucket refusing rollups, with value and bucket limits, and reports an
existing weaker bucket loudly. Attacks are judged by the data: revision and content unchanged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from nats.js.errors import APIError

from mesh_dev.local_nats import LocalNats
from registry.contract import buckets
from registry.errors import SettingsError
from registry.wire import Bus, ask, get_latest, put
from tests.helpers import serving

KEYS = {"n1.shell=3Azsh.web": b'{"items":["a"]}', "n2.shell=3Azsh.web": b'{"items":["b"]}', "n2.x.y": b"{}"}


async def stored(bus: Bus, keys: list[str]) -> dict[str, tuple[int, bytes] | None]:
    """Each key's revision and content as the bucket holds it."""
    found = {key: await get_latest(bus, buckets.COLLECT, key) for key in keys}
    return {key: (item.revision, item.value) if item else None for key, item in found.items()}


async def test_a_put_with_a_rollup_header_is_refused_and_every_other_key_stays(
    server: LocalNats, bus: Bus, js: JetStreamContext
) -> None:
    for key, value in KEYS.items():
        await put(bus, buckets.COLLECT, key, value)
    before = await stored(bus, list(KEYS))
    with pytest.raises(APIError):
        await js.publish(buckets.COLLECT.subject("n1.shell=3Azsh.web"), b"{}", headers={"Nats-Rollup": "all"})
    assert await stored(bus, list(KEYS)) == before
    assert (await js.stream_info(buckets.COLLECT.stream)).state.messages == len(KEYS)


async def test_a_value_over_the_limit_is_refused(server: LocalNats, bus: Bus, js: JetStreamContext) -> None:
    with pytest.raises(APIError):
        await js.publish(buckets.NEEDS.subject("n1.web.config.big"), b"x" * (64 * 1024 + 1))
    assert await get_latest(bus, buckets.NEEDS, "n1.web.config.big") is None


async def test_each_configured_providers_bucket_is_made_like_the_seats_own(
    nats_server: LocalNats, js: JetStreamContext
) -> None:
    sizes = {"bucket_max_bytes": 8 * 1024 * 1024, "node_quota_bytes": 1024 * 1024}  # a quota inside the bucket
    async with serving(nats_server.url, providers=["postgres", "mysql"], **sizes):  # type: ignore[arg-type]
        for stream in ("KV_postgres_bound", "KV_mysql_bound", buckets.NEEDS.stream):
            config = (await js.stream_info(stream)).config
            assert (config.allow_rollup_hdrs, config.max_msg_size, config.max_bytes) == (False, 64 * 1024, 8 << 20)
            assert (config.allow_direct, config.deny_delete) == (True, True)


async def test_a_weaker_existing_bucket_is_reported_with_its_fix_and_the_seat_still_serves(
    nats_server: LocalNats, bus: Bus, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    await js.create_key_value(bucket=buckets.NEEDS.name)  # nats-py's defaults: rollups, no limits, no direct get
    with caplog.at_level(logging.ERROR, logger="provisioner.seat.buckets"):
        async with serving(nats_server.url):
            assert (await ask(bus, {"what": "needs"}))["entries"] == []
    reports = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(reports) == 1
    assert buckets.NEEDS.name in reports[0]
    for difference in ("rollup headers allowed", "no value size limit", "no bucket size limit", "no direct get"):
        assert difference in reports[0]
    fix = "nats stream edit KV_mesh-provisioner_needs --no-allow-rollup --max-msg-size 65536 --max-bytes 1073741824"
    assert f"{fix} --allow-direct`" in reports[0]


async def test_a_bucket_as_the_seat_makes_it_is_not_reported(
    nats_server: LocalNats, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(nats_server.url):
        pass
    with caplog.at_level(logging.ERROR, logger="provisioner.seat.buckets"):
        async with serving(nats_server.url):
            pass
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_value_limit_not_under_max_payload_is_a_settings_error(nats_server: LocalNats, tmp_path: Path) -> None:
    with pytest.raises(BaseExceptionGroup) as failed:
        async with serving(nats_server.url, bucket_max_value_size=1024 * 1024):
            pass
    assert failed.group_contains(SettingsError, match="bucket_max_value_size")
