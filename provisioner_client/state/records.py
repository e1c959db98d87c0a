"""Every file the node's client keeps in its env folder besides the env files: one record type, the
records by name and schema, the digest key and the last good env files.

`Record` is one record of the node's own: a JSON file of one schema, bounded in size.
`Record.read` takes only a regular file (`files.read_regular`: never a link, a FIFO or a folder),
at most `limit` bytes, parsed as bounded JSON and validated by the record's pydantic model;
`Record.write` writes it atomically (`files.write_atomically`, mode 0600). A file that cannot be
read is a `MaterializeError` naming it; one that is JSON but not a record of its kind is a
`NotARecord` (a `MaterializeError`), so that an owner can tell "unreadable" from "of another shape".

The records:

- `LEDGER` (`.mesh-provisioner-client.json`): the env files the client wrote, and which module
  each manifest file declared (`materializing.envfile`);
- `MEMORY` (`.mesh-provisioner-client.state.json`): the incremental memory of the last reconcile
  (`resolving.memory`);
- `WAITING` (`.mesh-provisioner-client.waiting.json`): writes that wait for the hub
  (`resolving.own`);
- `REFUSALS` (`.mesh-provisioner-client.refused.json`): writes the bus refused
  (`resolving.own`);
- `ACTIONS` (`.mesh-provisioner-client.actions.json`): the change action each module's env file
  last had run on it (`materializing.envfile`);
- `ROLLOUT` (`.mesh-provisioner-client.rollout.json`): the node's rollouts by module
  (`rollout.gate`);
- the digest key (`KEY`: 32 random bytes, mode 0600, made on first use, never replaced) and the
  keyed digest it gives (`digest`): an unsalted hash of a file holding a secret could be searched
  offline, an HMAC keyed with a secret of the node's own cannot;
- the last good env files (`LAST_GOOD` + module name).

Each record's schema is the JSON the client has always written, so that a node upgraded in place
reads what the previous version left. The temporary files a killed client left, of any of them
or of an env file, are told apart here (`is_leftover`) and removed at the next start.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from provisioner_client.errors import MaterializeError
from provisioner_client.state import files
from registry.contract import MAX_PAGE_BYTES, ActionRecord, JsonRefused, read_json, to_json

M = TypeVar("M", bound=BaseModel)


class NotARecord(MaterializeError):
    """The file is JSON, but not a record of its kind."""


@dataclass(frozen=True)
class Record(Generic[M]):
    """A record's file `name` in the env folder, its `model`, its bound in bytes, `what` it is
    called in an error and the `shape` it must have. `readable`: written indented, for an operator."""

    name: str
    model: type[M]
    limit: int
    what: str
    shape: str
    readable: bool = False

    def path(self, folder: Path) -> Path:
        return folder / self.name

    def read(self, folder: Path) -> M | None:
        """The record kept in `folder`; None when there is none."""
        path = self.path(folder)
        found = files.read_regular(path, limit=self.limit, what=self.what)
        if found is None:
            return None
        try:
            document = read_json(found.content, max_bytes=self.limit)
        except JsonRefused as err:
            raise MaterializeError(path, f"cannot be read: {err.reason}", what=self.what) from None
        try:
            return self.model.model_validate(document)
        except ValidationError:
            raise NotARecord(path, f"is not a record of {self.shape}", what=self.what) from None

    def write(self, folder: Path, value: M) -> None:
        """Keeps `value` in `folder`, on disk before this returns."""
        files.make_folder(folder)
        files.write_atomically(self.path(folder), self._content(value), what=self.what)

    def remove(self, folder: Path) -> bool:
        """The record removed; whether one was there."""
        return files.remove(self.path(folder), what=self.what)

    def _content(self, value: M) -> bytes:
        if not self.readable:
            return to_json(value)
        document = value.model_dump(mode="json")
        return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


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


class _Document(BaseModel):
    model_config = ConfigDict(extra="ignore")


# -- the ledger ---------------------------------------------------------------------------------


class LedgerDocument(_Document):
    """Env file name to module, manifest file name to the module it declared. Its entries are
    judged one by one by their owner (`envfile`), which reports and ignores a wrong one: a ledger
    of the wrong shape is read as empty, never as an error that would stop every reconcile."""

    files: dict[str, JsonValue] = Field(default_factory=dict)
    manifests: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _sections_or_nothing(cls, document: object) -> dict[str, object]:
        found = document if isinstance(document, dict) else {}
        return {section: found[section] for section in ("files", "manifests") if isinstance(found.get(section), dict)}


LEDGER = Record(".mesh-provisioner-client.json", LedgerDocument, 1024 * 1024, "ledger", "files", readable=True)


# -- the incremental memory ---------------------------------------------------------------------


class BucketDocument(_Document):
    stamp: int
    digest: str
    listed_at: float
    items: list[tuple[str, int, str]] | None = None  # key, revision, value


class MemoryDocument(_Document):
    version: int
    node: str
    buckets: dict[str, BucketDocument]
    world: str | None = None
    world_parts: dict[str, JsonValue] = Field(default_factory=dict)
    sources: list[list[str]] = Field(default_factory=list)
    modules: dict[str, tuple[str, float] | tuple[str, float, str]] = Field(default_factory=dict)  # inputs, at, manifest


MEMORY = Record(".mesh-provisioner-client.state.json", MemoryDocument, MAX_PAGE_BYTES, "state file", "remembered state")


# -- writes waiting for the hub, writes refused -------------------------------------------------


class WaitingPart(_Document):
    """One kind of write that waits: since when, how the client knows, which keys (and for applied
    the records themselves, key to stored JSON)."""

    model_config = ConfigDict(frozen=True)

    since: str
    how: str
    keys: tuple[str, ...] = ()
    records: dict[str, str] = Field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        document: dict[str, object] = {"since": self.since, "how": self.how, "keys": list(self.keys)}
        if self.records:
            document["records"] = dict(sorted(self.records.items()))
        return document


class WaitingDocument(_Document):
    node: str
    parts: dict[str, WaitingPart]


WAITING = Record(
    ".mesh-provisioner-client.waiting.json", WaitingDocument, 1024 * 1024, "record of waiting writes", "waiting writes"
)


class RefusalsDocument(_Document):
    """What the last reconcile of `node` found refused: bucket name to the server's answer, and when."""

    node: str
    at: str
    buckets: dict[str, str]

    def as_json(self) -> dict[str, object]:
        return {"at": self.at, "buckets": dict(sorted(self.buckets.items()))}


