"""The node-local digest key (`KEY`: 32 random bytes, mode 0600, made on first use, never replaced)
and the keyed digest it gives: an unsalted hash of a file holding a secret could be searched
offline, an HMAC keyed with a secret of the node's own cannot.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from provisioner_client.errors import MaterializeError
from provisioner_client.state import files

KEY = ".mesh-provisioner-client.key"
KEY_BYTES = 32
_KEY_READ = 4096  # a key file longer than a key is refused with advice, not read whole
_WHAT = "digest key"


def digest(content: bytes, key: bytes) -> str:
    """The keyed digest of `content`: without the node's key it tells nothing of the content."""
    return "hmac-sha256:" + hmac.new(key, content, hashlib.sha256).hexdigest()


def read_key(folder: Path) -> bytes | None:
    """The node's key; None when there is none yet."""
    path = folder / KEY
    found = files.read_regular(path, limit=_KEY_READ, what=_WHAT)
    if found is None:
        return None
    if len(found.content) != KEY_BYTES:
        raise MaterializeError(
            path,
            f"is not {KEY_BYTES} bytes long; remove it and a new one is made (every module's digest changes once)",
            what=_WHAT,
        )
    return found.content


def create_key(folder: Path) -> bytes:
    """A new random key, linked into place only if none is there yet (never overwrites one)."""
    path = folder / KEY
    files.write_new(path, secrets.token_bytes(KEY_BYTES), what=_WHAT)
    key = read_key(folder)
    if key is None:  # linked above, or by another writer first, then removed at once
        raise MaterializeError(path, "vanished as soon as it was made", what=_WHAT)
    return key
