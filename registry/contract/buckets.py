"""The buckets of the wire contract, and every subject and stream name a bucket is reached by.

No other module writes `KV_<bucket>`, `$KV.<bucket>.<key>` or a JetStream API subject by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from registry.contract import keys
from registry.contract.keys import KeyShape

PREFIX = "mesh-provisioner"
# Where a bucket's stream republishes each write it stores (`$KVR.<bucket>.<key>`): what a party's
# live updates import, whoever wrote (nats-server passes a write that came into the data account
# through a service import on to no stream import of its subject, but a republished one it does).
LIVE_PREFIX = "$KVR"


@dataclass(frozen=True)
class Bucket:
    """A KV bucket: its name and its key shape."""

    name: str
    shape: KeyShape

    @property
    def stream(self) -> str:
        return f"KV_{self.name}"

    @property
    def subject_prefix(self) -> str:
        """What a key's subject starts with: `$KV.<bucket>.`."""
        return f"$KV.{self.name}."

    def subject(self, key_or_filter: str) -> str:
        """The subject of a key, or of a subject filter relative to the bucket (`n1.>`)."""
        return f"{self.subject_prefix}{key_or_filter}"

    def key_of(self, subject: str) -> str:
        """The key `subject` names: the key's own (`$KV.<bucket>.<key>`), or where the bucket's
        stream republishes its writes (`$KVR.<bucket>.<key>`)."""
        if subject.startswith(LIVE_PREFIX):  # `$KVR.<bucket>.`: one character longer than `$KV.<bucket>.`
            return subject[len(LIVE_PREFIX) + len(self.name) + 2 :]
        return subject[len(self.subject_prefix) :]

    def live_subject(self, key_or_filter: str) -> str:
        """Where the bucket's stream republishes the writes of a key, or of a filter (`n1.>`)."""
        return f"{LIVE_PREFIX}.{self.name}.{key_or_filter}"

    def direct_get_subject(self, key: str) -> str:
        """Direct get of one key: the key is in the subject, so it can be granted per node."""
        return f"$JS.API.DIRECT.GET.{self.stream}.{self.subject(key)}"

    @property
    def batch_get_subject(self) -> str:
        """A batch direct get (`multi_last`): the filter is in the body, so it reads bucket-wide."""
        return f"$JS.API.DIRECT.GET.{self.stream}"

    def consumer_create_api(self, name: str, subject_filter: str | None) -> str:
        """The API subject creating consumer `name`; with one filter, the filter is in the subject
        (`CONSUMER.CREATE.KV_<b>.<name>.$KV.<b>.<filter>`), so it can be granted per node."""
        base = f"CONSUMER.CREATE.{self.stream}.{name}"
        return f"{base}.{self.subject(subject_filter)}" if subject_filter is not None else base

    def consumer_delete_api(self, name: str) -> str:
        return f"CONSUMER.DELETE.{self.stream}.{name}"

    def consumer_next_subject(self, name: str) -> str:
        """A pull of consumer `name`'s next messages (published with a reply subject, not asked)."""
        return f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{name}"

    def consumer_request(self, filters: Sequence[str], config: Mapping[str, object]) -> dict[str, object]:
        """The body creating a consumer of this bucket's keys under `filters` (relative to the
        bucket): `config` with the filters as the one `filter_subject` or as `filter_subjects`; no
        filters: every key, with no filter, as the bucket's stream holds its keys alone (nats-server
        counts the messages pending under a wildcard filter subject by subject: 0.3 s at
        10,000,000 keys before a consumer of `>` exists, 2 ms without a filter)."""
        if not filters:
            return {"stream_name": self.stream, "config": dict(config)}
        subjects = [self.subject(f) for f in filters]
        filtered = {"filter_subject": subjects[0]} if len(subjects) == 1 else {"filter_subjects": subjects}
        return {"stream_name": self.stream, "config": {**config, **filtered}}

    @property
    def purge_api(self) -> str:
        return f"STREAM.PURGE.{self.stream}"

    @property
    def info_api(self) -> str:
        return f"STREAM.INFO.{self.stream}"

    @property
    def message_get_api(self) -> str:
        """A stream message get: the subject is in the body, so it reads bucket-wide."""
        return f"STREAM.MSG.GET.{self.stream}"

    @property
    def create_api(self) -> str:
        return f"STREAM.CREATE.{self.stream}"

    @property
    def update_api(self) -> str:
        return f"STREAM.UPDATE.{self.stream}"


REGISTRY = Bucket(f"{PREFIX}_registry", keys.REGISTRY)
NEEDS = Bucket(f"{PREFIX}_needs", keys.NEEDS)
APPLIED = Bucket(f"{PREFIX}_applied", keys.APPLIED)
COLLECT = Bucket(f"{PREFIX}_collect", keys.COLLECT)

OWN = (REGISTRY, NEEDS, APPLIED, COLLECT)
# Who holds a role now (the compiling seat, each node's client): `registry.wire.lease`.
LEASES = Bucket(f"{PREFIX}_leases", KeyShape("<role>.<name>"))

SEAT = PREFIX
VERB_SUBJECT = f"{PREFIX}.provisioning"


def bucket_named_by(subject: str) -> tuple[str, bool] | None:
    """The bucket a subject names, read back: a key's (`$KV.<bucket>.<key>`) or a direct get's
    (`$JS.API.DIRECT.GET.KV_<bucket>...`), and whether it is a direct get; None for any other."""
    tokens = subject.split(".")
    if tokens[0] == "$KV" and len(tokens) > 2:
        return tokens[1], False
    if tokens[:4] == ["$JS", "API", "DIRECT", "GET"] and len(tokens) > 4 and tokens[4].startswith("KV_"):
        return tokens[4].removeprefix("KV_"), True
    return None
