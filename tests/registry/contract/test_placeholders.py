"""Placeholders `${kind:name}`: parsing, malformed ones, substitution."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.contract import Placeholder, find_placeholders, parse_placeholder, substitute
from registry.errors import PlaceholderError


@pytest.mark.parametrize(
    ("text", "found"),
    [
        pytest.param("${dir:state}", [Placeholder("dir", "state")], id="kind and name"),
        pytest.param("${shell:zsh:normal}", [Placeholder("shell", "zsh:normal")], id="the name keeps further colons"),
        pytest.param(
            "${bound:postgres:db:host}", [Placeholder("bound", "postgres:db:host")], id="a bound name with its parts"
        ),
        pytest.param(
            "postgres://app:${secret:db-password}@${bound:postgres:db:host}/app",
            [Placeholder("secret", "db-password"), Placeholder("bound", "postgres:db:host")],
            id="several in one value, in order",
        ),
        pytest.param("no placeholder here", [], id="plain text has none"),
        pytest.param("costs $$5 and $HOME", [], id="a $$ and a bare $ are not placeholders"),
        pytest.param("$${config:x}", [], id="an escaped $ makes the rest literal text"),
        pytest.param("${config:caf\u00e9 au lait}", [Placeholder("config", "caf\u00e9 au lait")], id="any name text"),
        pytest.param("${my-kind_2:x}", [Placeholder("my-kind_2", "x")], id="a kind with digits, dash, underscore"),
    ],
)
def test_placeholders_are_found(text: str, found: list[Placeholder]) -> None:
    assert list(find_placeholders(text)) == found


MALFORMED = [
    pytest.param("a ${config:x", "'${' is never closed by '}'", id="an unclosed placeholder"),
    pytest.param("${", "'${' is never closed by '}'", id="a lone opening"),
    pytest.param("${config}", "found no ':'", id="a missing colon"),
    pytest.param("${}", "found no ':'", id="an empty placeholder"),
    pytest.param("${Config:x}", "kind 'Config' must be lower-case", id="an upper-case kind"),
    pytest.param("${:x}", "kind '' must be lower-case", id="an empty kind"),
    pytest.param("${1st:x}", "kind '1st' must be lower-case", id="a kind starting with a digit"),
    pytest.param("${con fig:x}", "kind 'con fig' must be lower-case", id="a kind with a space"),
    pytest.param("${config:}", "the name is empty", id="an empty name"),
]


@pytest.mark.parametrize(("text", "reason"), MALFORMED)
def test_a_malformed_placeholder_says_why(text: str, reason: str) -> None:
    with pytest.raises(PlaceholderError, match=re.escape(reason)) as caught:
        list(find_placeholders(text))
    assert reason in caught.value.reason
    assert caught.value.text.startswith("${")


@pytest.mark.parametrize(("text", "reason"), MALFORMED)
def test_substitution_refuses_a_malformed_placeholder_too(text: str, reason: str) -> None:
    with pytest.raises(PlaceholderError, match=re.escape(reason)):
        substitute(text, lambda p: "value")


def test_a_malformed_placeholder_after_good_ones_is_still_refused() -> None:
    with pytest.raises(PlaceholderError, match="found no ':'"):
        list(find_placeholders("${config:a} ${config:b} ${broken}"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("${config:x}", "<config|x>", id="a whole value"),
        pytest.param("a ${config:x} b ${shell:zsh:normal}", "a <config|x> b <shell|zsh:normal>", id="in text"),
        pytest.param("$$", "$", id="$$ writes one $"),
        pytest.param("$${config:x}", "${config:x}", id="$$ before a brace writes the text literally"),
        pytest.param("$$$${config:x}", "$${config:x}", id="two $$ write two $"),
        pytest.param("$HOME ${config:x}", "$HOME <config|x>", id="a bare $ stays"),
        pytest.param("${config:x}}", "<config|x>}", id="a closing brace after a placeholder stays"),
    ],
)
def test_substitution_replaces_each_placeholder(text: str, expected: str) -> None:
    assert substitute(text, lambda p: f"<{p.kind}|{p.name}>") == expected


def test_substituted_values_are_not_read_again() -> None:
    assert substitute("${config:a}", lambda p: "${config:b} $$") == "${config:b} $$"


def test_a_placeholder_prints_as_written() -> None:
    assert str(Placeholder("shell", "zsh:normal")) == "${shell:zsh:normal}"
    assert parse_placeholder("shell:zsh:normal") == Placeholder("shell", "zsh:normal")


kinds = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True)
names = st.text(min_size=1).filter(lambda name: "}" not in name)


@given(kind=kinds, name=names)
def test_any_placeholder_reads_back_from_its_text(kind: str, name: str) -> None:
    placeholder = Placeholder(kind, name)
    assert list(find_placeholders(f"x{placeholder}y")) == [placeholder]
