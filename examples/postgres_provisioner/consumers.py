"""The delivered consumers: one variable of the provider module's env file holding, as JSON,

    {"consumers": [{"name": "app", "database": "app", "password": "..."}, ...]}

(the vault's `consumers` answer, materialized by the node client; see deploy/examples/README.md).
The env file is read the way the node client writes it: `NAME="value"` lines whose values escape
`\\`, `"`, `$` and `` ` `` by a backslash and keep newlines as they are.

Every consumer is checked before anything is changed: names and databases PostgreSQL would
truncate (more than 63 bytes) or reserves (`pg_...`, `public`, `none`), a password libpq cannot
send (more than 1,024 bytes), a NUL anywhere, a name or a database given twice. A wrong value
refuses the whole delivery, naming the consumer by its position and the field, never a password.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.postgres_provisioner.errors import DeliveryError
from registry.contract import JsonRefused, read_bounded_text, read_json

NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: a longer identifier would be truncated
PASSWORD_BYTES = 1024  # libpq's SASLprep refuses longer passwords, so no client could log in
MAX_ENV_FILE_BYTES = 64 << 20  # the most the node client writes (provisioner_client.materializing.envfile)
_RESERVED = ("public", "none")
_UNESCAPED = {"\\": "\\", '"': '"', "$": "$", "`": "`"}


@dataclass(frozen=True)
class Consumer:
    """One consumer's role, its database, and its password (held only while a reconcile runs)."""

    name: str
    database: str
    password: str = field(repr=False)


def read_env_variable(path: Path, variable: str) -> str:
    """The value of `variable` in the env file at `path`."""
    try:
        text = read_bounded_text(path, MAX_ENV_FILE_BYTES)
    except OSError as err:
        raise DeliveryError(str(path), f"cannot be read: {type(err).__name__}: {err.strerror or err}") from None
    values = parse_env(text, str(path))
    if variable not in values:
        raise DeliveryError(str(path), f"has no variable {variable}")
    return values[variable]


def parse_env(text: str, source: str) -> dict[str, str]:
    """The variables of an env file as the node client writes it (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    position, line = 0, 1
    while position < len(text):
        end = text.find("\n", position)
        end = len(text) if end < 0 else end
        head = text[position:end]
        if not head.strip() or head.lstrip().startswith("#"):
            position, line = end + 1, line + 1
            continue
        name, sep, rest = head.partition("=")
        if not sep or not name.isidentifier() or not rest.startswith('"'):
            raise DeliveryError(source, f'line {line} is not NAME="value"')
        value, position = _quoted(text, position + len(name) + 2, source, line)
        values[name] = value
        line += value.count("\n") + 1
    return values


def _quoted(text: str, start: int, source: str, line: int) -> tuple[str, int]:
    """The double-quoted value starting at `start` (after its quote), and where the next line starts."""
    out: list[str] = []
    position = start
    while position < len(text):
        char = text[position]
        if char == "\\" and text[position + 1 : position + 2] in _UNESCAPED:
            out.append(text[position + 1])
            position += 2
            continue
        if char == '"':
            tail_end = text.find("\n", position)
            tail = text[position + 1 : len(text) if tail_end < 0 else tail_end]
            if tail.strip():
                raise DeliveryError(source, f"line {line}: text after the closing quote")
            return "".join(out), len(text) if tail_end < 0 else tail_end + 1
        out.append(char)
        position += 1
    raise DeliveryError(source, f"line {line}: the quoted value is never closed")


def parse_consumers(value: str, source: str) -> list[Consumer]:
    """The consumers of a consumers value, checked as a whole."""
    try:
        data = read_json(value, max_depth=8)
    except JsonRefused as err:
        raise DeliveryError(source, f'{err.reason}: expected {{"consumers": [...]}}') from None
    if not isinstance(data, dict) or set(data) != {"consumers"} or not isinstance(data["consumers"], list):
        raise DeliveryError(source, 'expected exactly {"consumers": [{"name", "database", "password"}, ...]}')
    consumers = [_consumer(entry, number, source) for number, entry in enumerate(data["consumers"], start=1)]
    _check_unique(consumers, source)
    return consumers


def _consumer(entry: Any, number: int, source: str) -> Consumer:
    where = f"consumer {number}"
    if not isinstance(entry, dict) or set(entry) != {"name", "database", "password"}:
        raise DeliveryError(source, f"{where}: expected exactly the fields name, database and password")
    for field_name in ("name", "database", "password"):
        if not isinstance(entry[field_name], str) or not entry[field_name] or "\0" in entry[field_name]:
            raise DeliveryError(source, f"{where}: {field_name} must be a non-empty text without NUL")
    for field_name in ("name", "database"):
        _check_identifier(entry[field_name], f"{where}: {field_name}", source)
    if len(entry["password"].encode("utf-8")) > PASSWORD_BYTES:
        raise DeliveryError(source, f"{where}: the password is longer than {PASSWORD_BYTES} bytes (libpq's limit)")
    return Consumer(entry["name"], entry["database"], entry["password"])


def _check_identifier(name: str, where: str, source: str) -> None:
    size = len(name.encode("utf-8"))
    if size > NAME_BYTES:
        raise DeliveryError(source, f"{where} is {size} bytes; PostgreSQL keeps {NAME_BYTES}")
    if name.startswith("pg_") or name in _RESERVED:
        raise DeliveryError(source, f"{where} {name!r} is reserved by PostgreSQL")


def _check_unique(consumers: Sequence[Consumer], source: str) -> None:
    for attribute in ("name", "database"):
        seen: set[str] = set()
        for consumer in consumers:
            value = getattr(consumer, attribute)
            if value in seen:
                raise DeliveryError(source, f"{attribute} {value!r} is given to two consumers")
            seen.add(value)


class Digests:
    """Keyed digests of credentials, kept between polls instead of the credentials themselves.

    The key is random and lives in this process only, so a digest tells nothing outside it."""

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._applied: dict[str, tuple[str, str]] = {}

    def of(self, *parts: str) -> str:
        message = "\0".join(parts).encode("utf-8")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def applied(self, role: str) -> tuple[str, str] | None:
        """The digest of the password last applied to `role`, and the verifier PostgreSQL held then."""
        return self._applied.get(role)

    def remember(self, role: str, digest: str, stored: str) -> None:
        self._applied[role] = (digest, stored)

    def forget(self, role: str) -> None:
        self._applied.pop(role, None)
