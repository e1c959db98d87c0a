"""Each party's nkey: issued once, kept in a seed file, reused on every later run.

A seed is a secret: it is written with mode 0600 and never logged. Reusing the seeds already in
the output folder (or in `--keys`) makes `mesh-provisioner grants` reproducible, and a node added
later leaves every other party's key as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import nkeys

from registry.access.parties import Party
from registry.contract import read_bounded
from registry.errors import RegistryError, SettingsError

SEED_SUFFIX = ".nk"
MAX_SEED_BYTES = 1024  # a seed is 58 characters
MAX_ISSUED_BYTES = 128 << 20  # a file `grants` wrote: a JWT, creds, a server configuration (as grants.json)


class CredentialError(RegistryError):
    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"seed file {path}: {reason}")


def seed_path(folder: Path, party: Party) -> Path:
    return folder / f"{party.label}{SEED_SUFFIX}"


def issue_user_keys(parties: Iterable[Party], keys: Path) -> dict[Party, str]:
    """Each party's user public key, from its seed in `keys`, else from a new seed written there."""
    keys.mkdir(parents=True, exist_ok=True)
    return {party: user_key_at(seed_path(keys, party)) for party in parties}


def user_key_at(path: Path) -> str:
    """The user public key of the seed at `path`, from a new seed written there when none is."""
    if path.exists():
        return public_key(read_seed(path, nkeys.PREFIX_BYTE_USER), path)
    seed = new_seed(nkeys.PREFIX_BYTE_USER)
    write_secret(path, seed + b"\n")
    return public_key(seed, path)


def read_seed(path: Path, prefix: int) -> bytes:
    """The nkey seed of the kind `prefix` names (nkeys.PREFIX_BYTE_OPERATOR, _ACCOUNT, _USER) kept
    in the file at `path`, read no further than `MAX_SEED_BYTES`; `OSError` when it cannot be read,
    `CredentialError` when it holds no such seed."""
    seed = read_bounded(path, MAX_SEED_BYTES).strip()
    try:
        found, _ = nkeys.decode_seed(bytearray(seed))
    except Exception:  # nkeys raises several unrelated classes for a damaged seed
        raise CredentialError(path, "not an nkey seed") from None
    if found != prefix:
        raise CredentialError(path, "an nkey seed of another kind (operator, account or user)")
    return seed


def read_issued(path: Path) -> bytes | None:
    """A file the grants command wrote before and reads back to keep what is unchanged (a JWT,
    creds, a server configuration), read no further than `MAX_ISSUED_BYTES`; None when there is
    none. One that cannot be read (a FIFO or a folder in its place, too large) is a `SettingsError`
    naming it: it is neither kept nor written over blindly."""
    try:
        return read_bounded(path, MAX_ISSUED_BYTES)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SettingsError(str(path), f"cannot be read: {err.strerror or err}") from None


def issued_text(path: Path) -> str | None:
    """`read_issued` as text (bytes that are not UTF-8 replaced: such a file is not what was
    written, and is written again)."""
    held = read_issued(path)
    return None if held is None else held.decode("utf-8", errors="replace")


def new_seed(prefix: int) -> bytes:
    """A fresh seed of the kind `prefix` names (nkeys.PREFIX_BYTE_OPERATOR, _ACCOUNT, _USER)."""
    return bytes(nkeys.encode_seed(os.urandom(32), prefix))


def public_key(seed: bytes, source: Path) -> str:
    try:
        return bytes(nkeys.from_seed(bytearray(seed)).public_key).decode()
    except Exception as err:  # nkeys raises several unrelated classes for a damaged seed
        raise CredentialError(source, f"not an nkey seed ({type(err).__name__})") from None


def write_secret(path: Path, data: bytes) -> None:
    """Writes `data` readable by its owner only, from the first byte on."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    path.chmod(0o600)
