"""SCRAM-SHA-256 verifiers (RFC 5802, 7677, stored as RFC 5803 says), computed here, so that a
password never travels in a statement nor reaches a server log: PostgreSQL stores a verifier it
is given as is.

    SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>

The password is prepared with SASLprep (RFC 4013) exactly as PostgreSQL and libpq do it
(`src/common/saslprep.c`): a pure ASCII password is used as is, and a password SASLprep refuses
(a prohibited character, bidirectional text out of order, nothing left after mapping) is used as
its raw UTF-8 bytes rather than refused, so a client logs in with the same bytes either way.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stringprep
import unicodedata

ITERATIONS = 4096  # PostgreSQL's default (`scram_iterations` from 16 on)
SALT_BYTES = 16
PREFIX = "SCRAM-SHA-256"

_PROHIBITED = (
    stringprep.in_table_c12,
    stringprep.in_table_c21,
    stringprep.in_table_c22,
    stringprep.in_table_c3,
    stringprep.in_table_c4,
    stringprep.in_table_c5,
    stringprep.in_table_c6,
    stringprep.in_table_c7,
    stringprep.in_table_c8,
    stringprep.in_table_c9,
    stringprep.in_table_a1,
)


def saslprep(password: str) -> bytes:
    """The bytes a SCRAM exchange hashes for `password`, as PostgreSQL prepares them."""
    raw = password.encode("utf-8")
    if password.isascii():
        return raw
    mapped = [" " if stringprep.in_table_c12(c) else c for c in password if not stringprep.in_table_b1(c)]
    if not mapped or any(table(c) for c in mapped for table in _PROHIBITED) or not _bidi_ok(mapped):
        return raw
    return unicodedata.normalize("NFKC", "".join(mapped)).encode("utf-8")


def _bidi_ok(chars: list[str]) -> bool:
    if not any(stringprep.in_table_d1(c) for c in chars):
        return True
    in_order = stringprep.in_table_d1(chars[0]) and stringprep.in_table_d1(chars[-1])
    return in_order and not any(stringprep.in_table_d2(c) for c in chars)


def verifier(password: str, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    """A new verifier of `password` (a random salt unless one is given)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    stored_key, server_key = _keys(password, salt, iterations)
    return f"{PREFIX}${iterations}:{_b64(salt)}${_b64(stored_key)}:{_b64(server_key)}"


def matches(password: str, stored: str) -> bool:
    """Whether `stored` (a verifier as PostgreSQL keeps it) is one of `password`'s verifiers."""
    try:
        prefix, params, keys = stored.split("$")
        iterations_text, salt_text = params.split(":")
        stored_text, server_text = keys.split(":")
        salt, iterations = base64.b64decode(salt_text, validate=True), int(iterations_text)
    except ValueError:
        return False
    if prefix != PREFIX or iterations < 1:
        return False
    stored_key, server_key = _keys(password, salt, iterations)
    return hmac.compare_digest(_b64(stored_key), stored_text) and hmac.compare_digest(_b64(server_key), server_text)


def _keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    return hashlib.sha256(client_key).digest(), hmac.digest(salted, b"Server Key", "sha256")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
