"""Text a node or a file wrote, made safe for the operator's terminal: every character a
terminal acts on is written as a visible escape, a backslash is doubled so that an escape cannot be
forged, and printable text (`café`, CJK) is left as it is."""

from __future__ import annotations

import re
import unicodedata
from typing import Final

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from registry.runtime import terminal_safe

BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
ACTED_ON: Final = ("Cc", "Cf", "Cs", "Zl", "Zp")  # controls, format, surrogates, separators
_ESCAPE = re.compile(r"\\(?:\\|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")

# Any code point, surrogates included (JSON's "\ud800" reads as one), and often the characters an
# escape is made of, so that text looking like an escape is tried as much as the characters escaped.
any_character = st.characters(codec=None, categories=None)
escape_like = st.sampled_from(["\\", "x", "u", "U", "0", "1", "2", "e", "b", "f"])
hostile = st.sampled_from([*BIDI_CONTROLS, "\x1b", "\x9b", "\x7f", "\n", "\u2028", "\u2029", "\u200b", "\ufeff"])
texts = st.text(st.one_of(any_character, escape_like, hostile))


def acted_on(char: str) -> bool:
    return unicodedata.category(char) in ACTED_ON


def unescaped(shown: str) -> str:
    """The text `terminal_safe` was given, read back from what it showed: its inverse."""

    def original(found: re.Match[str]) -> str:
        digits = found.group(1) or found.group(2) or found.group(3)
        return "\\" if digits is None else chr(int(digits, 16))

    assert "\\" not in _ESCAPE.sub("", shown), f"a backslash that starts no escape in {shown!r}"
    return _ESCAPE.sub(original, shown)


@given(texts)
@example("\x1b[2J\u202eevil\u2066\n\u2028[red]x[/red]\\x1b")
def test_nothing_a_terminal_acts_on_is_left(text: str) -> None:
    shown = terminal_safe(text)
    assert not [char for char in shown if acted_on(char)]
    assert not set(shown) & set(BIDI_CONTROLS)


@given(texts)
@example("\\x1b")  # a node writing an escape's text: it reads back as that text, not as ESC
@example("\\\\x1b")
def test_what_is_shown_reads_back_as_what_was_written(text: str) -> None:
    assert unescaped(terminal_safe(text)) == text


@given(texts, texts)
@example("\x1b", "\\x1b")  # ESC, and the four characters of its escape
def test_distinct_texts_are_shown_distinctly(one: str, other: str) -> None:
    assert (terminal_safe(one) == terminal_safe(other)) == (one == other)


@given(st.text(st.characters(codec=None, exclude_categories=ACTED_ON, exclude_characters="\\")))
def test_text_without_anything_to_escape_is_shown_as_it_is(text: str) -> None:
    assert terminal_safe(text) == text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("host-1", "host-1", id="plain ASCII"),
        pytest.param("café 東京 ünïcode", "café 東京 ünïcode", id="letters of any script"),
        pytest.param("[red]x[/red] :smile:", "[red]x[/red] :smile:", id="markup is text here, not ours to drop"),
        pytest.param("a\x1b[2Jb", "a\\x1b[2Jb", id="ESC of a clear screen"),
        pytest.param("a\nb\tc\rd", "a\\x0ab\\x09c\\x0dd", id="a newline, a tab and a carriage return"),
        pytest.param("\x00\x7f", "\\x00\\x7f", id="NUL and DEL"),
        pytest.param("\x9b1m\x85", "\\x9b1m\\x85", id="C1: a CSI and a next line"),
        pytest.param("txt\u202egnp.exe", "txt\\u202egnp.exe", id="right-to-left override"),
        pytest.param("\u2066x\u2069\u061c", "\\u2066x\\u2069\\u061c", id="isolates and the Arabic letter mark"),
        pytest.param("a\u200bb\ufeff", "a\\u200bb\\ufeff", id="a zero width space and a byte order mark"),
        pytest.param("a\u2028b\u2029", "a\\u2028b\\u2029", id="line and paragraph separators"),
        pytest.param("\U000e0001\U000e0041", "\\U000e0001\\U000e0041", id="tag characters, past U+FFFF"),
        pytest.param("\ud800", "\\ud800", id="a lone surrogate, which no terminal encoding can write"),
        pytest.param("C:\\x1b", "C:\\\\x1b", id="a backslash is doubled: the text of an escape is not one"),
    ],
)
def test_each_class_is_escaped_visibly(text: str, shown: str) -> None:
    assert terminal_safe(text) == shown
