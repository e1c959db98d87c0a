"""`read_json` refuses a text no JSON starts like at once, and says so exactly as parsing the whole
text would: the same reason, whatever follows (a hostile node's 64 KiB values that were not JSON
were parsed through on every listing of them)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from registry.contract import JsonRefused, read_json

WHITE = st.text(alphabet=" \t\r\n", max_size=5)


def reason_of(raw: bytes) -> str:
    try:
        read_json(raw, max_bytes=len(raw) + 1, max_depth=64)
    except JsonRefused as err:
        return err.reason
    return "parsed"


def whole_parse_reason(raw: bytes) -> str:
    """What parsing the whole text says, as read_json words it."""
    try:
        json.JSONDecoder().decode(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "it is not UTF-8 text"
    except json.JSONDecodeError as err:
        return f"it is not valid JSON: {err}"
    return "parsed"


@given(WHITE, st.characters(blacklist_characters='{["-0123456789tfnNI \t\r\n'), st.binary(max_size=64))
def test_a_text_no_json_starts_like_is_refused_as_a_whole_parse_would(white: str, first: str, rest: bytes) -> None:
    raw = white.encode() + first.encode("utf-8", errors="surrogatepass") + rest
    assert reason_of(raw) == whole_parse_reason(raw)


def test_a_large_value_that_is_not_json_is_refused_by_its_first_character() -> None:
    assert reason_of(b"x" * 65_000) == "it is not valid JSON: Expecting value: line 1 column 1 (char 0)"
    assert reason_of(b"x" * 65_000 + b"\xff") == "it is not UTF-8 text"
