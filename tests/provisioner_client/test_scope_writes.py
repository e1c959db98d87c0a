"""A node's own key that moved between its listing and the node's write (a site's cut link: a
write given up on, stored after all) is written over, not a failed reconcile: a failed one had run
its change actions already, and the next ran them again (tests/sites/test_site_client.py saw it twice)."""

from __future__ import annotations

from provisioner_client.resolving.scope import NodeScope
from registry.contract import buckets
from registry.wire import BucketConfig, Bus, KvItem, create_bucket, get_latest, put


async def test_an_own_key_stored_again_after_its_listing_is_written_over(bus: Bus) -> None:
    await create_bucket(bus, buckets.APPLIED, BucketConfig())
    listed_at = await put(bus, buckets.APPLIED, "n1.app", b'{"v":1}')
    await put(bus, buckets.APPLIED, "n1.app", b'{"v":"given up on, stored after all"}')
    listed = [KvItem("n1.app", b'{"v":1}', listed_at)]
    changes = await NodeScope("n1").converge(bus, buckets.APPLIED, listed, {"n1.app": b'{"v":2}'})
    assert changes.written == ["n1.app"]
    stored = await get_latest(bus, buckets.APPLIED, "n1.app")
    assert stored is not None and stored.value == b'{"v":2}'


async def test_an_own_key_that_moved_to_the_value_wanted_is_not_written_again(bus: Bus) -> None:
    await create_bucket(bus, buckets.APPLIED, BucketConfig())
    listed_at = await put(bus, buckets.APPLIED, "n1.app", b'{"v":1}')
    now = await put(bus, buckets.APPLIED, "n1.app", b'{"v":2}')
    listed = [KvItem("n1.app", b'{"v":1}', listed_at)]
    changes = await NodeScope("n1").converge(bus, buckets.APPLIED, listed, {"n1.app": b'{"v":2}'})
    assert changes.written == []
    stored = await get_latest(bus, buckets.APPLIED, "n1.app")
    assert stored is not None and stored.revision == now
