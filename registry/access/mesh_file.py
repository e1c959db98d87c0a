"""A mesh described once: the parties of the grants in a TOML file, for `mesh-provisioner grants
--mesh FILE` or a controller in any language that writes it.

    version = 1                          # the shape of this file (optional; 1 is the only one)
    nodes = ["n1", "n2"]
    operators = ["ops"]
    writers = ["config", "placement"]    # the catalogue's domains writing a bucket, a party each
                                         # (left out: every one of them; [] none)
    domains_file = "domains.toml"        # the seat's domains file, relative to this file (optional)

    [providers.postgres]                 # a provider module, and the nodes its module runs on
    machines = ["n2"]                    # (left out: every node may ask for its consumers)

    [limits.node]                        # what each account of a kind of party may hold (node,
    connections = 32                     # provider, operator, writer, vault); each left out
    subscriptions = 2000                 # keeps its kind's own (registry.access.limits)
    payload = 262144                     # bytes of one message it publishes

    [hub]                                # where the nodes live (registry.access.sites.topology): the hub,
    leafnodes = ["nats-leaf://hub.example.org:7422"]  # the URLs its sites dial it on,
    [sites.home]                         # and each site (one nats-server, JetStream domain `home`)
    nodes = ["n1"]                       # with its nodes; a node at no site lives at the hub

Every key is optional. An unknown key, a value of the wrong type, a name listed twice, a machine
that is not a node of the file, a name over 1,024 bytes, more than 10,000 names in a list, a
limit below what the party's own program needs or past `registry.access.limits.MOST`, a site
name that is no JetStream domain, a node at two sites or at none of the nodes, a site with no
node, sites without the hub's URLs, and a file over 1 MiB are refused, each naming the file, the
key and why (`MeshFileError`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from registry.access.issuing import MeshParties
from registry.access.limits import GivenLimits, too_low
from registry.access.parties import MAX_PROVIDER_NAME, PROVIDER_PATTERN, Kind
from registry.access.sites.topology import HubEntry, SiteEntry, SiteName, Topology, site_problems
from registry.contract import Name, TomlRefused, read_toml
from registry.errors import SettingsError

MAX_FILE_BYTES = 1 << 20
MAX_NAMES = 10_000  # nodes, operators, providers, and the machines of one provider
MAX_ERRORS_SAID = 5
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DICT_KEY = "[key]"  # where pydantic says a table's key (a provider's name), not its value, is wrong
_TABLE_NAMES = {
    "providers": "a provider's name (it names its bucket <name>_bound)",
    "sites": "a site's name (its JetStream domain: letters, digits, - and _, at most 64)",
}

ProviderName = Annotated[str, StringConstraints(pattern=PROVIDER_PATTERN, max_length=MAX_PROVIDER_NAME)]


class MeshFileError(SettingsError):
    """A mesh file that cannot be read: `path`, and why (each key at fault, named)."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        super().__init__(f"mesh file {path}", reason)


def _each_once(names: tuple[str, ...]) -> tuple[str, ...]:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{name!r} is listed twice")
        seen.add(name)
    return names


