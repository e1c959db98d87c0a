"""The buckets of the wire contract, each with its key shape."""

from __future__ import annotations

from dataclasses import dataclass

from registry import keys
from registry.keys import KeyShape

PREFIX = "mesh-provisioner"


@dataclass(frozen=True)
class Bucket:
    name: str
    shape: KeyShape

    @property
    def stream(self) -> str:
        return f"KV_{self.name}"


REGISTRY = Bucket(f"{PREFIX}_registry", keys.REGISTRY)
NEEDS = Bucket(f"{PREFIX}_needs", keys.NEEDS)
APPLIED = Bucket(f"{PREFIX}_applied", keys.APPLIED)
COLLECT = Bucket(f"{PREFIX}_collect", keys.COLLECT)

OWN = (REGISTRY, NEEDS, APPLIED, COLLECT)

SEAT = PREFIX
VERB_SUBJECT = f"{PREFIX}.provisioning"


def bound_bucket(provider_module: str) -> Bucket:
    return Bucket(f"{provider_module}_bound", keys.BOUND)
