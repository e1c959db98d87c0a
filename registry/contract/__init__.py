"""The wire contract: what travels on the bus, with no connection to it.

The `=hex` escaping of key tokens, every key shape built and parsed in one place, the buckets and
their subjects, placeholders and templates, the catalogue of kinds and domains, the models of
bucket values and of the verb's answers, and the bounded JSON reader every byte from outside goes
through. Nothing here imports nats-py: it is the mesh's contract as data and pure functions.
"""

from __future__ import annotations

from registry.contract import buckets, keys
from registry.contract.bounded_json import MAX_DEPTH, MAX_PAGE_BYTES, JsonRefused, nesting, read_json, read_json_file
from registry.contract.buckets import Bucket
from registry.contract.catalogue import BUILT_IN, KINDS, Domain, load_catalogue
from registry.contract.compile import compile_registry, registry_values
from registry.contract.escaping import decode_token, encode_token
from registry.contract.keys import APPLIED, BOUND, KeyShape, shape_of, subject_matches, under
from registry.contract.models import (
    ActionRecord,
    AppliedValue,
    BucketAnswer,
    CollectValue,
    NeedValue,
    Outcome,
    RegistryEntry,
    VerbAnswer,
    to_json,
)
from registry.contract.placeholders import Placeholder, find_placeholders, parse_placeholder, substitute
from registry.contract.templates import NamePattern, fields_of, pattern_of, render
from registry.contract.verb import (
    MAX_NAME_BYTES,
    MAX_STALE_AFTER_SECONDS,
    WHATS,
    AppliedPage,
    AppliedRow,
    AtMost,
    CollectPage,
    CollectRow,
    Entry,
    HeldLease,
    MalformedKey,
    MergedAnswer,
    NeedsPage,
    NeedsRow,
    NodeRow,
    NodesPage,
    NoLease,
    Page,
    RegistryPage,
    RegistryRow,
    ReleasedLease,
    Row,
    Total,
    Totals,
    VerbRequest,
    Verdict,
    What,
    page_json,
    parse_page,
)

__all__ = [
    "APPLIED",
    "BOUND",
    "BUILT_IN",
    "KINDS",
    "MAX_DEPTH",
    "MAX_NAME_BYTES",
    "MAX_PAGE_BYTES",
    "MAX_STALE_AFTER_SECONDS",
    "WHATS",
    "ActionRecord",
    "AppliedPage",
    "AppliedRow",
    "AppliedValue",
    "AtMost",
    "Bucket",
    "BucketAnswer",
    "CollectPage",
    "CollectRow",
    "CollectValue",
    "Domain",
    "Entry",
    "HeldLease",
    "JsonRefused",
    "KeyShape",
    "MalformedKey",
    "MergedAnswer",
    "NamePattern",
    "NeedValue",
    "NeedsPage",
    "NeedsRow",
    "NoLease",
    "NodeRow",
    "NodesPage",
    "Outcome",
    "Page",
    "Placeholder",
    "RegistryEntry",
    "RegistryPage",
    "RegistryRow",
    "ReleasedLease",
    "Row",
    "Total",
    "Totals",
    "VerbAnswer",
    "VerbRequest",
    "Verdict",
    "What",
    "buckets",
    "compile_registry",
    "decode_token",
    "encode_token",
    "fields_of",
    "find_placeholders",
    "keys",
    "load_catalogue",
    "nesting",
    "page_json",
    "parse_page",
    "parse_placeholder",
    "pattern_of",
    "read_json",
    "read_json_file",
    "registry_values",
    "render",
    "shape_of",
    "subject_matches",
    "substitute",
    "to_json",
    "under",
]
