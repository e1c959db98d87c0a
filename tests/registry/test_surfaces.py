"""The public surface of each of registry's concerns, pinned: what the programs, the benchmarks and
the other concerns may import. A name added or removed here is a change of the library's interface."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SURFACES = {
    "registry.contract": [
        "APPLIED",
        "ActionRecord",
        "AppliedPage",
        "AppliedRow",
        "AppliedValue",
        "AtMost",
        "BOUND",
        "BUILT_IN",
        "Bucket",
        "BucketAnswer",
        "CollectPage",
        "CollectRow",
        "CollectValue",
        "Domain",
        "Entry",
        "HeldLease",
        "JsonRefused",
        "KINDS",
        "KeyShape",
        "MAX_DEPTH",
        "MAX_NAME_BYTES",
        "MAX_PAGE_BYTES",
        "MAX_PAGE_DEPTH",
        "MAX_STALE_AFTER_SECONDS",
        "MAX_VALUE_DEPTH",
        "MalformedKey",
        "MergedAnswer",
        "Name",
        "NamePattern",
        "NeedValue",
        "NeedsPage",
        "NeedsRow",
        "NoLease",
        "NodeRow",
        "NodesPage",
        "Outcome",
        "PAGES",
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
        "WHATS",
        "What",
        "buckets",
        "compile_registry",
        "decode_token",
        "encode_token",
        "entry_data",
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
    ],
    "registry.wire": [
        "BucketConfig",
        "Bus",
        "BusOptions",
        "Changes",
        "ERROR_CODE_HEADER",
        "ERROR_HEADER",
        "Holder",
        "KvItem",
        "Lease",
        "LeaseHeld",
        "LeaseLost",
        "MAX_PAGES",
        "MULTI_LAST_LIMIT",
        "Message",
        "OnPage",
        "Outage",
        "SKEW",
        "ScopedWatch",
        "Sink",
        "Step",
        "StreamWalk",
        "TooManyKeys",
        "answer_of",
        "answer_patiently",
        "ask",
        "ask_page",
        "ask_patiently",
        "ask_service",
        "bucket_config",
        "check_nats_internals",
        "connect",
        "connect_within",
        "converge",
        "converge_steps",
        "create_bucket",
        "current_snapshot",
        "delete",
        "drain_endpoints",
        "follow",
        "get_direct",
        "get_last_many",
        "get_latest",
        "get_stamped",
        "leader_floor",
        "nats_client",
        "node_key",
        "page_of",
        "purge",
        "put",
        "replicated",
        "run_steps",
        "scoped_watch",
        "seat_key",
        "snapshot",
        "update",
    ],
    "registry.serving": ["EndpointSpec", "RunningService", "ServiceRequest", "capped", "serve"],
    "registry.access": [
        "AccountGrant",
        "AccountPushError",
        "CLAIMS_UPDATE",
        "DATA_ACCOUNT",
        "Grants",
        "GrantsFile",
        "Kind",
        "MeshParties",
        "Nkey",
        "Party",
        "PartyMap",
        "REQUEST_INFO",
        "SEED_SUFFIX",
        "SERVER_AUTH",
        "SYSTEM_USER",
        "UnknownAccount",
        "account_jwt_path",
        "bound_bucket",
        "claims_of",
        "creds_path",
        "delete_accounts",
        "derive_grants",
        "encode_jwt",
        "issue_grants",
        "load_jwt_auth",
        "load_party_map",
        "new_seed",
        "operator_key",
        "push_account",
        "render_server_auth",
        "seed_path",
        "write_secret",
    ],
    "registry.edge": [
        "BusSettings",
        "CommandLine",
        "DEV_CONTEXT",
        "Duration",
        "EdgeSettings",
        "LogSettings",
        "NatsContext",
        "NatsContexts",
        "add_settings_arguments",
        "env_of",
        "flag_of",
        "given_flags",
        "load_settings",
    ],
    "registry.runtime": [
        "EXIT_CLOSED_PIPE",
        "LogFormat",
        "LogLevel",
        "configure_logging",
        "event",
        "missing_extra",
        "quiet_on_closed_pipe",
        "terminal_safe",
        "until_signalled",
    ],
    "registry.provider": ["BOUND_KIND", "Bind", "BoundNeed", "bound_needs", "desired_values", "provide"],
}


@pytest.mark.parametrize("package", SURFACES)
def test_the_surface_is_pinned(package: str) -> None:
    assert sorted(importlib.import_module(package).__all__) == SURFACES[package]


def _defined_in(package: str) -> set[str]:
    """The names each module of the package defines at its top level (classes, functions, constants
    and aliases), and the modules themselves: what a surface may re-export."""
    folder = Path(importlib.import_module(package).__file__ or "").parent
    defined: set[str] = set()
    for path in folder.glob("*.py"):
        if path.name == "__init__.py":
            continue
        defined.add(path.stem)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined.update(target.id for target in node.targets if isinstance(target, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined.add(node.target.id)
    return defined


@pytest.mark.parametrize("package", SURFACES)
def test_every_name_of_a_surface_is_defined_inside_its_package(package: str) -> None:
    """A surface re-exports its own modules' names, never a neighbour's or a third party's."""
    assert set(SURFACES[package]) - _defined_in(package) == set()
