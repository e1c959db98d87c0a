"""The `=hex` token escaping of the wire contract."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.contract import decode_token, encode_token
from registry.errors import TokenError

# nats-py's key grammar without '.': one token of a key.
NATS_TOKEN = re.compile(r"^[-/_=a-zA-Z0-9]+$")

CONTRACT_TABLE = [
    pytest.param("shell:zsh:normal", "shell=3Azsh=3Anormal", id="a colon is escaped as =3A"),
    pytest.param("a.b", "a=2Eb", id="a dot is escaped so a name stays one token"),
    pytest.param("x=y", "x=3Dy", id="the escape character itself is escaped"),
    pytest.param("café", "caf=C3=A9", id="non-ASCII is escaped byte by byte of its UTF-8"),
]


@pytest.mark.parametrize(("name", "token"), CONTRACT_TABLE)
def test_the_contract_table_encodes(name: str, token: str) -> None:
    assert encode_token(name) == token


@pytest.mark.parametrize(("name", "token"), CONTRACT_TABLE)
def test_the_contract_table_decodes(name: str, token: str) -> None:
    assert decode_token(token) == name


def test_safe_characters_are_written_plainly() -> None:
    safe = "ABCXYZabcxyz0189-_/"
    assert encode_token(safe) == safe


@given(st.text(min_size=1))
def test_any_name_round_trips_through_a_valid_nats_token(name: str) -> None:
    token = encode_token(name)
    assert NATS_TOKEN.fullmatch(token)
    assert "." not in token
    assert decode_token(token) == name


def test_an_empty_name_has_no_token() -> None:
    with pytest.raises(TokenError, match="must not be empty"):
        encode_token("")


NON_CANONICAL = [
    pytest.param("caf=c3=a9", "upper-case hex", id="lower-case hex is refused"),
    pytest.param("a=3a", "upper-case hex", id="one lower-case hex digit is refused"),
    pytest.param("a=", "two hex digits", id="a bare '=' at the end is refused"),
    pytest.param("=", "two hex digits", id="a lone '=' is refused"),
    pytest.param("a=3", "two hex digits", id="'=' with one digit is refused"),
    pytest.param("a=G1", "two hex digits", id="'=' with a non-hex digit is refused"),
    pytest.param("a==41", "two hex digits", id="'=' followed by '=' is refused"),
    pytest.param("=41", "escaped that must be written plainly", id="an escaped safe letter is refused"),
    pytest.param("=2D", "escaped that must be written plainly", id="an escaped safe dash is refused"),
    pytest.param("=C3", "not valid UTF-8", id="a truncated UTF-8 sequence is refused"),
    pytest.param("=FF", "not valid UTF-8", id="a byte that never starts UTF-8 is refused"),
    pytest.param("=C0=AF", "not valid UTF-8", id="an overlong UTF-8 encoding is refused"),
    pytest.param("=ED=A0=80", "not valid UTF-8", id="an escaped surrogate is refused"),
    pytest.param("café", "must be escaped", id="raw non-ASCII is refused"),
    pytest.param("a.b", "must be escaped", id="a raw dot is refused"),
    pytest.param("n1*", "must be escaped", id="a raw '*' wildcard is refused"),
    pytest.param(">", "must be escaped", id="a raw '>' wildcard is refused"),
    pytest.param("a b", "must be escaped", id="a raw space is refused"),
    pytest.param("a:b", "must be escaped", id="a raw colon is refused"),
    pytest.param("", "must not be empty", id="an empty token is refused"),
]


@pytest.mark.parametrize(("token", "reason"), NON_CANONICAL)
def test_a_non_canonical_token_is_refused_with_its_reason(token: str, reason: str) -> None:
    with pytest.raises(TokenError, match=re.escape(reason)) as caught:
        decode_token(token)
    assert caught.value.token == token


@given(st.text(alphabet="=0123456789ABCDEFabcdefGz-_/.é ", min_size=1, max_size=12))
def test_any_token_that_decodes_encodes_back_to_itself(token: str) -> None:
    try:
        name = decode_token(token)
    except TokenError:
        return
    assert encode_token(name) == token


@given(st.text(min_size=1))
def test_any_text_that_decodes_encodes_back_to_itself(token: str) -> None:
    try:
        name = decode_token(token)
    except TokenError:
        return
    assert encode_token(name) == token
