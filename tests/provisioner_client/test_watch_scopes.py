"""Which watches a client holds: one per bucket, and which changes wake it (pure logic)."""

from __future__ import annotations

import pytest

from mesh_dev.standins import ASSIGNMENTS, BOUND_BUCKET, CONFIG
from provisioner_client.resolving.resolve import Source
from provisioner_client.watch.watching import followed_live, watch_scopes
from registry.contract import Bucket, buckets, keys, subject_matches


def test_one_watch_per_bucket_over_the_nodes_own_keys_or_the_whole_bucket() -> None:
    sources = {
        Source(buckets.REGISTRY, ">"),
        Source(CONFIG, "log-level"),
        Source(CONFIG, "greeting"),
        Source(ASSIGNMENTS, "n1.app"),
        Source(ASSIGNMENTS, "n1.db"),
        Source(BOUND_BUCKET, "n1.app.db.host"),
        Source(buckets.COLLECT, "n1.shell=3Azsh=3Anormal.*"),
    }
    assert watch_scopes(sources, "n1") == {
        Source(buckets.REGISTRY, ">"): {">"},
        Source(CONFIG, ">"): {"log-level", "greeting"},
        Source(ASSIGNMENTS, "n1.>"): {"n1.app", "n1.db"},
        Source(BOUND_BUCKET, "n1.>"): {"n1.app.db.host"},
        Source(buckets.COLLECT, "n1.>"): {"n1.shell=3Azsh=3Anormal.*"},
    }


def test_other_nodes_keys_of_a_bucket_nodes_write_are_each_followed_live() -> None:
    """A shared collection: its live updates are imported on `$KVR.`, off the node's own writes."""
    own, shared = Source(buckets.COLLECT, "n1.keys.*"), Source(buckets.COLLECT, "*.keys.*")
    assert watch_scopes({own, shared}, "n1") == {Source(buckets.COLLECT, "n1.>"): {"n1.keys.*"}, shared: {"*.keys.*"}}
    assert followed_live(shared, "n1") and not followed_live(own, "n1")
    assert not followed_live(Source(CONFIG, ">"), "n1")


def test_a_node_named_as_a_prefix_of_another_is_not_its_owner() -> None:
    b = Bucket("b", keys.APPLIED)
    assert watch_scopes({Source(b, "n10.app")}, "n1") == {Source(b, ">"): {"n10.app"}}


@pytest.mark.parametrize(
    ("subject_filter", "key", "matches"),
    [
        ("log-level", "log-level", True),
        ("log-level", "greeting", False),
        ("n1.*", "n1.app", True),
        ("n1.*", "n1.app.x", False),
        ("n1.c.*", "n1.c.web", True),
        ("n1.c.*", "n1.d.web", False),
        (">", "anything.at.all", True),
        ("n1.>", "n1", False),
        ("n1.>", "n1.a.b", True),
    ],
    ids=[
        "the same key",
        "another key",
        "a token wildcard",
        "a token wildcard is one token",
        "a collection's contributors",
        "another collection",
        "everything",
        "'>' needs a token",
        "'>' takes the rest",
    ],
)
def test_a_change_wakes_the_loop_only_under_a_key_it_read(subject_filter: str, key: str, matches: bool) -> None:
    assert subject_matches(subject_filter, key) is matches