REFUSALS = Record(
    ".mesh-provisioner-client.refused.json", RefusalsDocument, 64 * 1024, "refusals file", "refused writes"
)


# -- change actions -----------------------------------------------------------------------------


class ActionsDocument(_Document):
    """The change action each module's env file last had run on it, by module: the node's own word
    of what it acted on, whatever a bus rolled back to an earlier prefix says."""

    modules: dict[str, ActionRecord] = Field(default_factory=dict)


ACTIONS = Record(
    ".mesh-provisioner-client.actions.json",
    ActionsDocument,
    4 * 1024 * 1024,
    "record of change actions",
    "change actions",
)


# -- rollouts -----------------------------------------------------------------------------------

Stage = Literal["waiting", "running", "done", "failed", "resumed", "withdrawn"]


class ModuleRollout(_Document):
    """One module's rollout as this node knows it.

    `stage`: `waiting` (its claim queued), `running` (admitted: file, action, health), `done`
    (succeeded; `claimed` until its claim is deleted), `failed` (its claim kept, failed),
    `resumed` (failed, then resumed: its claim deleted), `withdrawn` (the change went away
    before it ran). `claimed`: a claim of the node's stands in the fleet bucket (to renew or delete)."""

    change: str = ""
    digest: str = ""
    queued: int = 0
    stage: Stage = "waiting"
    claimed: bool = False
    revision: int = 0  # the claim's revision as the node last wrote it: one found below says the bus lost it
    renewed_at: datetime | None = None
    started: bool = False
    action: ActionRecord | None = None
    reason: str = ""
    saw_hold: bool = False
    under_claim: bool = False  # the change was applied under a claim: an abort may roll it back
    rolled_back: bool = False
    unreachable_since: datetime | None = None
    pacing_change: str = ""  # splay and wait: the change they are timing
    pacing_applied: bool = False  # that change was let through: its burst is over
    burst_since: datetime | None = None
    changed_at: datetime | None = None
    splay_until: datetime | None = None


class RolloutRecord(_Document):
    modules: dict[str, ModuleRollout] = Field(default_factory=dict)


ROLLOUT = Record(
    ".mesh-provisioner-client.rollout.json", RolloutRecord, 4 * 1024 * 1024, "rollout record", "rollouts by module"
)


# -- last good env files ------------------------------------------------------------------------

LAST_GOOD = ".mesh-provisioner-client.last-good."
_LAST_GOOD_BYTES = 64 * 1024 * 1024
_LAST_GOOD_WHAT = "last good env file"


def keep_last_good(folder: Path, module: str, content: bytes) -> None:
    """What the module's env file held before a change, kept to put back (secrets included: mode 0600)."""
    files.write_atomically(_last_good_path(folder, module), content, what=_LAST_GOOD_WHAT)


def last_good(folder: Path, module: str) -> bytes | None:
    found = files.read_regular(_last_good_path(folder, module), limit=_LAST_GOOD_BYTES, what=_LAST_GOOD_WHAT)
    return found.content if found is not None else None


def forget_last_good(folder: Path, module: str) -> None:
    files.remove(_last_good_path(folder, module), what=_LAST_GOOD_WHAT)


def _last_good_path(folder: Path, module: str) -> Path:
    return folder / f"{LAST_GOOD}{module}"


# -- leftovers ----------------------------------------------------------------------------------

_NAMES = frozenset(record.name for record in (LEDGER, MEMORY, WAITING, REFUSALS, ACTIONS, ROLLOUT)) | {KEY}

# The names temporary files had before `files`: mkstemp's (`.<name>.<8>.tmp`, the key's
# `<name>.<8>.tmp`) and the state file's writer's pid (`<name>.<pid>.tmp`).
_BEFORE = (
    re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp"),
    re.compile(rf"({re.escape(KEY)})\.[a-z0-9_]{{8}}\.tmp"),
    re.compile(rf"({re.escape(MEMORY.name)})\.[0-9]+\.tmp"),
)


def is_own(name: str, *, is_env_file: Callable[[str], bool]) -> bool:
    """A file the client keeps in the env folder: one of its records, the key, a last good env
    file, or (as `is_env_file` judges) a module's env file."""
    return name in _NAMES or name.startswith(LAST_GOOD) or is_env_file(name)


def is_leftover(name: str, *, is_env_file: Callable[[str], bool]) -> bool:
    """A temporary file of one of the client's own files, by the name it was given now or before."""
    target = files.target_of(name)
    if target is not None:
        return is_own(target, is_env_file=is_env_file)
    return any(
        (found := before.fullmatch(name)) is not None and is_own(found[1], is_env_file=is_env_file)
        for before in _BEFORE
    )


def remove_leftovers(folder: Path, *, is_env_file: Callable[[str], bool]) -> list[Path]:
    """Removes the temporary files a killed client left in `folder`, of its records and its env
    files (only while holding the node's lease: no write of another client is under way)."""
    return files.remove_leftovers(folder, lambda name: is_leftover(name, is_env_file=is_env_file))
