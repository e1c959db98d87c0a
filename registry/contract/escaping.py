"""The `=hex` token escaping of the wire contract: a name becomes one key token and back.

A token holds only `A-Z a-z 0-9 - _ /`; every other byte of the name's UTF-8 encoding is
written `=XX` with two upper-case hex digits. Decoding is the exact inverse, and a token is
canonical only if encoding its decoded name gives the same token back.
"""

from __future__ import annotations

import re

from registry.errors import TokenError

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_/")
_ENCODED_BYTE = tuple(chr(b) if b in _SAFE else f"={b:02X}" for b in range(256))
_PLAIN_NAME = re.compile(r"[A-Za-z0-9\-_/]+")
_CANONICAL_TOKEN = re.compile(r"(?:[A-Za-z0-9\-_/]|=[0-9A-F]{2})+")
_ESCAPE_BYTES = re.compile(rb"=([0-9A-F]{2})")


def encode_token(name: str) -> str:
    """The token for `name`. An empty name has no token."""
    if not name:
        raise TokenError("", "a name must not be empty")
    if _PLAIN_NAME.fullmatch(name):
        return name  # nothing to escape: the token is the name itself
    return "".join(_ENCODED_BYTE[b] for b in name.encode("utf-8"))


def decode_token(token: str) -> str:
    """The name `token` stands for; refuses anything `encode_token` would not have built."""
    if not token:
        raise TokenError(token, "a token must not be empty")
    if not _CANONICAL_TOKEN.fullmatch(token):
        raise TokenError(token, _why_not_canonical(token))
    if "=" not in token:
        return token  # only characters written plainly: the name is the token itself
    raw = _ESCAPE_BYTES.sub(lambda m: bytes((int(m.group(1), 16),)), token.encode("ascii"))
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TokenError(token, "its escapes are not valid UTF-8") from None
    if encode_token(name) != token:
        raise TokenError(token, "a byte is escaped that must be written plainly")
    return name


def _why_not_canonical(token: str) -> str:
    for i, char in enumerate(token):
        if char == "=":
            hex_digits = token[i + 1 : i + 3]
            if len(hex_digits) < 2 or not re.fullmatch(r"[0-9A-Fa-f]{2}", hex_digits):
                return f"'=' at offset {i} is not followed by two hex digits"
            if hex_digits != hex_digits.upper():
                return f"escape '={hex_digits}' at offset {i} must use upper-case hex"
        elif ord(char) > 127 or ord(char) not in _SAFE:
            return f"character {char!r} at offset {i} must be escaped"
    return "it does not decode"  # pragma: no cover - the regex and this scan agree
