"""Every bucket the seat makes republishes its writes under `$KVR.<bucket>.` (where the parties'
live updates are imported from), the writing domains' buckets included, which the seat makes as
it makes its own; an existing bucket that does not republish is made to, once, and an unchanged
one costs no write."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import ASSIGNMENTS, CONFIG
from provisioner.seat.buckets import ensure_bucket, weaknesses
from registry.contract import Bucket, KeyShape, buckets
from registry.wire import BucketConfig, Bus, put
from tests.helpers import serving

SITE_CONFIG = Bucket("site-config_values", KeyShape("<name>"))
DOMAINS = f"""
[domains.config]
module = "site-config"
kinds = ["config"]
bucket = "{SITE_CONFIG.name}"
key = "<name>"
"""


def republishing(bucket: Bucket) -> dict[str, str]:
    return {"src": bucket.subject(">"), "dest": bucket.live_subject(">")}


async def test_the_seat_makes_each_writing_domains_bucket_as_it_makes_its_own(
    nats_server: LocalNats, bus: Bus, tmp_path: Path
) -> None:
    domains = tmp_path / "domains.toml"
    domains.write_text(DOMAINS)
    async with serving(nats_server.url, domains_file=domains):
        pass
    for bucket in (SITE_CONFIG, ASSIGNMENTS, buckets.REGISTRY, buckets.NEEDS, buckets.LEASES):
        config = await bus.jetstream(bucket.info_api, operation="info")
        assert weaknesses(config["config"], BucketConfig()) == [], bucket.name
        assert config["config"]["republish"] == republishing(bucket), bucket.name
    names = await bus.jetstream("STREAM.NAMES", {}, operation="names")
    assert CONFIG.stream not in names["streams"], "the domains file moved the config domain's bucket"


async def test_an_existing_bucket_is_made_to_republish_its_writes_once_then_left_alone(
    bus: Bus, nc: Client, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    await js.create_key_value(bucket=CONFIG.name, direct=True, history=3)  # as `nats kv add` makes it
    updates: list[Msg] = []

    async def on_update(message: Msg) -> None:
        updates.append(message)

    await nc.subscribe(f"$JS.API.{CONFIG.update_api}", cb=on_update)
    live = await nc.subscribe(CONFIG.live_subject(">"))
    await nc.flush()
    with caplog.at_level("INFO", logger="provisioner.seat.buckets"):
        await ensure_bucket(bus, CONFIG, BucketConfig())
        await ensure_bucket(bus, CONFIG, BucketConfig())
    await put(bus, CONFIG, "log-level", b'"info"')
    republished = await live.next_msg(timeout=1)
    await nc.flush()

    assert len(updates) == 1, "one stream update, then none: it already republished"
    config = (await js.stream_info(CONFIG.stream)).config
    assert config.republish is not None and (config.republish.src, config.republish.dest) == (
        CONFIG.subject(">"),
        CONFIG.live_subject(">"),
    )
    assert config.max_msgs_per_subject == 3, "the rest of the configuration is kept"
    assert (republished.subject, republished.data) == (CONFIG.live_subject("log-level"), b'"info"')
    assert f"bucket {CONFIG.name} now republishes its writes under {CONFIG.live_subject('>')}" in caplog.text
