"""The site's copies as the seat at a site makes and checks them (`provisioner.seat.site_copies`),
on one nats-server standing for the site (no hub behind it: a copy is made whether or not its
origin answers; a stand-in answers the rewinds of the hub's consumers as the hub would). The copies
at work, across a real link, are in tests/sites/test_site_seat.py and tests/sites/test_site_resume.py."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from provisioner.seat.site_copies import consumer_resets, ensure_site_copies, site_copies
from provisioner.seat.site_purges import follow_purges, record_key, record_purge
from registry.access import SiteFileEntry
from registry.access.sites.file import LinkEntry, PermitEntry
from registry.contract import Bucket, buckets, fleet
from registry.wire import BucketConfig, Bus, Message, bucket_config, create_bucket, get_direct, put
from tests.helpers import wait_for

HUB = "hub"
BOUND = "postgres_bound"


def site(*nodes: str, permitted: bool = True) -> SiteFileEntry:
    """Site `site1` of `nodes`, its data link permitting every copy (or, not `permitted`, none)."""
    bare = SiteFileEntry(name="site1", domain="site1", nodes=nodes, seat_key="U")
    subjects = [s for copy in site_copies(bare, ["postgres"]) for s in consumer_resets(copy, HUB)]
    publish = tuple(PermitEntry(subject=s) for s in subjects) if permitted else ()
    link = LinkEntry(account="MESH", label="leaf-site1-data", user_key="U", publish=publish)
    return bare.model_copy(update={"links": (link,)})


async def ensure(bus: Bus, entry: SiteFileEntry) -> None:
    await ensure_site_copies(bus, entry, hub_domain=HUB, config=BucketConfig(), providers=["postgres"])


async def config_of(bus: Bus, name: str) -> dict[str, object]:
    found = await bucket_config(bus, buckets.Bucket(name, buckets.NEEDS.shape))
    assert found is not None
    return found


@pytest.fixture(autouse=True)
async def rewinds(bus: Bus) -> AsyncIterator[list[tuple[str, bytes]]]:
    """A stand-in for the hub answering the seat's rewinds of its consumers: each (subject, body)."""
    heard: list[tuple[str, bytes]] = []

    async def answer(msg: Message) -> None:
        if msg.data:  # a copy's own reset has no body; the seat's rewind names the sequence
            heard.append((msg.subject, msg.data))
            await bus.publish(msg.reply, b'{"type": "io.nats.jetstream.api.v1.consumer_reset_response"}')

    subscription = await bus.subscribe(f"$JS.{HUB}.API.CONSUMER.RESET.>", answer)
    yield heard
    await subscription.unsubscribe()


async def test_a_copy_made_anew_has_its_consumer_rewound_first(bus: Bus, rewinds: list[tuple[str, bytes]]) -> None:
    """Its consumer at the hub may have been acknowledged by a copy deleted since: the new copy
    must take the whole stream, not what came after."""
    await ensure(bus, site("n1"))
    subjects = {subject for subject, _ in rewinds}
    assert "$JS.hub.API.CONSUMER.RESET.KV_mesh-provisioner_registry.site-site1" in subjects
    assert "$JS.hub.API.CONSUMER.RESET.KV_postgres_bound.site-site1-n1" in subjects
    assert {json.loads(body)["seq"] for _, body in rewinds} == {1}
    rewinds.clear()
    await ensure(bus, site("n1"))  # the copies there: nothing rewound
    assert rewinds == []


