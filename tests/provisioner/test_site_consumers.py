"""The hub's durable consumers the sites' copies take (`provisioner.seat.site_consumers`), made by
the hub's seat on one nats-server standing for the hub (no site behind it: a consumer is made
whether or not its copy listens). The consumers at work, across a cut link, are in
tests/sites/test_site_resume.py."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest

from provisioner.seat.buckets import ensure_buckets
from provisioner.seat.site_consumers import ensure_site_consumers, follow_sites_file
from registry.access import SiteFileEntry, SitesFile
from registry.access.sites.file import HubFileEntry
from registry.contract import buckets
from registry.wire import BucketConfig, Bus
from tests.helpers import WITHIN, logged, wait_for

BOUND = "KV_postgres_bound"


def sites(**nodes: tuple[str, ...]) -> SitesFile:
    entries = tuple(SiteFileEntry(name=name, domain=name, nodes=of, seat_key="U") for name, of in nodes.items())
    return SitesFile(version=1, hub=HubFileEntry(), sites=entries)


async def names(bus: Bus, stream: str) -> list[str]:
    answer = await bus.jetstream(f"CONSUMER.NAMES.{stream}", {}, operation="names")
    return sorted(answer.get("consumers") or [])


async def info(bus: Bus, stream: str, name: str) -> dict[str, object]:
    answer = await bus.jetstream(f"CONSUMER.INFO.{stream}.{name}", operation="info")
    config: dict[str, object] = answer["config"]
    return config


async def test_each_sites_copies_get_their_consumers_once(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provisioner.seat.site_consumers")
    await ensure_buckets(bus, BucketConfig(), ["postgres"])
    await ensure_site_consumers(bus, sites(a=("n1",), b=("n2", "n3")), providers=["postgres"])
    assert await names(bus, buckets.REGISTRY.stream) == ["site-a", "site-b"]
    assert await names(bus, BOUND) == ["site-a-n1", "site-b-n2", "site-b-n3"]
    mirror = await info(bus, buckets.REGISTRY.stream, "site-a")
    assert mirror["deliver_subject"] == "$JS.M.a.KV_mesh-provisioner_registry"
    assert (mirror["ack_policy"], mirror["flow_control"]) == ("flow_control", True)
    assert not mirror.get("filter_subject")
    source = await info(bus, BOUND, "site-b-n3")
    assert (source["filter_subject"], source["deliver_subject"]) == (
        "$KV.postgres_bound.n3.>",
        "$JS.S.b.KV_postgres_bound.n3",
    )

    caplog.clear()
    await ensure_site_consumers(bus, sites(a=("n1",), b=("n2", "n3")), providers=["postgres"])
    assert not caplog.records  # again: nothing to do, nothing said


async def test_a_site_removed_loses_its_consumers_and_no_other_is_touched(bus: Bus) -> None:
    await ensure_buckets(bus, BucketConfig(), ["postgres"])
    await ensure_site_consumers(bus, sites(a=("n1",), b=("n2",)), providers=["postgres"])
    theirs = {"stream_name": BOUND, "config": {"durable_name": "someone-else", "ack_policy": "explicit"}}
    await bus.jetstream(f"CONSUMER.CREATE.{BOUND}.someone-else", theirs, operation="another consumer")
    await ensure_site_consumers(bus, sites(a=("n1", "n2")), providers=["postgres"])  # b gone, n2 moved to a
    assert await names(bus, buckets.REGISTRY.stream) == ["site-a"]
    assert await names(bus, BOUND) == ["site-a-n1", "site-a-n2", "someone-else"]


async def test_a_site_added_to_the_file_gets_its_consumers_without_a_restart(bus: Bus, tmp_path: Path) -> None:
    """The hub's seat reads sites.json again (`follow_sites_file`): a site added gets its
    consumers, one removed loses them; a file that is no sites.json leaves them as they are."""
    await ensure_buckets(bus, BucketConfig(), ["postgres"])
    path = tmp_path / "sites.json"
    path.write_text(sites(a=("n1",)).model_dump_json())
    await ensure_site_consumers(bus, sites(a=("n1",)), providers=["postgres"])
    async with anyio.create_task_group() as tasks:
        follow = partial(follow_sites_file, bus, path, every=timedelta(milliseconds=50), providers=["postgres"])
        await tasks.start(follow)
        path.write_text(sites(a=("n1",), b=("n2",)).model_dump_json())
        await until_named(lambda: names(bus, BOUND), ["site-a-n1", "site-b-n2"])
        with logged("the sites' consumers are left as they were") as refused:
            path.write_text("{not json")
            await refused.wait(WITHIN)  # the barrier: the follower has read it, and done what it does
        assert await names(bus, BOUND) == ["site-a-n1", "site-b-n2"]  # left as they were
        path.write_text(sites(b=("n2",)).model_dump_json())
        await until_named(lambda: names(bus, BOUND), ["site-b-n2"])
        tasks.cancel_scope.cancel()


async def until_named(read: Callable[[], Awaitable[list[str]]], wanted: list[str]) -> None:
    async def named() -> bool:
        return await read() == wanted

    await wait_for(named, f"the consumers {wanted}")