Names = Annotated[tuple[Name, ...], Field(max_length=MAX_NAMES), AfterValidator(_each_once)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderEntry(_Model):
    """One provider: the nodes its module runs on, which alone may ask for its consumers."""

    machines: Names = ()


class MeshLimits(_Model):
    """What the accounts of each kind of party may hold, where not their kind's own."""

    node: GivenLimits | None = None
    provider: GivenLimits | None = None
    operator: GivenLimits | None = None
    writer: GivenLimits | None = None
    vault: GivenLimits | None = None

    def by_kind(self) -> dict[Kind, GivenLimits]:
        return {Kind(name): given for name in type(self).model_fields if (given := getattr(self, name)) is not None}


class MeshFile(_Model):
    """The parties of a mesh, as its file describes them (see the module's docstring)."""

    version: Literal[1] = 1
    nodes: Names = ()
    providers: dict[ProviderName, ProviderEntry] = Field(default_factory=dict, max_length=MAX_NAMES)
    operators: Names = ()
    writers: Names | None = None
    domains_file: Path | None = None
    limits: MeshLimits = MeshLimits()
    hub: HubEntry | None = None
    sites: dict[SiteName, SiteEntry] = Field(default_factory=dict, max_length=MAX_NAMES)

    @model_validator(mode="after")
    def _sites_place_known_nodes_once(self) -> Self:
        problems = site_problems(self.nodes, self.hub, self.sites)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _limits_suffice(self) -> Self:
        limits = self.limits.by_kind()
        problems = [
            f"limits.{kind.value}.{problem}" for kind, given in limits.items() for problem in too_low(kind, given)
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _machines_are_nodes(self) -> Self:
        nodes = set(self.nodes)
        for provider, entry in self.providers.items():
            for index, machine in enumerate(entry.machines):
                if machine not in nodes:
                    key = f"providers.{provider}.machines[{index}]"
                    raise ValueError(f"{key}: {machine!r} is not one of the nodes")
        return self

    def parties(self) -> MeshParties:
        machines = {name: entry.machines for name, entry in self.providers.items() if entry.machines}
        return MeshParties(
            nodes=self.nodes,
            providers=tuple(self.providers),
            operators=self.operators,
            machines=machines,
            writers=self.writers,
            limits=self.limits.by_kind(),
            topology=self.topology(),
        )

    def topology(self) -> Topology:
        """The hub and the sites the file names (none: every node lives at the hub)."""
        return Topology.of(self.hub, self.sites)


def read_mesh_file(path: Path) -> MeshFile:
    """The mesh file at `path`, its `domains_file` made relative to the file's folder."""
    try:
        document = read_toml(path, max_bytes=MAX_FILE_BYTES)
    except OSError as err:
        raise MeshFileError(path, f"cannot be read: {err.strerror or err}") from None
    except TomlRefused as err:
        raise MeshFileError(path, err.reason) from None
    mesh = _validated(path, document)
    if mesh.domains_file is not None and not mesh.domains_file.is_absolute():
        mesh = mesh.model_copy(update={"domains_file": path.parent / mesh.domains_file})
    return mesh


def _validated(path: Path, document: dict[str, Any]) -> MeshFile:
    try:
        return MeshFile.model_validate(document)
    except ValidationError as err:
        problems = [_problem(error) for error in err.errors(include_url=False, include_input=False)]
        more = len(problems) - MAX_ERRORS_SAID
        said = "; ".join(problems[:MAX_ERRORS_SAID]) + (f"; and {more} more" if more > 0 else "")
        raise MeshFileError(path, said) from None


def _problem(error: Any) -> str:
    """One problem: the key (`providers.postgres.machines[0]`) and why, never the value given."""
    key = _key(error["loc"])
    if error["type"] == "extra_forbidden":
        known = ", ".join(_known_at(error["loc"][:-1]))
        return f"{key}: unknown key; known: {known}"
    complaint = str(error["msg"]).removeprefix("Value error, ")  # a validator of ours says it all
    if _DICT_KEY in error["loc"]:
        complaint = f"{_TABLE_NAMES.get(str(error['loc'][0]), 'a name')}: {complaint}"
    return f"{key}: {complaint}" if key else complaint


def _key(loc: Iterable[int | str]) -> str:
    """The key as TOML writes it: `providers.postgres.machines[0]`, `providers."a b"`."""
    key = ""
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        elif part != _DICT_KEY:
            bare = part if _BARE_KEY.fullmatch(part) else json.dumps(part)
            key += f".{bare}" if key else bare
    return key


def _known_at(loc: Sequence[int | str]) -> list[str]:
    """The keys a table takes: the file's own, a provider's (`providers.<name>`), the kinds of
    party `limits` names, the limits of one (`limits.node`), the hub's or a site's."""
    tables: dict[tuple[str, int], type[BaseModel]] = {
        ("providers", 2): ProviderEntry,
        ("limits", 1): MeshLimits,
        ("limits", 2): GivenLimits,
        ("hub", 1): HubEntry,
        ("sites", 2): SiteEntry,
    }
    found = tables.get((str(loc[0]), len(loc))) if loc else None
    return list((found or MeshFile).model_fields)


def combined(given: MeshParties, more: MeshParties) -> MeshParties:
    """The parties of both, `given`'s first, each once; a provider's machines are those of both;
    the writers named by either (named by neither: every writing domain, `None`); the limits of
    either, `given`'s where both set a kind's."""
    machines: dict[str, list[str]] = {}
    for source in (given, more):
        for provider, named in source.machines.items():
            machines[provider] = _unique([*machines.get(provider, ()), *named])
    return MeshParties(
        nodes=_unique([*given.nodes, *more.nodes]),
        providers=_unique([*given.providers, *more.providers]),
        operators=_unique([*given.operators, *more.operators]),
        machines=machines,
        writers=_either(given.writers, more.writers),
        limits={**more.limits, **given.limits},
        topology=given.topology if given.topology.sites else more.topology,
    )


def _either(given: Sequence[str] | None, more: Sequence[str] | None) -> list[str] | None:
    if given is None and more is None:
        return None
    return _unique([*(given or ()), *(more or ())])


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
