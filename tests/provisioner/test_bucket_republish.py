"""A bucket some party follows live republishes its writes under `$KVR.<bucket>.` (where the
parties' live updates are imported from), the writing domains' buckets included, which the seat
makes as it makes its own; a bucket nobody follows (applied, collect, leases) does not, for
republishing costs nats-server a message per write. An existing bucket is brought in line both
ways, once, and an unchanged one costs no write."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import ASSIGNMENTS, BOUND_BUCKET, CONFIG
from provisioner.seat.buckets import ensure_bucket, seat_buckets, weaknesses
from registry.access import followed_live
from registry.contract import Bucket, KeyShape, buckets, fleet, load_catalogue
from registry.wire import BucketConfig, Bus, create_bucket, put
from tests.helpers import serving, until

SITE_CONFIG = Bucket("site-config_values", KeyShape("<name>"))
DOMAINS = f"""
[domains.config]
module = "site-config"
kinds = ["config"]
bucket = "{SITE_CONFIG.name}"
key = "<name>"
"""
FOLLOWED = (SITE_CONFIG, ASSIGNMENTS, BOUND_BUCKET, buckets.REGISTRY, buckets.NEEDS)
NOBODY_FOLLOWS = (buckets.APPLIED, buckets.COLLECT, buckets.LEASES)


def republishing(bucket: Bucket) -> dict[str, str]:
    return {"src": bucket.subject(">"), "dest": bucket.live_subject(">")}


async def republish_of(bus: Bus, bucket: Bucket) -> object:
    config = await bus.jetstream(bucket.info_api, operation="info")
    assert weaknesses(config["config"], BucketConfig()) == [], bucket.name
    return config["config"].get("republish")


async def updates_of(nc: Client, bucket: Bucket) -> list[Msg]:
    """The stream updates sent for `bucket` from now on."""
    updates: list[Msg] = []

    async def on_update(message: Msg) -> None:
        updates.append(message)

    await nc.subscribe(f"$JS.API.{bucket.update_api}", cb=on_update)
    await nc.flush()
    return updates


def test_the_buckets_followed_live_are_the_catalogues_and_the_registry_and_needs_alone() -> None:
    live = followed_live(load_catalogue())
    assert [b.name for b in seat_buckets(["postgres"]) if b in live] == [
        buckets.REGISTRY.name,
        buckets.NEEDS.name,
        fleet.FLEET.name,  # nodes follow the rollouts' claims and holds, and the gone marks
        BOUND_BUCKET.name,
        "mesh-config_values",
        ASSIGNMENTS.name,
    ]
    assert not any(bucket in live for bucket in NOBODY_FOLLOWS)


async def test_the_seat_republishes_the_writes_of_what_is_followed_live_and_of_nothing_else(
    nats_server: LocalNats, bus: Bus, tmp_path: Path
) -> None:
    domains = tmp_path / "domains.toml"
    domains.write_text(DOMAINS)
    async with serving(nats_server.url, domains_file=domains, providers=["postgres"]):
        pass
    for bucket in FOLLOWED:
        assert await republish_of(bus, bucket) == republishing(bucket), bucket.name
    for bucket in NOBODY_FOLLOWS:
        assert await republish_of(bus, bucket) is None, bucket.name
    names = await bus.jetstream("STREAM.NAMES", {}, operation="names")
    assert CONFIG.stream not in names["streams"], "the domains file moved the config domain's bucket"


async def test_an_existing_bucket_is_made_to_republish_its_writes_once_then_left_alone(
    bus: Bus, nc: Client, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    await js.create_key_value(bucket=CONFIG.name, direct=True, history=3)  # as `nats kv add` makes it
    updates = await updates_of(nc, CONFIG)
    live = await nc.subscribe(CONFIG.live_subject(">"))
    with caplog.at_level("INFO", logger="provisioner.seat.buckets"):
        await ensure_bucket(bus, CONFIG, BucketConfig())
        await ensure_bucket(bus, CONFIG, BucketConfig())
    await put(bus, CONFIG, "log-level", b'"info"')
    republished = await live.next_msg(timeout=5)
    await until(lambda: bool(updates), 5)  # the listener's copy may come late (tests/registry/wire/test_kv.py)
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


@pytest.mark.parametrize("bucket", NOBODY_FOLLOWS, ids=lambda b: b.name)
async def test_a_bucket_nobody_follows_stops_republishing_once_then_is_left_alone(
    bus: Bus, nc: Client, js: JetStreamContext, caplog: pytest.LogCaptureFixture, bucket: Bucket
) -> None:
    await create_bucket(bus, bucket, BucketConfig(history=2), live=True)  # as the seat made every bucket before
    updates = await updates_of(nc, bucket)
    live = await nc.subscribe(bucket.live_subject(">"))
    with caplog.at_level("INFO", logger="provisioner.seat.buckets"):
        await ensure_bucket(bus, bucket, BucketConfig())
        await ensure_bucket(bus, bucket, BucketConfig())
    await put(bus, bucket, "n1.web", b"{}")
    await until(lambda: bool(updates), 5)  # the listener's copy may come late (tests/registry/wire/test_kv.py)
    await nc.flush()

    assert len(updates) == 1, "one stream update, then none: it no longer republished"
    config = (await js.stream_info(bucket.stream)).config
    assert config.republish is None
    assert config.max_msgs_per_subject == 2, "the rest of the configuration is kept"
    assert live.pending_msgs == 0, "a write was republished"
    assert f"bucket {bucket.name} no longer republishes its writes: no party follows it live" in caplog.text
