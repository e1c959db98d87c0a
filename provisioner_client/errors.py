"""The errors of the node client.

    ClientError
    ├── ForeignKeyError     a key outside `<node>.>` of this node, refused before the bus
    ├── ManifestError       a manifest that cannot be read, naming the file and what is wrong
    ├── MaterializeError    a file of the client's own (an env file, the ledger, the digest key, the
    │                       state file) that cannot be read or written, or is not the client's to write
    └── NodeHeld            another client holds this node's lease, naming it (host, pid, since)

Bus failures are `registry.errors.BusError` and settings that cannot be read
`registry.errors.SettingsError`, shared with the server; the CLI catches them at its edge.
"""

from __future__ import annotations

from pathlib import Path

REASON_CHARS = 500


def capped(text: str, limit: int = REASON_CHARS) -> str:
    """`text`, cut to `limit` characters with how much was left out: a reason never grows with its input."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


class ClientError(Exception):
    """Base of every error the node client raises."""


class ForeignKeyError(ClientError):
    def __init__(self, bucket: str, key: str, node: str) -> None:
        self.bucket = bucket
        self.key = key
        self.node = node
        super().__init__(f"refused to write {bucket} key {key!r}: it is outside this node's keys ({node!r})")


class ManifestError(ClientError):
    def __init__(self, path: Path, reason: str, *, module: str | None = None) -> None:
        self.path = path
        self.reason = capped(reason)
        self.module = module
        super().__init__(f"manifest {path}: {self.reason}")


class MaterializeError(ClientError):
    """A file of the client's own (`what`: an env file, the ledger, the digest key, the state
    file, the env folder) that cannot be read or written, or is not the client's to write."""

    def __init__(self, path: Path, reason: str, *, what: str = "env file") -> None:
        self.path = path
        self.reason = reason
        self.what = what
        super().__init__(f"{what} {path}: {reason}")


class NodeHeld(ClientError):
    def __init__(self, node: str, holder: str) -> None:
        self.node = node
        self.holder = holder
        super().__init__(f"node {node!r} is held by another client: {holder}; stop it, or wait for its lease to expire")
