"""Cursors any seat of the mesh continues: where a listing stopped, sealed by the seats' key.

A cursor is a `Continuation` (its listing's query as it was scoped, who began it, the page it asks
for, and for a streamed listing the stream sequence that page starts at, the sequence the listing
may not end before, and the counts answered so far), written as compact JSON and signed with
HMAC-SHA256 under a key every seat of the mesh derives from the credentials it connects with (the
seat's nkey seed or password: `CursorSeal.of_credentials`), which no other party holds. So any seat
of the mesh, or one restarted since, resumes the listing from the stream where it stopped, and a
cursor forged, altered, expired, or brought by another party than the one that began the listing
is unknown (410). It is signed, not encrypted: it reads as what it continues, which the party that
holds it asked.

Who began it is the party the bus names (`Nats-Request-Info`, mapped by the grants every seat
holds); its expiry is wall-clock time (seats agree by NTP), `ttl` after the page that gave it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta

from provisioner.errors import CursorGone, RequestError
from registry.access import Party
from registry.wire import BusOptions

log = logging.getLogger(__name__)

MAC_BYTES = 16
LARGEST = 2**64  # no figure of a cursor (a page, a stream sequence, a count) is larger
PURPOSE = b"mesh-provisioner cursor seal 1"
_USER_SEED = re.compile(rb"SU[A-Z2-7]{56}")
_DEFAULTS: Mapping[str, object] = {"what": "registry"}


@dataclass(frozen=True)
class Continuation:
    """What a seat needs to answer page `page` of a listing.

    `position` 0: a listing whose later pages the seat that began it keeps (what=nodes); else the
    stream sequence the page starts at, `floor` the sequence the listing may not end before,
    `at_most` its bound as the first page said it, `entries` and `malformed` what it answered."""

    listing: str
    page: int
    given: Mapping[str, object]
    party: str
    expires: float = 0.0
    position: int = 0
    floor: int = 0
    at_most: int = 0
    entries: int = 0
    malformed: int = 0

    @property
    def streamed(self) -> bool:
        return self.position > 0


def party_of(party: Party | None) -> str:
    """How a cursor names who began its listing: its party's label; empty for the data account."""
    return party.label if party is not None else ""


@dataclass
class CursorSeal:
    """Seals and opens cursors under one key, `ttl` after they are issued."""

    key: bytes
    ttl: timedelta = timedelta(seconds=120)
    clock: Callable[[], float] = field(default=time.time)

    @classmethod
    def of_credentials(cls, options: BusOptions, ttl: timedelta = timedelta(seconds=120)) -> CursorSeal:
        """The key derived from the seat's credentials (every seat of the mesh connects with the
        same); without credentials, a key of this process alone: its cursors continue on it only."""
        secret = _secret_of(options)
        if secret is None:
            log.info("the seat connects without credentials: its cursors continue on this seat only")
            secret = secrets.token_bytes(32)
        return cls(hmac.new(secret, PURPOSE, hashlib.sha256).digest(), ttl)

    def seal(self, continuation: Continuation) -> str:
        """The cursor of `continuation`, expiring `ttl` from now."""
        stamped = replace(continuation, expires=round(self.clock() + self.ttl.total_seconds(), 3))
        body = json.dumps(asdict(stamped), separators=(",", ":"), ensure_ascii=False).encode()
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def room(self, begun: Continuation) -> int:
        """The most bytes a cursor of the listing `begun` takes, its figures at their largest: what a
        page of it leaves for its items besides the envelope."""
        largest = replace(
            begun, page=LARGEST, position=LARGEST, floor=LARGEST, at_most=LARGEST, entries=LARGEST, malformed=LARGEST
        )
        return len(self.seal(largest)) + len(str(LARGEST))

    def open(self, cursor: str, given: Mapping[str, object], asker: Party | None) -> Continuation:
        """The continuation `cursor` carries, for the party that began its listing only; the fields
        given with it must be those of the listing. `CursorGone` for any cursor not sealed by a seat
        of the mesh, altered, expired, or another party's."""
        continuation = self._unsealed(cursor)
        if continuation is None or continuation.party != party_of(asker) or continuation.expires <= self.clock():
            raise CursorGone()
        differing = sorted(f for f, v in given.items() if continuation.given.get(f, _DEFAULTS.get(f)) != v)
        if differing:
            raise RequestError(f"{', '.join(differing)} differ from the listing the cursor continues; omit them")
        return continuation

    def _unsealed(self, cursor: str) -> Continuation | None:
        body_text, _, mac_text = cursor.partition(".")
        try:
            body, mac = _unb64(body_text), _unb64(mac_text)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            return Continuation(**json.loads(body))
        except (ValueError, TypeError):  # sealed by a seat of another version
            return None

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self.key, body, hashlib.sha256).digest()[:MAC_BYTES]


def _secret_of(options: BusOptions) -> bytes | None:
    """The seat's own secret: the nkey seed of its credentials file or seed file, else its password
    or token; None when it connects without one."""
    for path in (options.creds, options.nkey_seed):
        if path is not None:
            text = path.read_bytes()
            found = _USER_SEED.search(text)
            return found.group(0) if found else text.strip()
    for given in (options.password, options.token):
        if given is not None:
            return f"{options.user or ''}:{given.get_secret_value()}".encode()
    return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """The bytes `text` encodes, if it is their one encoding (the decoder ignores a last character's
    spare bits: another text would name the same bytes)."""
    if not text.isascii():
        raise ValueError(text)
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError(text)
    return data
