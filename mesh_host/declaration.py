"""The declaration: what a machine should hold, as a versioned, ordered list of resources.

    {"declaration": 1, "resources": [
      {"id": "app-etc", "type": "directory", "path": "/etc/app", "mode": "0755", "owner": "root:root",
       "unknown": "module", "module": "app", "knows": ["/etc/app/local.toml"]},
      {"id": "app-conf", "type": "file", "path": "/etc/app/app.toml", "content": "...", "mode": "0640"},
      {"id": "tool", "type": "archive", "path": "/opt/tool", "source": "/var/lib/mesh/tool.tar.gz",
       "sha256": "<64 hex digits>", "mode": "0755", "unknown": "move-out", "module": "app"},
      {"id": "app", "type": "service", "unit": "app.service", "state": "running", "enabled": true}]}

The order is stated, never derived: a file's folder, when declared, comes before it. Anything
outside this vocabulary refuses the whole declaration before anything is changed, each problem
named where it is (`resources[3].type: 'package' is not a resource type ...`).

Decided here:
- `id`, optional on every resource, is its stable name, unique in the declaration: messages and
  the footprint name the resource by it, and a path changed under the same id is that resource
  moved, not one removed and another made.
- `mode` is an octal string ("0644", "755"), 0000 to 7777; `owner` ("user", "user:group", names or
  numeric ids) is optional: left out, the owner is whoever runs the host and is not maintained.
- A directory (or an archive's folder) may say `unknown` (program, module or move-out); `module`
  names the module the folder belongs to, required for `module` and `move-out` (strays go to
  mesh-moved/<module>/). Without `unknown`, what the host did not write there is left as it is,
  never looked at nor moved (as declarations written before the policies expect).
- `knows` are absolute paths strictly inside their directory.
- Nothing is declared inside a `program` directory: everything in it is the program's, so the host
  writing there would fight the program over it.
- A service without `enabled` leaves the unit's enablement as it finds it.
- A path or unit is declared once; a declared path's folders are not declared as files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError

from mesh_host.errors import DeclarationRefused

VERSION = 1
MAX_DECLARATION_BYTES = 8 * 1024 * 1024
MAX_RESOURCES = 1000
MAX_CONTENT_BYTES = 1024 * 1024
MAX_KNOWS = 256
MAX_PATH_CHARS = 4096

UNKNOWN_POLICIES = ("program", "module", "move-out")
Policy = Literal["program", "module", "move-out"]
UNIT_TYPES = ("service", "socket", "timer", "path", "target", "mount")
_UNIT = re.compile(rf"^[A-Za-z0-9_:.\\@][A-Za-z0-9_:.\\@-]*\.({'|'.join(UNIT_TYPES)})$")
_MODULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ID = _MODULE
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = r"([A-Za-z_][A-Za-z0-9_.-]{0,31}\$?|[0-9]{1,10})"
_OWNER = re.compile(rf"^{_NAME}(:{_NAME})?$")


def _text(value: object, said: str) -> str:
    if not isinstance(value, str):
        raise ValueError(said)  # noqa: TRY004  # pydantic makes a validation error of a ValueError only
    return value


def _absolute_path(given: object) -> str:
    value = _text(given, "not a string: a path is an absolute path, such as /etc/app")
    if len(value) > MAX_PATH_CHARS or "\0" in value:
        raise ValueError(f"not a path (a NUL, or longer than {MAX_PATH_CHARS} characters)")
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is relative: give an absolute path, such as /etc/app")
    parts = value.split("/")[1:]
    if value == "/" or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{value!r} is not a plain absolute path (no '..', '.', '//', trailing '/', nor '/' itself)")
    return value


def _mode(given: object) -> int:
    value = _text(given, f'give the mode as an octal string, such as "0644", not {given!r}')
    if not re.fullmatch(r"[0-7]{3,4}", value):
        raise ValueError(f"{value!r} is not an octal mode from 0000 to 7777")
    return int(value, 8)


def _matching(pattern: re.Pattern[str], expected: str) -> Callable[[object], str]:
    """A validator of a string `pattern` matches whole, refusing any other value as not `expected`."""

    def check(value: object) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not {expected}")
        return value

    return check


_owner = _matching(_OWNER, 'an owner: give "user" or "user:group" (names or numeric ids)')
_module = _matching(_MODULE, "a module name (letters, digits, '_', '.', '-'; 64 at most)")
_id = _matching(_ID, "an id (letters, digits, '_', '.', '-'; 64 at most)")
_sha256 = _matching(_SHA256, "a sha256 digest (64 lowercase hex digits)")


def _unit(value: object) -> str:
    if not isinstance(value, str) or len(value) > 255 or not _UNIT.fullmatch(value):
        raise ValueError(f"{value!r} is not a unit name ending in .{', .'.join(UNIT_TYPES)}")
    return value


def _content(given: object) -> str:
    value = _text(given, "not a string: a file's content is its text")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise ValueError(f"not encodable as UTF-8: {err.reason}") from None
    if size > MAX_CONTENT_BYTES:
        raise ValueError(f"{size} bytes, more than the {MAX_CONTENT_BYTES} a file may hold here")
    return value


AbsolutePath = Annotated[str, PlainValidator(_absolute_path)]
Mode = Annotated[int, PlainValidator(_mode)]
Owner = Annotated[str, PlainValidator(_owner)]
Module = Annotated[str, PlainValidator(_module)]
Unit = Annotated[str, PlainValidator(_unit)]
Content = Annotated[str, PlainValidator(_content)]
Id = Annotated[str, PlainValidator(_id)]
Sha256 = Annotated[str, PlainValidator(_sha256)]


class _Resource(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: Id | None = None


class Directory(_Resource):
    """A folder: its mode (maintained), its owner (when given), how it treats what it did not write."""

    type: Literal["directory"]
    path: AbsolutePath
    mode: Mode
    owner: Owner | None = None
    unknown: Policy | None = None  # None: what the host did not write is left as it is, never looked at
    module: Module | None = None
    knows: list[AbsolutePath] = []

    @property
    def at(self) -> PurePosixPath:
        return PurePosixPath(self.path)

    @property
    def known(self) -> tuple[PurePosixPath, ...]:
        return tuple(PurePosixPath(path) for path in self.knows)


class File(_Resource):
    """A regular file: its whole content (UTF-8 text), its mode (maintained), its owner (when given)."""

    type: Literal["file"]
    path: AbsolutePath
    content: Content
    mode: Mode
    owner: Owner | None = None

    @property
    def at(self) -> PurePosixPath:
        return PurePosixPath(self.path)

    @property
    def data(self) -> bytes:
        return self.content.encode("utf-8")


class Archive(_Resource):
    """A tar on the machine (`source`, verified by its `sha256`) unpacked into the folder `path`: its
    members are the host's, put back when they drift; the rest follows `unknown` as a directory's."""

    type: Literal["archive"]
    path: AbsolutePath
    source: AbsolutePath
    sha256: Sha256
    mode: Mode  # the folder's and the member folders'; member files keep the archive's (filtered)
    owner: Owner | None = None
    unknown: Policy | None = None
    module: Module | None = None
    knows: list[AbsolutePath] = []

    @property
    def at(self) -> PurePosixPath:
        return PurePosixPath(self.path)

    @property
    def known(self) -> tuple[PurePosixPath, ...]:
        return tuple(PurePosixPath(path) for path in self.knows)


class Service(_Resource):
    """A systemd unit: running or stopped, enabled or not (left as it is when not said)."""

    type: Literal["service"]
    unit: Unit
    state: Literal["running", "stopped"]
    enabled: bool | None = None


Resource = Directory | File | Archive | Service
PathResource = Directory | File | Archive
Folder = Directory | Archive  # what holds files the host did not write, and says what it does with them
_MODELS: dict[str, type[Directory] | type[File] | type[Archive] | type[Service]] = {
    "directory": Directory,
    "file": File,
    "archive": Archive,
    "service": Service,
}
_HINTS = {
    "mode": 'an octal string such as "0644"',
    "state": "running or stopped",
    "enabled": "true or false",
    "path": "an absolute path",
    "content": "the file's text",
    "unit": "a unit name such as app.service",
    "source": "the archive's absolute path on the machine",
    "sha256": "the archive's sha256, 64 hex digits",
}


def label(index: int, resource: Resource) -> str:
    """How messages name a resource: its id, else its place in the declaration (`resources[3]`)."""
    return resource.id or f"resources[{index}]"


@dataclass(frozen=True)
class Declaration:
    """A declaration that passed every check, its resources in their stated order."""

    source: str  # where it was read from, for messages
    resources: tuple[Resource, ...]

    @property
    def paths(self) -> dict[PurePosixPath, PathResource]:
        return {resource.at: resource for resource in self.resources if not isinstance(resource, Service)}

    @property
    def units(self) -> dict[str, Service]:
        return {resource.unit: resource for resource in self.resources if isinstance(resource, Service)}

    @property
    def folders(self) -> tuple[Folder, ...]:
        return tuple(resource for resource in self.resources if isinstance(resource, Directory | Archive))


def read_declaration(path: Path) -> Declaration:
    """Reads and checks the declaration in the file at `path` (at most MAX_DECLARATION_BYTES of it)."""
    return parse_declaration(read_declaration_text(path), str(path))


def read_declaration_text(path: Path) -> str:
    """The text of the declaration file at `path`; DeclarationRefused when it cannot be read."""
    try:
        with path.open("rb") as stream:
            return read_text(stream, str(path))
    except OSError as err:
        raise DeclarationRefused(str(path), (f"cannot be read: {err.strerror or err}",)) from None


def read_text(stream: BinaryIO, where: str) -> str:
    """At most MAX_DECLARATION_BYTES of `stream` as text: DeclarationRefused when it holds more, or
    is not UTF-8."""
    data = stream.read(MAX_DECLARATION_BYTES + 1)
    if len(data) > MAX_DECLARATION_BYTES:
        raise DeclarationRefused(where, (f"larger than the {MAX_DECLARATION_BYTES} bytes a declaration may be",))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DeclarationRefused(where, (f"not UTF-8 text (byte {err.start})",)) from None


def parse_declaration(text: str, where: str) -> Declaration:
    """Checks `text` against the vocabulary; raises DeclarationRefused naming every problem and where."""
    if len(text.encode("utf-8", errors="replace")) > MAX_DECLARATION_BYTES:
        raise DeclarationRefused(where, (f"larger than the {MAX_DECLARATION_BYTES} bytes a declaration may be",))
    document = _json(text, where)
    resources, problems = _resources(document)
    if not problems:
        problems = _across(resources)
    if problems:
        raise DeclarationRefused(where, tuple(problems))
    return Declaration(where, tuple(resources))


class _TwiceGiven(ValueError):
    pass


def _no_key_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise _TwiceGiven(f"an object gives {', '.join(repr(key) for key in twice)} twice")
    return dict(pairs)


def _json(text: str, where: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_no_key_twice)
    except _TwiceGiven as err:
        raise DeclarationRefused(where, (str(err),)) from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise DeclarationRefused(where, (f"not JSON: {err}",)) from None


def _resources(document: object) -> tuple[list[Resource], list[str]]:
    if not isinstance(document, dict):
        return [], ['a declaration is a JSON object: {"declaration": 1, "resources": [...]}']
    problems = [
        f"{key}: not a field of a declaration (declaration, resources)"
        for key in document
        if key not in ("declaration", "resources")
    ]
    version = document.get("declaration")
    if type(version) is not int or version != VERSION:
        given = "missing" if "declaration" not in document else f"{version!r} is not a version"
        problems.append(f"declaration: {given}: this host reads version {VERSION}")
    listed = document.get("resources")
    if not isinstance(listed, list):
        problems.append("resources: missing or not a list: the resources, in the order they are applied")
        return [], problems
    if len(listed) > MAX_RESOURCES:
        problems.append(f"resources: {len(listed)} of them, more than the {MAX_RESOURCES} a declaration may hold")
        return [], problems
    resources: list[Resource] = []
    for index, raw in enumerate(listed):
        resource, said = _resource(f"resources[{index}]", raw)
        problems.extend(said)
        if resource is not None:
            resources.append(resource)
    return resources, problems


def _resource(where: str, raw: object) -> tuple[Resource | None, list[str]]:
    if not isinstance(raw, dict):
        return None, [f"{where}: a resource is a JSON object with a type, not {type(raw).__name__}"]
    kind = raw.get("type")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None or not isinstance(kind, str):
        said = "missing" if "type" not in raw else f"{kind!r} is not a resource type"
        return None, [f"{where}.type: {said} ({', '.join(_MODELS)})"]
    if isinstance(raw.get("id"), str) and _ID.fullmatch(raw["id"]):
        where = f"{where} ({raw['id']})"
    try:
        resource: Resource = model.model_validate(raw)
    except ValidationError as err:
        return None, [_problem(where, kind, model, error) for error in err.errors(include_url=False)]
    return resource, _own(where, resource)


def _problem(where: str, kind: str, model: type[_Resource], error: Any) -> str:
    loc = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
    name = str(error["loc"][0]) if error["loc"] else ""
    fields = ", ".join(field for field in model.model_fields if field != "type")
    if error["type"] == "extra_forbidden":
        return f"{where}{loc}: not a field of a {kind} (its fields: {fields})"
    if error["type"] == "missing":
        hint = _HINTS.get(name, "")
        return f"{where}{loc}: missing" + (f": {hint}" if hint else "")
    if error["type"] == "value_error":
        return f"{where}{loc}: {error['ctx']['error']}"
    return f"{where}{loc}: {error['msg'].removeprefix('Input ')}, not {error['input']!r}"


def _own(where: str, resource: Resource) -> list[str]:
    """What a resource says against itself: a directory's (or an archive's) module and knows."""
    if not isinstance(resource, Directory | Archive):
        return []
    problems = []
    if resource.module is None and resource.unknown in ("module", "move-out"):
        problems.append(
            f"{where}.module: missing: a directory with unknown {resource.unknown} names its module "
            "(what it holds is the module's; strays move out to mesh-moved/<module>/)"
        )
    if len(resource.knows) > MAX_KNOWS:
        problems.append(f"{where}.knows: {len(resource.knows)} paths, more than {MAX_KNOWS}")
    for index, known in enumerate(resource.known):
        if not known.is_relative_to(resource.at) or known == resource.at:
            problems.append(f"{where}.knows[{index}]: {known} is not inside {resource.path}")
    return problems


def _across(resources: list[Resource]) -> list[str]:
    """What resources say against each other: twice declared or named, folders declared late, or as
    files, or programs'."""
    first: dict[object, int] = {}
    named: dict[str, int] = {}
    for index, resource in enumerate(resources):
        first.setdefault(_key(resource), index)
        if resource.id is not None:
            named.setdefault(resource.id, index)
    problems = []
    for index, resource in enumerate(resources):
        key = _key(resource)
        if first[key] != index:
            what = "unit" if isinstance(resource, Service) else "path"
            problems.append(f"resources[{index}].{what}: {key} is already declared by resources[{first[key]}]")
        if resource.id is not None and named[resource.id] != index:
            problems.append(f"resources[{index}].id: {resource.id} already names resources[{named[resource.id]}]")
        if not isinstance(resource, Service):
            problems.extend(_folders(f"resources[{index}].path", index, resource.at, resources, first))
    return problems


def _key(resource: Resource) -> object:
    return resource.unit if isinstance(resource, Service) else resource.at


def _folders(
    where: str, index: int, path: PurePosixPath, resources: list[Resource], first: dict[object, int]
) -> list[str]:
    problems = []
    for folder in path.parents:
        if folder not in first:
            continue
        at = first[folder]
        holder = resources[at]
        if isinstance(holder, File):
            problems.append(f"{where}: its folder {folder} is declared as a file by resources[{at}]")
        elif at > index:
            problems.append(
                f"{where}: its folder {folder} is declared later, by resources[{at}]: the order is stated, "
                "declare the folder first"
            )
        elif isinstance(holder, Directory | Archive) and holder.unknown == "program":
            problems.append(
                f"{where}: {path} is inside {folder}, which resources[{at}] declares unknown: program "
                "(everything in it is the program's, the host writes nothing there)"
            )
    return problems
