"""The domain catalogue: which domain answers which kind of placeholder, and how.

The built-in catalogue answers every kind of the wire contract. An operator's TOML file adds
domains or overrides them by name; a domain given `kinds = []` answers nothing, so its kinds
leave the registry. Example (`deploy/domains.toml`):

    [domains.config]
    module = "mesh-config"
    kinds = ["config"]
    bucket = "mesh-config_values"
    key = "<name>"

    [collections]
    shared = ["ssh-known-hosts"]  # read by every node across the mesh; any other collection is
                                  # the contributions made on the reading node alone
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from registry.contract import buckets
from registry.contract.bounded_toml import TomlRefused, read_toml
from registry.contract.keys import KeyShape
from registry.contract.models import Answer, BucketAnswer, VerbAnswer
from registry.contract.templates import NamePattern, fields_of
from registry.errors import CatalogueError, RegistryError

MAX_DOMAINS_FILE_BYTES = 1 << 20
# Fields every template may use besides those the name pattern and parts give.
PLACEHOLDER_FIELDS = ("node", "module", "kind", "name")
KINDS = (
    "config",
    "secret",
    "bound",
    "consumers",
    "collected",
    "shell",
    "environment",
    "contribution",
    "dir",
    "access",
    "port",
    "seat",
    "machine",
)


class Domain(BaseModel):
    """One domain: the module that owns it, the kinds it answers, and where values are found."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    module: str = Field(min_length=1)
    kinds: tuple[str, ...]
    verb: str | None = None
    bucket: str | None = None
    key: str | None = None
    name: str = "<name>"
    parts: dict[str, str] = Field(default_factory=dict)
    read: Literal["value", "plan", "items"] = "value"
    shared: tuple[Annotated[str, Field(min_length=1)], ...] = ()  # collections read across the mesh

    @model_validator(mode="after")
    def _one_answer(self) -> Domain:
        if (self.verb is None) == (self.bucket is None):
            field = "verb" if self.verb is not None else "bucket"
            raise _field_error(field, "give exactly one of 'verb' (request/reply) or 'bucket' (with 'key')")
        if self.verb is not None and (self.key is not None or self.parts):
            raise _field_error("key" if self.key is not None else "parts", "a verb answer takes no 'key' or 'parts'")
        if self.bucket is not None and self.key is None:
            raise _field_error("key", "a bucket answer needs 'key', the bucket's key shape")
        if self.shared and (self.read != "items" or self.bucket != buckets.COLLECT.name):
            raise _field_error("shared", f"only collections are shared: read = 'items' of {buckets.COLLECT.name}")
        return self

    def answer(self) -> Answer:
        if self.verb is not None:
            return VerbAnswer(subject=self.verb, name=self.name)
        assert self.bucket is not None and self.key is not None
        return BucketAnswer(
            bucket=self.bucket, key=self.key, name=self.name, parts=self.parts, read=self.read, shared=self.shared
        )


def _field_error(field: str, message: str) -> PydanticCustomError:
    """A whole-domain check's error, naming the field a reader should look at."""
    return PydanticCustomError("domain", "{message}", {"message": message, "field": field})


def _collections(kinds: tuple[str, ...], name: str, parts: dict[str, str]) -> Domain:
    return Domain(
        module=buckets.PREFIX,
        kinds=kinds,
        bucket=buckets.COLLECT.name,
        key=buckets.COLLECT.shape.text,
        name=name,
        parts=parts,
        read="items",
    )


BUILT_IN: Mapping[str, Domain] = {
    "config": Domain(module="mesh-config", kinds=("config",), bucket="mesh-config_values", key="<name>"),
    "vault-secrets": Domain(module="mesh-vault", kinds=("secret",), verb="mesh-vault.secret"),
    "vault-consumers": Domain(module="mesh-vault", kinds=("consumers",), verb="mesh-vault.consumers"),
    "bound": Domain(
        module="<provider>",
        kinds=("bound",),
        bucket="<provider>_bound",
        key="<node>.<module>.<provision>[.<local>]",
        name="<provider>:<provision>[:<local>]",
    ),
    "collected": _collections(("collected",), "<collection>", {}),
    "collections": _collections(("shell", "environment", "contribution"), "<name>", {"collection": "<kind>:<name>"}),
    "placement": Domain(
        module="mesh-controller",
        kinds=("dir", "access", "port", "seat", "machine"),
        bucket="mesh-controller_assignments",
        key="<node>.<module>",
        read="plan",
    ),
}


