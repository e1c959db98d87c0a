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
- `contributes`: collection name to a list of items, literal text (no placeholders). Each
  collection's items go to `<node>.<collection>.<module>` in the collect bucket.
- `on_change`: `command` is an argv list run without a shell; `timeout_seconds` 1 to 3600,
  default 30.

Only `*.json` files not starting with `.` are read, so an editor's or an atomic replace's
temporary file is never taken for a manifest. A file that cannot be read is reported with its
path and what is wrong, and does not stop the other modules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from provisioner_client.errors import ManifestError
from registry.errors import PlaceholderError
from registry.placeholders import Placeholder, find_placeholders

_MODULE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class OnChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...] = Field(min_length=1)
    timeout_seconds: float = Field(default=30, ge=1, le=3600)

    @field_validator("command")
    @classmethod
    def _no_empty_arguments(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value[0]:
            raise ValueError("the command's program must not be empty")
        return value


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str = Field(pattern=_MODULE)
    env: dict[str, str] = Field(default_factory=dict)
    contributes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    on_change: OnChange | None = None

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


@dataclass(frozen=True)
class LoadedManifest:
    path: Path
    manifest: Manifest

    @property
    def module(self) -> str:
        return self.manifest.module


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


def manifest_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json") if not p.name.startswith(".") and p.is_file())


def load_manifests(folder: Path) -> Manifests:
    """Every manifest of `folder`; a bad file becomes an error, never stops the others."""
    found = Manifests()
    for path in manifest_files(folder):
        try:
            loaded = load_manifest(path)
        except ManifestError as err:
            found.errors.append(err)
            continue
        if loaded.module in found.modules:
            first = found.modules[loaded.module].path.name
            found.errors.append(ManifestError(path, f"module {loaded.module!r} is already declared by {first}"))
            continue
        found.modules[loaded.module] = loaded
    return found


def load_manifest(path: Path) -> LoadedManifest:
    try:
        document = json.loads(path.read_bytes())
    except OSError as err:
        raise ManifestError(path, f"cannot be read: {err.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ManifestError(path, f"is not valid JSON: {err}", module=path.stem) from None
    module = _module_of(document, path)
    try:
        manifest = Manifest.model_validate(document)
    except ValidationError as err:
        raise ManifestError(path, _describe(err), module=module) from None
    for name, text in sorted(manifest.env.items()):
        try:
            list(find_placeholders(text))
        except PlaceholderError as err:
            raise ManifestError(path, f"env {name}: {err}", module=module) from None
    return LoadedManifest(path, manifest)


def _module_of(document: object, path: Path) -> str:
    if isinstance(document, dict) and isinstance(document.get("module"), str) and document["module"]:
        return str(document["module"])
    return path.stem


def _describe(err: ValidationError) -> str:
    reasons = []
    for error in err.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        reasons.append(f"{where}: {message}" if where else message)
    return "; ".join(reasons)
