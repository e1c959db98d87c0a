"""`grants.json` is written by pydantic-core's encoder, byte for byte as the standard library's
indenting encoder wrote it (sorted keys, two spaces, every character past ASCII escaped): the same
mesh and seeds still write the same file."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from registry.access.grants import pretty_json

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)  # what a name read from a file holds
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1), TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=30,
)


@given(JSON)
def test_it_writes_what_the_standard_library_writes(value: Any) -> None:
    assert pretty_json(value) == json.dumps(value, indent=2, sort_keys=True)


def test_a_string_pydantic_core_cannot_encode_is_written_by_the_standard_library() -> None:
    value = {"name": "n\ud800", "imports": []}  # a lone surrogate: a name from a command line in no UTF-8
    assert pretty_json(value) == json.dumps(value, indent=2, sort_keys=True)
