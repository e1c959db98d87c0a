"""Compiles the catalogue into the registry: one entry per answered kind, as bytes for the bucket."""

from __future__ import annotations

from collections.abc import Mapping

from registry.contract.catalogue import Domain
from registry.contract.models import RegistryEntry, to_json


def compile_registry(domains: Mapping[str, Domain]) -> dict[str, RegistryEntry]:
    """The registry entry of every kind some domain answers, by kind."""
    return {
        kind: RegistryEntry(kind=kind, domain=name, module=domain.module, answer=domain.answer())
        for name, domain in sorted(domains.items())
        for kind in domain.kinds
    }


def registry_values(domains: Mapping[str, Domain]) -> dict[str, bytes]:
    """What the registry bucket must hold: the byte-stable JSON of each kind's entry."""
    return {kind: to_json(entry) for kind, entry in compile_registry(domains).items()}
