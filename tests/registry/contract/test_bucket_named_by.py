"""A subject read back to the bucket it names, in the one module that spells those subjects."""

from __future__ import annotations

from registry.contract import buckets


def test_a_key_s_subject_and_a_direct_get_name_their_bucket_and_nothing_else_does() -> None:
    needs = buckets.NEEDS
    assert buckets.bucket_named_by(needs.subject("n1.web.config.x")) == (needs.name, False)
    assert buckets.bucket_named_by(needs.direct_get_subject("n1.web.config.x")) == (needs.name, True)
    assert buckets.bucket_named_by(needs.batch_get_subject) == (needs.name, True)
    assert buckets.bucket_named_by(buckets.VERB_SUBJECT) is None
    assert buckets.bucket_named_by("$KV.lonely") is None
    assert buckets.bucket_named_by("$JS.API.STREAM.INFO.KV_x") is None
