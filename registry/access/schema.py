"""The JSON Schema of `grants.json`, generated from its model (`registry.access.grants.Grants`) and
shipped beside this module as `grants.schema.json`, for a controller in another language.

It describes the file as `mesh-provisioner grants` writes it: every field is always written (an
absent account key as `null`), so every field is required; `version` says which shape this is.
After a change to the model, write it again and commit it (a test fails until then):

    python -m registry.access.schema            # writes registry/access/grants.schema.json
    python -m registry.access.schema --check    # exit 1 if the shipped schema is not the model's
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from registry.access.credentials import issued_text
from registry.access.grants import Grants

SCHEMA_FILE = Path(__file__).with_name("grants.schema.json")
DIALECT = "https://json-schema.org/draft/2020-12/schema"
REGENERATE = "python -m registry.access.schema"


def grants_schema() -> dict[str, Any]:
    """The schema of grants.json as the model writes it, every object's fields required."""
    schema = Grants.model_json_schema(mode="serialization")
    _require_every_field(schema)
    return {**schema, "$schema": DIALECT, "title": "grants.json"}


# Written only when it says something: a site's account alone speaks for nodes.
LEFT_OUT_WHEN_EMPTY = frozenset({"speaks_for"})


def _require_every_field(node: Any) -> None:
    """`model_dump` writes every field, defaults included: a reader may count on each (but those
    of `LEFT_OUT_WHEN_EMPTY`)."""
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            node["required"] = [name for name in node["properties"] if name not in LEFT_OUT_WHEN_EMPTY]
        for value in node.values():
            _require_every_field(value)
    elif isinstance(node, list):
        for value in node:
            _require_every_field(value)


def rendered_schema() -> str:
    """The schema as the shipped file holds it: sorted keys, two spaces, one final newline."""
    return json.dumps(grants_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__spec__.name if __spec__ else 'registry.access.schema'}",
        description=f"Write the JSON Schema of grants.json, generated from its model, to {SCHEMA_FILE}.",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the shipped schema differs")
    parser.add_argument("--out", type=Path, default=SCHEMA_FILE, help="where to write it (default: the shipped file)")
    args = parser.parse_args(argv)
    wanted = rendered_schema()
    if args.check:
        current = issued_text(args.out) or ""
        if current != wanted:
            print(f"{args.out} is not the schema of the model: run `{REGENERATE}`", file=sys.stderr)
            return 1
        print(f"{args.out} is the schema of the model")
        return 0
    args.out.write_text(wanted, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