async def test_each_copy_is_made_as_fixed(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provisioner.seat.site_copies")
    await ensure(bus, site("n1"))
    registry = await config_of(bus, buckets.REGISTRY.name)
    mirror: dict[str, Any] = registry["mirror"]  # type: ignore[assignment]
    assert (mirror["name"], mirror["external"]["api"]) == (buckets.REGISTRY.stream, "$JS.hub.API")
    # it takes the hub's durable consumer the hub's seat made for the site (ADR-58)
    assert mirror["consumer"] == {"name": "site-site1", "deliver_subject": "$JS.M.site1.KV_mesh-provisioner_registry"}
    assert registry["mirror_direct"] and registry["allow_direct"] and registry["deny_delete"]
    assert not registry.get("allow_rollup_hdrs") and not registry.get("subjects")
    assert registry["republish"]["dest"] == "$KVR.mesh-provisioner_registry.>"  # type: ignore[index]
    assert "republish" not in await config_of(bus, buckets.NEEDS.name)  # nobody at a site follows it
    bound = await config_of(bus, BOUND)
    sources: list[dict[str, Any]] = bound["sources"]  # type: ignore[assignment]
    assert [s["consumer"]["name"] for s in sources] == ["site-site1-n1"]  # the hub's, filtered to n1's keys
    assert not [s for s in sources if s.get("filter_subject")]
    assert bound["republish"]["src"] == "$KV.postgres_bound.>"  # type: ignore[index]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    caplog.clear()
    await ensure(bus, site("n1"))  # again: nothing to say, nothing changed
    assert not caplog.records


def test_the_collect_mirror_republishes_only_where_a_collection_is_shared(tmp_path: Path) -> None:
    """Every node at the site then follows the other nodes' contributions to it, as at the hub."""
    (shared := tmp_path / "domains.toml").write_text('[collections]\nshared = ["keys"]\n')
    live = {copy.bucket.name: copy.live for copy in site_copies(site("n1"), ["postgres"], shared)}
    assert live[buckets.COLLECT.name] and not live[buckets.NEEDS.name] and not live[buckets.APPLIED.name]
    assert not {copy.bucket.name: copy.live for copy in site_copies(site("n1"), ["postgres"])}[buckets.COLLECT.name]


async def test_a_copy_that_differs_is_reported_and_left_as_it_is(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    await create_bucket(bus, buckets.REGISTRY, BucketConfig())  # a bucket of its own, not a mirror
    before = await config_of(bus, buckets.REGISTRY.name)
    await ensure(bus, site("n1"))
    assert await config_of(bus, buckets.REGISTRY.name) == before
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "KV_mesh-provisioner_registry differs" in errors[0]
    assert "takes writes of its own" in errors[0] and "not a mirror of the hub's" in errors[0]


async def test_the_sources_and_republishing_follow_the_sites_nodes(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    await ensure(bus, site("n1"))
    bound = await config_of(bus, BOUND)
    await bus.jetstream(
        f"STREAM.UPDATE.KV_{BOUND}", {k: v for k, v in bound.items() if k != "republish"}, operation="t"
    )
    caplog.set_level(logging.INFO, logger="provisioner.seat.site_copies")
    await ensure(bus, site("n1", "n2"))  # n2 moved to the site
    bound = await config_of(bus, BOUND)
    taken = sorted(s["consumer"]["deliver_subject"] for s in bound["sources"])  # type: ignore[attr-defined]
    assert taken == ["$JS.S.site1.KV_postgres_bound.n1", "$JS.S.site1.KV_postgres_bound.n2"]
    assert bound["republish"]["dest"] == "$KVR.postgres_bound.>"  # type: ignore[index]
    said = [r.getMessage() for r in caplog.records]
    assert any(
        "added KV_postgres_bound" in line and "site-site1-n2" in line and "removed none" in line for line in said
    )
    assert any("now republishes" in line for line in said)


async def test_a_copy_the_link_does_not_carry_is_an_error(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    await ensure(bus, site("n1", permitted=False))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("$JS.hub.API.CONSUMER.RESET.KV_mesh-provisioner_registry.site-site1" in line for line in errors)
    assert any("$JS.hub.API.CONSUMER.RESET.KV_postgres_bound.site-site1-n1" in line for line in errors)


async def test_a_purge_record_purges_exactly_up_to_its_revision(bus: Bus) -> None:
    """A record standing when the site's seat starts is applied: the node's messages up to the
    revision the hub purged go, a later write of the node and other nodes' keys stay."""
    config = BucketConfig()
    for bucket in (buckets.NEEDS, buckets.LEASES):
        await create_bucket(bus, bucket, config)
    first = await put(bus, buckets.NEEDS, "n1.a.secret.x", b"{}")
    upto = await put(bus, buckets.NEEDS, "n1.b.secret.x", b"{}")
    await put(bus, buckets.NEEDS, "n2.a.secret.x", b"{}")
    later = await put(bus, buckets.NEEDS, "n1.c.secret.x", b"{}")
    assert first < upto < later
    await record_purge(bus, buckets.NEEDS, "n1", upto)
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(follow_purges, bus, (buckets.NEEDS,)))
        await wait_for(partial(_gone, bus, buckets.NEEDS, "n1.b.secret.x"), "n1's keys purged up to the record")
        tasks.cancel_scope.cancel()
    assert await get_direct(bus, buckets.NEEDS, "n1.a.secret.x") is None
    assert await get_direct(bus, buckets.NEEDS, "n1.c.secret.x") is not None
    assert await get_direct(bus, buckets.NEEDS, "n2.a.secret.x") is not None


async def test_a_purge_record_is_applied_again_for_what_was_in_flight(bus: Bus, nc: Client) -> None:
    """A node's message on its way across the link when the hub purged may reach the site's mirror
    after the record: the record is purged again a while later (here 0.2 s), and only then."""
    config = BucketConfig()
    for bucket in (buckets.NEEDS, buckets.LEASES):
        await create_bucket(bus, bucket, config)
    asked: list[bytes] = []

    async def heard(msg: Msg) -> None:
        asked.append(msg.data)

    await nc.subscribe(f"$JS.API.{buckets.NEEDS.purge_api}", cb=heard)
    await nc.flush()
    await record_purge(bus, buckets.NEEDS, "n1", 7)
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(follow_purges, bus, (buckets.NEEDS,), again_after=0.2))
        await wait_for(lambda: len(asked) >= 2, "the record applied twice")
        # the barrier: n3's record, read after n1's second time, is applied again after any third
        # time of n1's would be (each once more after the same delay, on the same clock)
        await record_purge(bus, buckets.NEEDS, "n3", 7)
        await wait_for(lambda: [json.loads(b) for b in asked].count(_purge_of("n3")) >= 2, "n3's applied twice")
        tasks.cancel_scope.cancel()
    assert [json.loads(body) for body in asked] == [_purge_of("n1")] * 2 + [_purge_of("n3")] * 2


def _purge_of(node: str, upto: int = 7) -> dict[str, Any]:
    """The purge asked of the needs for `node`'s keys up to `upto`."""
    return {"filter": buckets.NEEDS.subject(f"{node}.>"), "seq": upto + 1}


async def test_a_purge_record_purges_only_the_node_its_key_names(bus: Bus, nc: Client) -> None:
    """What a record purges is the node its key names: a value that says a wider filter is not
    one the hub writes, and is ignored; every key stays."""
    config = BucketConfig()
    for bucket in (buckets.NEEDS, buckets.LEASES):
        await create_bucket(bus, bucket, config)
    upto = await put(bus, buckets.NEEDS, "n1.a.secret.x", b"{}")
    await put(bus, buckets.NEEDS, "n2.a.secret.x", b"{}")
    wider = json.dumps({"bucket": buckets.NEEDS.name, "filter": ">", "upto": upto + 1}).encode()
    await put(bus, buckets.LEASES, record_key(buckets.NEEDS, "n1"), wider)
    asked: list[bytes] = []

    async def heard(msg: Msg) -> None:
        asked.append(msg.data)

    await nc.subscribe(f"$JS.API.{buckets.NEEDS.purge_api}", cb=heard)
    await nc.flush()
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(follow_purges, bus, (buckets.NEEDS,)))
        await record_purge(bus, buckets.NEEDS, "n3", 7)  # the barrier: records are applied in order
        await wait_for(lambda: bool(asked), "n3's record applied")
        tasks.cancel_scope.cancel()
    assert [json.loads(body)["filter"] for body in asked] == [buckets.NEEDS.subject("n3.>")], "the wider one ignored"
    assert await get_direct(bus, buckets.NEEDS, "n1.a.secret.x") is not None
    assert await get_direct(bus, buckets.NEEDS, "n2.a.secret.x") is not None


async def test_a_purge_record_of_the_fleet_purges_the_nodes_claims_alone(bus: Bus) -> None:
    """In the fleet a node's keys are its claims (`claim.*.<node>`): a record of n1's purge takes
    n1's claims of every module, and leaves n2's claims and the holds."""
    config = BucketConfig()
    for bucket in (fleet.FLEET, buckets.LEASES):
        await create_bucket(bus, bucket, config)
    await put(bus, fleet.FLEET, fleet.claim_key("a", "n1"), b"{}")
    upto = await put(bus, fleet.FLEET, fleet.claim_key("b", "n1"), b"{}")
    await put(bus, fleet.FLEET, fleet.claim_key("a", "n2"), b"{}")
    await put(bus, fleet.FLEET, fleet.hold_key("a"), b"{}")
    await record_purge(bus, fleet.FLEET, "n1", upto)
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(follow_purges, bus, (fleet.FLEET,)))
        await wait_for(partial(_gone, bus, fleet.FLEET, fleet.claim_key("b", "n1")), "n1's claims purged")
        tasks.cancel_scope.cancel()
    assert await get_direct(bus, fleet.FLEET, fleet.claim_key("a", "n1")) is None
    assert await get_direct(bus, fleet.FLEET, fleet.claim_key("a", "n2")) is not None
    assert await get_direct(bus, fleet.FLEET, fleet.hold_key("a")) is not None


async def _gone(bus: Bus, bucket: Bucket, key: str) -> bool:
    return await get_direct(bus, bucket, key) is None
