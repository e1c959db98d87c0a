"""Text from the bus or a file, made safe to show on an operator's terminal.

A node writes what it likes into its values, its lease's host, its keys; a terminal acts on some
characters instead of showing them: C0 and C1 controls start escape sequences (ESC, the 8-bit CSI
U+009B), bidirectional controls and other format characters reorder or hide what follows (U+202E
makes a row read as another), line and paragraph separators break a row. Each of those is shown as
an escape instead (`\\x1b`, `\\u202e`, `\\U000e0001`) and a backslash as two, so that what is shown
reads back as exactly what was written and no written text can pass for an escape. Letters of any
script, CJK and emoji are left as they are.
"""

from __future__ import annotations

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
