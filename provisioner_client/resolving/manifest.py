"""Module manifests: a folder of JSON files, one module each.

A manifest names its module, the environment it wants materialized (values may hold
placeholders `${<kind>:<name>}` anywhere in their text, `$$` for a literal `$`), what it
contributes to which collections, and an optional command to run after its env file changed:

    {
      "module": "app",
      "env": {
        "DATABASE_URL": "postgres://app:${secret:db-password}@${bound:postgres:db:host}/app",
        "STATE_DIR": "${dir:state}"
      },
      "contributes": {"shell:zsh:normal": ["alias ll='ls -l'"]},
      "on_change": {"command": ["systemctl", "try-restart", "app.service"], "timeout_seconds": 30}
    }

- `module`: letters, digits, `-`, `_`, `.` (not first); it names the env file `<module>.env`.
- `env`: variable names are `[A-Za-z_][A-Za-z0-9_]*`; values are text, never NUL.
- `contributes`: collection name to a list of items, literal text (no placeholders), never NUL.
  Each collection's items go to `<node>.<collection>.<module>` in the collect bucket.
- `on_change`: `command` is an argv list run without a shell, never NUL; `timeout_seconds` 1
  to 3600, default 30. Its optional `health` (`command`, `timeout_seconds` as the action's) is
  run after the action: the change succeeded only if both exit 0 (`provisioner_client.rollout`).
- `rollout` (optional, `provisioner_client.rollout`): how a change of the module reaches the
  fleet. `budget`: at most that many nodes change it at once, an integer >= 1 or `"P%"` (P of
  1 to 100: that share of the nodes holding a claim of the module, at least 1); `rollback`: on
  an abort, a node that changed goes back to its last good env file and runs the action again.
  A module without a budget may have `splay_seconds` (a random delay up to it before the change)
  and `wait_seconds` (a quiet period: the change waits until its values stood that long, at most
  `wait_max_seconds` after the first change of the burst), each 0 to 3600.

Every string of a manifest is UTF-8 text: a lone surrogate escape (`"\\ud800"`), which JSON
allows but no file, key or argument can carry, is refused by the JSON reader itself.

Only `*.json` files not starting with `.` are read, so an editor's or an atomic replace's
temporary file is never taken for a manifest. A file that cannot be read is reported with its
path and what is wrong, and does not stop the other modules. Bounds: a file of more than
`MAX_MANIFEST_BYTES` (1 MiB) is refused unread, its JSON nests at most
`registry.contract.bounded_json.MAX_DEPTH` levels, a placeholder's or collection's name escapes to at most
`MAX_NAME_TOKEN` bytes (a key stays far below NATS's control line), and each value written
for it (a need, a contribution) fits `MAX_VALUE_BYTES`, the buckets' value limit. Whatever is
not a regular file (a FIFO, a device, a socket, a folder or a symbolic link to one) is reported
and never opened: a FIFO would block the reader.

A module whose file cannot be read is *held*: it keeps its keys, env file and applied record as
they were. Which module that is comes from `remembered` (file name to the module it declared the
last time it was read, kept by the caller in the materialize folder's ledger), else from the
JSON's `module` field, else from the file name.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from provisioner_client.errors import ManifestError
from registry.contract import (
    CollectValue,
    JsonRefused,
    NeedValue,
    Placeholder,
    buckets,
    encode_token,
    find_placeholders,
    kind_of,
    read_json,
    to_json,
)
from registry.errors import PlaceholderError

MAX_MANIFEST_BYTES = 1024 * 1024
MAX_NAME_TOKEN = 512
MAX_VALUE_BYTES = 64 * 1024

MODULE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


_BUDGET = re.compile(r"^(?P<percent>[1-9][0-9]?|100)%$")


def budget_problem(value: object) -> str | None:
    """Why `value` is no rollout budget (an integer >= 1, or `"P%"` with P of 1 to 100), if it is not."""
    if isinstance(value, bool):
        return 'a budget is an integer >= 1 or a share "P%", not true or false'
    if isinstance(value, int):
        return None if value >= 1 else f"a budget of {value} nodes admits nobody: it must be >= 1"
    if isinstance(value, str):
        if value.isdigit():
            return None if int(value) >= 1 else "a budget of 0 nodes admits nobody: it must be >= 1"
        if _BUDGET.fullmatch(value.strip()):
            return None
        return f'budget {value[:40]!r} is neither an integer >= 1 nor a share "P%" with P of 1 to 100'
    return 'a budget is an integer >= 1 or a share "P%"'


class HealthCheck(BaseModel):
    """A command run after the change action: the change succeeded only if it exits 0 in time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...] = Field(min_length=1)
    timeout_seconds: float = Field(default=30, ge=1, le=3600)

    @field_validator("command")
    @classmethod
    def _no_empty_arguments(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _checked_command(value)


class Rollout(BaseModel):
    """How a change of the module reaches the fleet (`provisioner_client.rollout`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget: int | str | None = None
    splay_seconds: float = Field(default=0, ge=0, le=3600)
    wait_seconds: float = Field(default=0, ge=0, le=3600)
    wait_max_seconds: float | None = Field(default=None, ge=0, le=3600)
    rollback: bool = False

    @field_validator("budget", mode="before")
    @classmethod
    def _a_budget(cls, value: object) -> object:
        problem = None if value is None else budget_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _splay_and_wait_without_budget(self) -> Rollout:
        if self.budget is not None and (self.splay_seconds or self.wait_seconds or self.wait_max_seconds):
            raise ValueError("splay_seconds and wait_seconds are for a module without a budget: give one or the other")
        if self.wait_max_seconds is not None and self.wait_max_seconds < self.wait_seconds:
            raise ValueError(
                f"wait_max_seconds ({self.wait_max_seconds:g}) must be at least wait_seconds ({self.wait_seconds:g})"
            )
        return self


class OnChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...] = Field(min_length=1)
    timeout_seconds: float = Field(default=30, ge=1, le=3600)
    health: HealthCheck | None = None

    @field_validator("command")
    @classmethod
    def _no_empty_arguments(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _checked_command(value)


def _checked_command(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value[0]:
        raise ValueError("the command's program must not be empty")
    if any("\0" in argument for argument in value):
        raise ValueError("the command's arguments must not hold a NUL character")
    return value


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str = Field(pattern=MODULE_PATTERN)
    env: dict[str, str] = Field(default_factory=dict)
    contributes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    on_change: OnChange | None = None
    rollout: Rollout | None = None

    @field_validator("env")
    @classmethod
    def _env_names_and_values(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.fullmatch(_ENV_NAME, name):
                raise ValueError(f"env name {name!r} must match [A-Za-z_][A-Za-z0-9_]*")
            if "\0" in text:
                raise ValueError(f"env {name}: a value must not hold a NUL character")
        return value

    @field_validator("contributes")
    @classmethod
    def _collections_named(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        if "" in value:
            raise ValueError("a collection name must not be empty")
        for collection, items in value.items():
            if any("\0" in item for item in items):
                raise ValueError(f"collection {collection[:60]!r}: an item holds a NUL character")
        return value

    @cached_property
    def _placeholders(self) -> dict[Placeholder, tuple[str, ...]]:
        """Each placeholder of the env, with the variables it is used in, in a stable order."""
        used: dict[Placeholder, list[str]] = {}
        for name, text in sorted(self.env.items()):
            for placeholder in find_placeholders(text):
                if name not in used.setdefault(placeholder, []):
                    used[placeholder].append(name)
        return {p: tuple(names) for p, names in sorted(used.items())}

    def placeholders(self) -> dict[Placeholder, tuple[str, ...]]:
        """Each placeholder of the env, with the variables it is used in, in a stable order."""
        return self._placeholders

    @cached_property
    def need_values(self) -> dict[Placeholder, bytes]:
        """Each placeholder's value in the needs bucket, encoded once."""
        used = self.placeholders().items()
        return {p: to_json(NeedValue(placeholder=str(p), used_in=used_in)) for p, used_in in used}

    @cached_property
    def contribution_values(self) -> dict[str, bytes]:
        """Each collection's value in the collect bucket, encoded once."""
        return {collection: to_json(CollectValue(items=items)) for collection, items in self.contributes.items()}


@dataclass(frozen=True)
class LoadedManifest:
    path: Path
    manifest: Manifest
    digest: str = ""  # of the file's bytes
    _keys: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def module(self) -> str:
        return self.manifest.module

    def needs(self, node: str) -> dict[str, bytes]:
        """The module's keys and values in the needs bucket (built once per node)."""
        found = self._keys.get(("needs", node))
        if found is None:
            shape, module = buckets.NEEDS.shape, self.module
            found = self._keys[("needs", node)] = {
                shape.build(node=node, module=module, kind=p.kind, name=p.name): value
                for p, value in self.manifest.need_values.items()
            }
        return found

    def contributions(self, node: str) -> dict[str, bytes]:
        """The module's keys and values in the collect bucket (built once per node)."""
        found = self._keys.get(("collect", node))
        if found is None:
            shape, module = buckets.COLLECT.shape, self.module
            found = self._keys[("collect", node)] = {
                shape.build(node=node, collection=collection, contributor=module): value
                for collection, value in self.manifest.contribution_values.items()
            }
        return found


@dataclass
class Manifests:
    """The modules declared in a folder, and the files that could not be read.

    `held` names the modules of unreadable files where the name could still be told (from the
    JSON's `module` or else the file name): their previous state is kept, not removed.
    """

    modules: dict[str, LoadedManifest] = field(default_factory=dict)
    errors: list[ManifestError] = field(default_factory=list)

    @property
    def held(self) -> dict[str, ManifestError]:
        return {e.module: e for e in self.errors if e.module is not None and e.module not in self.modules}

    def declared(self) -> dict[str, str]:
        """File name to the module it declares (or, unreadable, holds): what to remember."""
        files = {e.path.name: e.module for e in self.errors if e.module is not None}
        return files | {loaded.path.name: module for module, loaded in self.modules.items()}


def manifest_files(folder: Path) -> list[Path]:
    """Every `*.json` entry of `folder` not starting with `.`, whatever its type (never opened here)."""
    return sorted(p for p in folder.glob("*.json") if not p.name.startswith("."))


def load_manifests(folder: Path, remembered: Mapping[str, str] | None = None) -> Manifests:
    """Every manifest of `folder`; a bad file becomes an error, never stops the others."""
    found = Manifests()
    for path in manifest_files(folder):
        try:
            loaded = load_manifest(path, (remembered or {}).get(path.name))
        except ManifestError as err:
            found.errors.append(err)
            continue
        if loaded.module in found.modules:
            first = found.modules[loaded.module].path.name
            found.errors.append(ManifestError(path, f"module {loaded.module!r} is already declared by {first}"))
            continue
        found.modules[loaded.module] = loaded
    return found


_PARSED: dict[tuple[str, str], LoadedManifest] = {}  # by path and digest of the bytes: content-addressed
_PARSED_MAX = 4096


def load_manifest(path: Path, remembered: str | None = None) -> LoadedManifest:
    """The manifest at `path`; a `ManifestError` holds `remembered` (else what the file names).

    A file whose bytes were parsed before (by its path and their digest) is not parsed again: a
    process reconciling again (watch mode) reads each file but validates only what changed."""
    held = remembered or _plain(path.stem)
    data = _read_bounded(path, held)
    digest = hashlib.sha256(data).hexdigest()
    known = _PARSED.get((str(path), digest))
    if known is not None:
        return known
    loaded = _parsed(path, data, digest, remembered, held)
    if len(_PARSED) >= _PARSED_MAX:
        del _PARSED[next(iter(_PARSED))]
    _PARSED[(str(path), digest)] = loaded
    return loaded


def _parsed(path: Path, data: bytes, digest: str, remembered: str | None, held: str | None) -> LoadedManifest:
    try:
        document = read_json(data)
    except JsonRefused as err:
        raise ManifestError(path, err.reason, module=held) from None
    module = remembered or _module_of(document, path)
    try:
        manifest = Manifest.model_validate(document)
    except ValidationError as err:
        raise ManifestError(path, _describe(err), module=module) from None
    for name, text in sorted(manifest.env.items()):
        try:
            list(find_placeholders(text))
        except PlaceholderError as err:
            raise ManifestError(path, f"env {name}: {err}", module=module) from None
    problem = _too_large(manifest)
    if problem:
        raise ManifestError(path, problem, module=module)
    return LoadedManifest(path, manifest, digest)


def _read_bounded(path: Path, held: str | None) -> bytes:
    """The bytes of a regular file of at most `MAX_MANIFEST_BYTES`; anything else is never read."""
    try:
        kind = _kind_of(path.stat().st_mode)
        if kind is None and path.is_symlink() and path.is_dir():
            kind = "a symbolic link to a folder"
        if kind is not None:
            raise ManifestError(path, f"is {kind}, not a regular file: not read", module=held)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # non-blocking: a FIFO swapped in never blocks
    except OSError as err:
        raise ManifestError(path, f"cannot be read: {err.strerror}", module=held) from None
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(file.fileno())
        kind = _kind_of(status.st_mode)
        if kind is not None:
            raise ManifestError(path, f"is {kind}, not a regular file: not read", module=held)
        if status.st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(path, _too_long(status.st_size), module=held)
        data = file.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(path, _too_long(len(data)), module=held)
    return data


def _too_long(size: int) -> str:
    return f"is {size:,} bytes or more, larger than the {MAX_MANIFEST_BYTES:,} a manifest may be: not read"


def _kind_of(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    return None if stat.S_ISREG(mode) else kind_of(mode)


def _too_large(manifest: Manifest) -> str | None:
    """Why a key or value the manifest would write exceeds the bus's bounds, if it does."""
    for placeholder, value in manifest.need_values.items():
        if len(encode_token(placeholder.name)) > MAX_NAME_TOKEN:
            return f"placeholder ${{{placeholder.kind}:{placeholder.name[:40]}...}} has a name longer than a key may be"
        if len(value) > MAX_VALUE_BYTES:
            return f"placeholder {str(placeholder)[:60]} is used in too many variables for one value"
    for collection, value in manifest.contribution_values.items():
        if len(encode_token(collection)) > MAX_NAME_TOKEN:
            return f"collection {collection[:40]!r}... has a name longer than a key may be"
        if len(value) > MAX_VALUE_BYTES:
            return f"the items contributed to {collection[:60]!r} exceed {MAX_VALUE_BYTES:,} bytes"
    return None


def _module_of(document: object, path: Path) -> str | None:
    declared = document.get("module") if isinstance(document, dict) else None
    return _plain(declared) if isinstance(declared, str) and _plain(declared) else _plain(path.stem)


def _plain(name: str) -> str | None:
    """`name` if it is a module name (so it names a file inside the materialize folder)."""
    return name if re.fullmatch(MODULE_PATTERN, name) else None


def _describe(err: ValidationError) -> str:
    reasons = []
    for error in err.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        reasons.append(f"{where}: {message}" if where else message)
    return "; ".join(reasons)