def load_catalogue(path: Path | None = None) -> dict[str, Domain]:
    """The built-in catalogue, with the domains of `path` added or overriding by name, and the
    file's shared collections (`[collections] shared`) shared by every domain listing them."""
    given, shared = read_domains_file(path) if path is not None else ({}, ())
    # The file's domains last, so that a clash is blamed on the file's domain, not a built-in one.
    domains = {name: domain for name, domain in BUILT_IN.items() if name not in given} | given
    domains = {name: _sharing(domain, shared) for name, domain in domains.items()}
    check_catalogue(domains, source=str(path) if path else "built-in catalogue")
    return domains


def _sharing(domain: Domain, shared: tuple[str, ...]) -> Domain:
    if not shared or domain.read != "items" or domain.bucket != buckets.COLLECT.name:
        return domain
    return domain.model_copy(update={"shared": tuple(sorted({*domain.shared, *shared}))})


class _Collections(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    shared: tuple[Annotated[str, Field(min_length=1)], ...] = ()


def read_domains_file(path: Path) -> tuple[dict[str, Domain], tuple[str, ...]]:
    """The file's domains by name, and the collections it shares across the mesh."""
    try:
        document = read_toml(path, max_bytes=MAX_DOMAINS_FILE_BYTES)
    except OSError as err:
        raise CatalogueError(str(path), f"cannot be read: {err.strerror or err}") from None
    except TomlRefused as err:
        raise CatalogueError(str(path), err.reason) from None
    unknown = set(document) - {"domains", "collections"}
    if unknown:
        raise CatalogueError(
            str(path), f"unknown top-level table {sorted(unknown)[0]!r}; expected [domains.<name>] or [collections]"
        )
    tables = document.get("domains", {})
    if not isinstance(tables, dict):
        raise CatalogueError(str(path), "'domains' must be a table of [domains.<name>] tables")
    try:
        collections = _Collections.model_validate(document.get("collections", {}))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in ("collections", *first["loc"]))
        raise CatalogueError(str(path), first["msg"], field=field) from None
    return {name: _domain_from(path, name, table) for name, table in tables.items()}, collections.shared


def _domain_from(path: Path, name: str, table: Any) -> Domain:
    try:
        return Domain.model_validate(table)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or first.get("ctx", {}).get("field")
        raise CatalogueError(str(path), first["msg"], domain=name, field=field) from None


def check_catalogue(domains: Mapping[str, Domain], *, source: str) -> None:
    """Refuses a kind answered twice and templates that cannot be filled."""
    owner: dict[str, str] = {}
    for name, domain in domains.items():
        for kind in domain.kinds:
            if kind in owner:
                raise CatalogueError(
                    source, f"kind {kind!r} is answered by {owner[kind]!r} too", domain=name, field="kinds"
                )
            owner[kind] = name
        _check_templates(source, name, domain)


def _check_templates(source: str, name: str, domain: Domain) -> None:
    field = "name"
    try:
        known = set(PLACEHOLDER_FIELDS) | set(NamePattern(domain.name).fields) | set(domain.parts)
        templates = {"module": domain.module, **({"bucket": domain.bucket} if domain.bucket else {})}
        if domain.key is not None:
            templates["key"] = domain.key
            field = "key"
            shape = KeyShape(domain.key)
            if domain.read == "items":
                known.add(shape.fields[-1])  # the listed field: one key per item's contributor
        templates.update({f"parts.{p}": t for p, t in domain.parts.items()})
        for field, template in templates.items():
            unknown = set(fields_of(template)) - known
            if unknown:
                raise CatalogueError(source, f"unknown field <{sorted(unknown)[0]}>", domain=name, field=field)
    except CatalogueError:
        raise
    except RegistryError as err:
        raise CatalogueError(source, str(err), domain=name, field=field) from None
