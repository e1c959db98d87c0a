"""Pydantic models of what the buckets hold; their JSON is the wire format.

Serialised with `to_json`: sorted keys, no spaces, so equal values are equal bytes and
"the value differs" is a byte comparison.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def to_json(model: BaseModel) -> bytes:
    """Byte-stable JSON of `model`."""
    return json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class BucketAnswer(_Model):
    """Values are read from a bucket.

    `bucket` and the `parts` are text templates over the placeholder's fields; `key` is the
    bucket's key shape; `name` splits the placeholder's name into fields. `read` says how the
    value is taken: `value` is the JSON at the key; `plan` takes `plan.<kind>.<name>` from the
    value at the key; `items` reads every key under the key's last field, in key order.

    `shared` names the collections (of the collect bucket, read by `items`) that every node reads
    across the mesh: each node's contributions, listed by the provisioning verb, those of nodes
    gone for good left out. Any other collection is the node's own contributions alone.
    """

    via: Literal["bucket"] = "bucket"
    bucket: str
    key: str
    name: str = "<name>"
    parts: dict[str, str] = Field(default_factory=dict)
    read: Literal["value", "plan", "items"] = "value"
    shared: tuple[str, ...] = ()

    @model_serializer(mode="wrap")
    def _unshared_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An answer sharing no collection is written as before `shared` existed: the same bytes."""
        data: dict[str, Any] = handler(self)
        if not data.get("shared"):
            data.pop("shared", None)
        return data

    def shares(self, collection: str) -> bool:
        """Whether `collection` is read across the mesh."""
        return self.read == "items" and collection in self.shared


class VerbAnswer(_Model):
    """Values are asked on request/reply of `subject`; never stored in a bucket."""

    via: Literal["verb"] = "verb"
    subject: str
    name: str = "<name>"


Answer = Annotated[BucketAnswer | VerbAnswer, Field(discriminator="via")]


class RegistryEntry(_Model):
    """The value of `<kind>` in `mesh-provisioner_registry`."""

    kind: str
    domain: str
    module: str
    answer: Answer


class NeedValue(_Model):
    """The value of `<node>.<module>.<kind>.<name>` in `mesh-provisioner_needs`."""

    placeholder: str
    used_in: tuple[str, ...] = ()


Outcome = Literal["succeeded", "failed", "timed out", "could not start"]


class ActionRecord(_Model):
    """The outcome of a module's change action, for the env file of `digest`; never its output."""

    command: tuple[str, ...]
    digest: str
    outcome: Outcome
    exit_code: int | None = None
    finished_at: str

    @property
    def ok(self) -> bool:
        return self.outcome == "succeeded"


class AppliedValue(_Model):
    """The value of `<node>.<module>` in `mesh-provisioner_applied`. Digests only, never a value.

    `changed_at` (ISO 8601 UTC, to the second) is when the record's content last changed: a
    reconcile that finds the same content keeps it, so it writes nothing. Records written before
    it existed have none."""

    state: Literal["applied", "pending"]
    digest: str | None = None
    file: str | None = None
    reasons: tuple[str, ...] = ()
    action: ActionRecord | None = None
    changed_at: str | None = None

    @model_serializer(mode="wrap")
    def _unstamped_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A record without `changed_at` is written as before it existed: the same bytes, no write."""
        data: dict[str, Any] = handler(self)
        if data.get("changed_at") is None:
            data.pop("changed_at", None)
        return data

    def same_content(self, other: AppliedValue | None) -> bool:
        """Whether `other` says the same, whenever each was stamped."""
        return other is not None and self.model_copy(update={"changed_at": None}) == other.model_copy(
            update={"changed_at": None}
        )

    def stamped(self, previous: AppliedValue | None, now: str) -> AppliedValue:
        """This record with its `changed_at`: the previous one's when the content is the same, else `now`."""
        changed_at = previous.changed_at if previous is not None and self.same_content(previous) else now
        return self.model_copy(update={"changed_at": changed_at})


class CollectValue(_Model):
    """The value of `<node>.<collection>.<contributor>` in `mesh-provisioner_collect`."""

    items: tuple[str, ...]
