"""Text from the bus or a file, made safe to show on an operator's terminal.

A node writes what it likes into its values, its lease's host, its keys; a terminal acts on some
characters instead of showing them: C0 and C1 controls start escape sequences (ESC, the 8-bit CSI
U+009B), bidirectional controls and other format characters reorder or hide what follows (U+202E
makes a row read as another), line and paragraph separators break a row. Each of those is shown as
an escape instead (`\\x1b`, `\\u202e`, `\\U000e0001`) and a backslash as two, so that what is shown
reads back as exactly what was written and no written text can pass for an escape. Letters of any
script, CJK and emoji are left as they are. JSON for a terminal (`json_text`) is ASCII alone.
"""

from __future__ import annotations

import json

# Controls (C0, DEL, C1), format characters (bidirectional controls, zero width ones, tags), lone
# surrogates (no terminal encoding can write one), line and paragraph separators.
_ACTED_ON = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def terminal_safe(text: str) -> str:
    """`text` with every character a terminal acts on written as a visible escape, and each
    backslash doubled: distinct texts stay distinct, printable text is returned as it is."""
    if text.isprintable() and "\\" not in text:  # every character escaped is one Python calls unprintable
        return text
    return "".join(_shown(char) for char in text)


def _shown(char: str) -> str:
    # Imported when a text first needs it: every program formats its log lines through this module,
    # and unicodedata's tables, once read, are 0.24 MB of each process (the node client's peak).
    import unicodedata  # noqa: PLC0415

    if char == "\\":
        return "\\\\"
    if unicodedata.category(char) not in _ACTED_ON:
        return char
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def json_text(document: object, *, indent: int | None = None, to_terminal: bool = False) -> str:
    """`document` as JSON: UTF-8 as written for a pipe or a file; for a terminal ASCII only, every
    other character a `\\u` escape, so that nothing a node wrote (a C1 control, a bidi override) is
    acted on."""
    if not to_terminal:
        return json.dumps(document, indent=indent, ensure_ascii=False)
    return json.dumps(document, indent=indent).replace("\x7f", "\\u007f")  # DEL is ASCII: ensure_ascii keeps it
