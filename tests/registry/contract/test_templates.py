"""Templates of the catalogue: name patterns that split a placeholder's name, and text templates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.contract import NamePattern, fields_of, render
from registry.errors import TemplateError

BOUND_NAME = "<provider>:<provision>[:<local>]"


@pytest.mark.parametrize(
    ("pattern", "name", "parts"),
    [
        pytest.param("<name>", "state", {"name": "state"}, id="one field takes the whole name"),
        pytest.param("<name>", "zsh:normal", {"name": "zsh:normal"}, id="one field keeps its colons"),
        pytest.param(BOUND_NAME, "postgres:db", {"provider": "postgres", "provision": "db"}, id="without the optional"),
        pytest.param(
            BOUND_NAME,
            "postgres:db:host",
            {"provider": "postgres", "provision": "db", "local": "host"},
            id="with the optional",
        ),
        pytest.param(
            BOUND_NAME,
            "postgres:db:a:b",
            {"provider": "postgres", "provision": "db", "local": "a:b"},
            id="the last field takes the rest, colons included",
        ),
        pytest.param("<a>:<b>", "x:y:z", {"a": "x", "b": "y:z"}, id="a required last field takes the rest too"),
    ],
)
def test_a_name_pattern_splits_a_name(pattern: str, name: str, parts: dict[str, str]) -> None:
    assert NamePattern(pattern).split(name) == parts


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        pytest.param(BOUND_NAME, "postgres", id="too few parts"),
        pytest.param(BOUND_NAME, "postgres::host", id="an empty middle part"),
        pytest.param(BOUND_NAME, ":db", id="an empty first part"),
        pytest.param(BOUND_NAME, "postgres:db:", id="an empty optional part"),
        pytest.param("<a>:<b>", "x:", id="an empty last part"),
    ],
)
def test_a_name_that_does_not_fit_the_pattern_is_refused(pattern: str, name: str) -> None:
    with pytest.raises(TemplateError, match=f"name {name!r} does not read as"):
        NamePattern(pattern).split(name)


def test_a_name_pattern_knows_its_fields() -> None:
    pattern = NamePattern(BOUND_NAME)
    assert (pattern.required, pattern.optional, pattern.fields) == (
        ("provider", "provision"),
        ("local",),
        ("provider", "provision", "local"),
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("name", id="literal text"),
        pytest.param("<Name>", id="an upper-case field"),
        pytest.param("<a>-<b>", id="fields joined by something else than ':'"),
        pytest.param("<a>[:<b>]:<c>", id="an optional field that is not last"),
        pytest.param("<a>[:<b>][:<c>]", id="two optional fields"),
        pytest.param("[:<a>]", id="only an optional field"),
    ],
)
def test_a_malformed_name_pattern_is_refused(text: str) -> None:
    with pytest.raises(TemplateError, match="expected <field>s joined by ':'"):
        NamePattern(text)


@given(parts=st.lists(st.text(min_size=1).filter(lambda p: ":" not in p), min_size=3, max_size=3))
def test_any_parts_joined_by_colons_split_back(parts: list[str]) -> None:
    assert NamePattern(BOUND_NAME).split(":".join(parts)) == dict(
        zip(("provider", "provision", "local"), parts, strict=True)
    )


def test_render_fills_every_field() -> None:
    assert fields_of("<provider>_bound") == ("provider",)
    assert render("<provider>_bound", {"provider": "postgres"}) == "postgres_bound"
    assert render("<kind>:<name>", {"kind": "shell", "name": "zsh"}) == "shell:zsh"
    assert render("fixed", {}) == "fixed"


def test_render_refuses_a_missing_part() -> None:
    with pytest.raises(TemplateError, match="no value for provider"):
        render("<provider>_bound", {"module": "web"})
