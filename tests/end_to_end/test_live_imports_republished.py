"""Every stream import the grants give has a bucket behind it whose stream republishes its writes
where the import takes them: the grants and the seat's buckets read which buckets are followed
live from one place (`registry.access.followed_live`), so they cannot disagree. Checked on the
derivation for many meshes, and on a real nats-server where the seat made the buckets."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.seat.buckets import seat_buckets
from registry.access import Grants, Kind, MeshParties, derive_grants, followed_live
from registry.access.live import live_bucket_of
from registry.contract import load_catalogue
from registry.wire import bucket_config
from tests.isolation import Domains, Mesh

PROVIDERS = ("postgres", "redis-cache", "mq_2")
TWO_CONFIGS = """
[domains.config]
module = "site-config"
kinds = ["config"]
bucket = "site-config_values"
key = "<name>"

[domains.flags]
module = "flags"
kinds = ["flag"]
bucket = "flags_values"
key = "<node>.<name>"
"""


def grants_of(domains_file: Path | None) -> Grants:
    domains = load_catalogue(domains_file)
    parties = MeshParties(nodes=("n1", "a.b"), providers=PROVIDERS, operators=("ops",))
    return derive_grants(
        domains,
        nodes=parties.nodes,
        providers=parties.providers,
        operators=parties.operators,
        machines={"postgres": ["n1"]},
        user_keys={p: f"U{p.label}" for p in parties.all(domains)},
    )


@pytest.mark.parametrize("catalogue", ["built-in", "a domains file"])
def test_every_stream_import_follows_a_bucket_the_seat_makes_republishing(tmp_path: Path, catalogue: str) -> None:
    domains_file = None
    if catalogue == "a domains file":
        domains_file = tmp_path / "domains.toml"
        domains_file.write_text(TWO_CONFIGS)
    live = followed_live(load_catalogue(domains_file))
    made = {bucket.name: bucket for bucket in seat_buckets(PROVIDERS, domains_file)}
    followed = {
        live_bucket_of(item)
        for grant in grants_of(domains_file).parties
        for item in grant.imports
        if item.kind == "stream"
    }
    assert followed, "no party follows anything live"
    assert followed <= made.keys(), "a live import of a bucket the seat does not make"
    assert {name for name, bucket in made.items() if bucket in live} == followed, "republishing for nobody"


async def test_on_the_server_every_stream_import_has_a_republishing_bucket_behind_it(
    mesh: Mesh, domains: Domains
) -> None:
    imported = {
        (live_bucket_of(item), item.subject)
        for grant in mesh.grants.parties
        for item in grant.imports
        if item.kind == "stream"
    }
    kinds_following = {g.party.kind for g in mesh.grants.parties if any(i.kind == "stream" for i in g.imports)}
    assert kinds_following == {Kind.NODE, Kind.PROVIDER}
    for name, subject in sorted(imported):
        bucket = next(b for b in seat_buckets(("postgres",)) if b.name == name)
        config = await bucket_config(domains.seat, bucket)
        assert config is not None, f"{subject}: no bucket {name}"
        republish = config.get("republish") or {}
        assert (republish.get("src"), republish.get("dest")) == (bucket.subject(">"), bucket.live_subject(">")), subject
