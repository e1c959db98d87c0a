"""What each party of a mesh may do on the bus, derived from the catalogue, providers and nodes.

One account per party. The data account `MESH` holds every bucket and the seat, trusted with all
of it. Every other party gets an account of its own that imports exactly what it needs, and
nothing else: across accounts a reply subject names the requester's own namespace, so no request
it can make (reply subjects and headers included) reaches a key outside its grant. No party but
the seat has JetStream's API in `MESH`, so none creates, edits, purges or deletes a stream, or
makes a consumer there.

A node imports: puts, deletes and gets of its own `<node>.>` keys in needs, applied and collect;
gets of its `<node>.>` keys of node-keyed buckets (placement, each provider's `_bound`) and of
every key of mesh-wide buckets (the registry, shared config), with their live updates (as each
bucket's stream republishes them under `$KVR.<bucket>.`, whoever wrote, onto `$KV.<bucket>.`); the verb
and the vault's `secret` verb, shared, so that they learn who asks; the live updates of each
collection the catalogue shares across the mesh (every node's contributions to it, which the verb
lists), where the collect stream republishes them. A provider's machine (a node
running the provider's module, named in `machines`) imports the vault's `consumers` verb too. A
provider reads the needs bucket, writes its own `<provider>_bound` and asks the verb. An operator
asks the verb. A writer (a domain of the catalogue writing a bucket of a fixed name the registry
names: the config domain its `mesh-config_values`, the controller its assignments mirror) puts,
deletes and reads the keys of that one bucket, and nothing else: no verb, no other bucket, no live
updates. Node names are escaped exactly as keys (`a.b` is `a=2Eb`), so node `a` never
reaches `a=2Eb.>` nor `a.b` reaches `a.>`.

The vault (every verb-answered domain) has an account of its own, `vault`: it exports its verbs to
exactly the accounts that import them and imports gets of the needs (which node's module declares
what it asks), so that it shares no account with the seat and holds no JetStream API anywhere.

`derive_grants` returns the grants as data (`Grants`, written as `grants.json`);
`registry.access.accounts_conf` renders them as a static nats-server configuration and
`registry.access.jwt_auth` as signed JWTs for decentralized auth.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

from registry.access.limits import GivenLimits, PartyLimits, limits_of
from registry.access.parties import DATA_ACCOUNT, Kind, Party, PartyMap, UnknownAccount
from registry.contract import (
    Bucket,
    BucketAnswer,
    Domain,
    VerbAnswer,
    buckets,
    check_json,
    encode_token,
    fields_of,
    fleet,
    read_bounded,
    render,
    shape_of,
    under,
)
from registry.errors import SettingsError

# A node's party takes about 6 KB of grants.json: the 10,000 nodes a mesh file may name, ~60 MB.
MAX_GRANTS_BYTES = 128 << 20


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Import(_Model):
    """A subject one account takes from another (`account`, the exporter: the data account, or the
    vault's): a service (request/reply) or a stream (live updates). `share` tells the responder
    who asks; `stream_reply` lets a service answer with several messages (a batch direct get);
    `to` is the subject the importing account sees it on, when not `subject` (live updates are
    imported from where a bucket's stream republishes them, `$KVR.<bucket>.<keys>`, onto the
    keys' own subjects, `$KV.<bucket>.<keys>`)."""

    kind: str = Field(pattern="^(service|stream)$")
    subject: str
    account: str = DATA_ACCOUNT
    share: bool = False
    stream_reply: bool = False
    to: str | None = None
    why: str = ""


# What an account exports: (kind, subject, stream reply), and to which accounts.
Export = tuple[str, str, bool]
Exports = dict[Export, set[str]]


class AccountGrant(_Model):
    """One party's account: its name, its user's public nkey, what it imports and what it may hold
    (`limits`: none, `null` in grants.json, for the data account, which nothing limits). A site's
    links at the hub (`Kind.SITE`) speak for the nodes living at the site (`speaks_for`): its
    `user_key` is its data link's, and its vault link's user is in sites.json."""

    party: Party
    account: str
    user_key: str
    account_key: str | None = None
    imports: tuple[Import, ...] = ()
    limits: PartyLimits | None = None
    speaks_for: tuple[str, ...] = Field(default=(), exclude_if=lambda nodes: not nodes)

    @property
    def held_to(self) -> PartyLimits:
        """The limits its account is rendered with: its own, else (a grants.json written before
        grants carried them) its kind's."""
        return self.limits if self.limits is not None else limits_of(self.party.kind)


class Grants(_Model):
    """Every party's grants; `data` are the users of the data account (the seat). `skipped` says
    what could not be granted, `wide` what was granted wider than it could be, and why. `version`
    is the shape's: a reader refuses a version it does not know."""

    version: Literal[1] = 1
    data_account: str = DATA_ACCOUNT
    data: tuple[AccountGrant, ...]
    parties: tuple[AccountGrant, ...]
    skipped: tuple[str, ...] = ()
    wide: tuple[str, ...] = ()

    def exports(self) -> dict[str, Exports]:
        """What each exporting account must export, by its name: each (kind, subject, stream
        reply) to the accounts importing it. Every import is read once: rendering every account
        takes this once (asking `exports_of` for each would read them all for each)."""
        found: dict[str, dict[Export, set[str]]] = defaultdict(lambda: defaultdict(set))
        for grant in self.parties:
            for item in grant.imports:
                found[item.account][(item.kind, item.subject, item.stream_reply)].add(grant.account)
        return {account: dict(sorted(exports.items())) for account, exports in found.items()}

    def exports_of(self, account: str) -> Exports:
        """What `account` alone must export (see `exports`)."""
        return self.exports().get(account, {})

    def party_map(self) -> PartyMap:
        speaks_for = {grant.party: grant.speaks_for for grant in self.parties if grant.speaks_for}
        return PartyMap.of(((grant.party, grant.account_key) for grant in self.parties), speaks_for)

    def to_json(self) -> str:
        """`grants.json`: sorted keys, two spaces, one final newline (see `pretty_json`)."""
        return pretty_json(self.model_dump(mode="json")) + "\n"


# What `json.dumps` escapes in a string with `ensure_ascii`, and pydantic-core writes as it is.
_NOT_ASCII = re.compile("[\x7f-\U0010ffff]")


def pretty_json(value: Any) -> str:
    """`value` (JSON data) exactly as `json.dumps(value, indent=2, sort_keys=True)` writes it, by
    pydantic-core's encoder: the standard library's indenting encoder is pure Python, 40% of
    issuing the grants of 5,000 nodes. A string its encoder cannot take (a lone surrogate) is left
    to the standard library."""
    try:
        text = pydantic_core.to_json(_keys_sorted(value), indent=2).decode()
    except pydantic_core.PydanticSerializationError:
        return json.dumps(value, indent=2, sort_keys=True)
    return _NOT_ASCII.sub(_escaped, text)


def _keys_sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _keys_sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_keys_sorted(item) for item in value]
    return value


def _escaped(match: re.Match[str]) -> str:
    """One character as `json.dumps` escapes it: `\\u00e9`, a pair of surrogates past U+FFFF."""
    return json.dumps(match.group())[1:-1]


def load_party_map(path: Path) -> PartyMap:
    """The parties of a `grants.json` written by `mesh-provisioner grants`, by account."""
    return read_grants_file(path).party_map()


def read_grants_file(path: Path) -> Grants:
    """A `grants.json`, read no further than `MAX_GRANTS_BYTES` nor deeper than JSON's bound:
    `OSError` when it cannot be read, `JsonRefused` when too deep, pydantic's `ValidationError`
    when it is not one."""
    raw = read_bounded(path, MAX_GRANTS_BYTES)
    check_json(raw, max_bytes=MAX_GRANTS_BYTES)
    return Grants.model_validate_json(raw)


class GrantsFile(PartyMap):
    """The parties of a `grants.json`, read again when a request comes from an account it does not
    know and the file has changed since: a node the controller adds at run time (JWT mode) is
    answered at once, without restarting the seat."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp = self._stamp_now()
        loaded = load_party_map(path)
        super().__init__(loaded._accounts, loaded._speaks_for)

    def who_asks(self, headers: Mapping[str, str]) -> Party | None:
        try:
            return super().who_asks(headers)
        except UnknownAccount:
            if not self._reload_if_changed():
                raise
            return super().who_asks(headers)

    def _reload_if_changed(self) -> bool:
        stamp = self._stamp_now()
        if stamp == self._stamp:
            return False
        try:
            loaded = load_party_map(self._path)
        except (OSError, ValueError):  # a file being rewritten: keep the grants known so far
            return False
        self._accounts, self._speaks_for = loaded._accounts, loaded._speaks_for
        self._stamp = stamp
        return True

    def _stamp_now(self) -> tuple[int, int]:
        try:
            status = self._path.stat()
        except OSError:
            return (0, 0)
        return (status.st_mtime_ns, status.st_size)


def _writes(bucket: Bucket, scope: str, why: str) -> list[Import]:
    return [
        Import(kind="service", subject=bucket.subject(scope), why=f"put and delete {why}"),
        Import(kind="service", subject=bucket.direct_get_subject(scope), why=f"get {why}"),
    ]


def _reads(bucket: Bucket, scope: str, why: str, *, live: bool = True) -> list[Import]:
    """Gets of the keys under `scope` and their live updates; the whole bucket adds the batch get.

    Live updates come from where the bucket's stream republishes each write it stores (nats-server
    passes a write that came in through a service import, a node's, a provider's or a writer's, on
    to no stream import of its own subject), onto the keys' own subjects. None of a bucket the
    party writes itself: a stream import onto the subjects of its own service import would hand
    its writes back to it."""
    found = [Import(kind="service", subject=bucket.direct_get_subject(scope), why=f"get {why}")]
    if live:
        found.append(
            Import(
                kind="stream",
                subject=bucket.live_subject(scope),
                to=bucket.subject(scope),
                why=f"live updates of {why}, whoever wrote them",
            )
        )
    if scope == ">":
        found.append(
            Import(
                kind="service",
                subject=bucket.batch_get_subject,
                stream_reply=True,
                why=f"read all of {why} in one batch",
            )
        )
    return found


def _asks(subjects: Iterable[str], why: str, *, account: str = DATA_ACCOUNT) -> list[Import]:
    return [Import(kind="service", subject=s, account=account, share=True, why=why) for s in sorted(set(subjects))]


VAULT = Party(kind=Kind.VAULT, name="vault")
# The kinds only a provider's machine asks for: its consumers' credentials.
MACHINE_KINDS = frozenset({"consumers"})


class _Catalogue:
    """The buckets and verbs the catalogue's answers name, with the providers filled in. A verb
    answering only kinds of `MACHINE_KINDS` is a machine verb, any other a node verb."""

    def __init__(self, domains: Mapping[str, Domain], providers: Sequence[str]) -> None:
        self.node_keyed: list[Bucket] = []
        self.mesh_wide: list[Bucket] = []
        self.node_verbs: set[str] = set()
        self.machine_verbs: set[str] = set()
        self.written: dict[str, Bucket] = {}
        self.skipped: list[str] = []
        self.shared: set[str] = set()  # collections read across the mesh
        own = {b.name for b in buckets.OWN}
        for name, domain in sorted(domains.items()):
            if not domain.kinds:
                continue
            answer = domain.answer()
            if isinstance(answer, VerbAnswer):
                machine = set(domain.kinds) <= MACHINE_KINDS
                (self.machine_verbs if machine else self.node_verbs).add(answer.subject)
                continue
            self.shared.update(answer.shared)
            if not fields_of(answer.bucket) and answer.bucket not in own:
                self.written[name] = Bucket(answer.bucket, shape_of(answer.key))
            for bucket in self._buckets_of(name, answer, providers):
                if bucket.name in own:
                    continue
                keyed = bucket.shape.fields[:1] == ("node",)
                (self.node_keyed if keyed else self.mesh_wide).append(bucket)

    def _buckets_of(self, name: str, answer: BucketAnswer, providers: Sequence[str]) -> list[Bucket]:
        shape = shape_of(answer.key)
        template_fields = set(fields_of(answer.bucket))
        if not template_fields:
            return [Bucket(answer.bucket, shape)]
        if template_fields == {"provider"}:
            return [Bucket(render(answer.bucket, {"provider": p}), shape) for p in providers]
        self.skipped.append(f"domain {name!r}: bucket {answer.bucket!r} depends on a placeholder; grant it by hand")
        return []


def catalogue_of(domains: Mapping[str, Domain], providers: Sequence[str]) -> _Catalogue:
    """The buckets and verbs of the catalogue `domains`, each provider's `_bound` among them."""
    return _Catalogue(domains, providers)


def bound_bucket(provider: str) -> Bucket:
    return Bucket(f"{provider}_bound", shape_of("<node>.<module>.<provision>[.<local>]"))


def node_imports(node: str, catalogue: _Catalogue, *, machine: bool) -> list[Import]:
    """What node `node` may do; `machine`: it runs a provider's module, and asks its consumers."""
    own = under(node)
    found: list[Import] = []
    for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT):
        found += _writes(bucket, own, f"its own keys of {bucket.name}")
    found += _writes(buckets.LEASES, buckets.LEASES.shape.build(role="node", name=node), "its own lease")
    found += node_fleet_imports(node)
    found += _reads(buckets.REGISTRY, ">", "the registry")
    for bucket in catalogue.node_keyed:
        found += _reads(bucket, own, f"its own keys of {bucket.name}")
    for bucket in catalogue.mesh_wide:
        found += _reads(bucket, ">", f"{bucket.name}, readable mesh-wide")
    found += shared_collection_imports(catalogue.shared)
    found += _asks([buckets.VERB_SUBJECT], "ask the verb, telling who asks")
    verbs = catalogue.node_verbs | (catalogue.machine_verbs if machine else set())
    found += _asks(verbs, "ask the vault, telling who asks", account=VAULT.account)
    return found


def shared_collection_imports(shared: Iterable[str]) -> list[Import]:
    """Live updates of every node's contributions to each collection shared across the mesh
    (`*.<collection>.*`), where the collect stream republishes them: not onto `$KV.`, where a
    node's own contributions go out. The contributions themselves a node is listed by the verb."""
    return [
        Import(
            kind="stream",
            subject=buckets.COLLECT.live_subject(f"*.{encode_token(name)}.*"),
            why=f"live updates of collection {name!r}, shared across the mesh, whoever wrote them",
        )
        for name in sorted(shared)
    ]


def node_fleet_imports(node: str) -> list[Import]:
    """A node's part of the fleet bucket (`registry.contract.fleet`): puts and deletes of its own
    claims (`claim.*.<node>`: one slot of each module at most, no other node's), and reads of the
    whole of it, whose live updates it takes where the stream republishes them (`$KVR.<bucket>.>`,
    not onto `$KV.`, where its own claims' puts would come back to it)."""
    found = [
        Import(
            kind="service",
            subject=fleet.FLEET.subject(fleet.own_claims(node)),
            why="put and delete its own rollout claims",
        )
    ]
    found += _reads(fleet.FLEET, ">", "the fleet: rollout claims and holds, nodes forgotten", live=False)
    why = "live updates of the fleet, whoever wrote them, where its stream republishes them"
    found.append(Import(kind="stream", subject=fleet.FLEET.live_subject(">"), why=why))
    return found


def operator_fleet_imports() -> list[Import]:
    """An operator holds, resumes and aborts a module's rollout (`rollout.<module>`: one token, no
    key of more) and reads the fleet."""
    why = "hold, resume or abort a module's rollout"
    return [
        Import(kind="service", subject=fleet.FLEET.subject(f"{fleet.ROLLOUT}.*"), why=why),
        *_reads(fleet.FLEET, ">", "the fleet: rollout claims and holds, nodes forgotten", live=False),
    ]


def _owns(bucket: Bucket) -> list[Import]:
    """Puts, deletes and gets of every key of `bucket` (a compare-and-set reads the revision it
    compares), and the whole of it in one batch."""
    return [
        Import(kind="service", subject=bucket.subject(">"), why=f"put and delete in its own {bucket.name}"),
        *_reads(bucket, ">", f"its own {bucket.name}", live=False),
    ]


def provider_imports(provider: str, catalogue: _Catalogue) -> list[Import]:
    found = _reads(buckets.NEEDS, ">", "the needs: who consumes it")
    found += _owns(bound_bucket(provider))
    found += _asks([buckets.VERB_SUBJECT], "ask the verb, telling who asks")
    return found


def writer_imports(bucket: Bucket) -> list[Import]:
    """A domain writing its bucket: that bucket alone; it reads no node's keys and asks no verb."""
    return _owns(bucket)


def writing_domains(domains: Mapping[str, Domain]) -> dict[str, Bucket]:
    """Each domain writing a bucket the registry names, by name, with that bucket: a bucket of a
    fixed name that is not the seat's nor the nodes' (`<provider>_bound` is each provider's)."""
    return _Catalogue(domains, ()).written


def chosen_writers(domains: Mapping[str, Domain], writers: Sequence[str] | None) -> dict[str, Bucket]:
    """The writers the grants are for, with their buckets: `None`, every writing domain of the
    catalogue; else those named, each of which must be one."""
    written = writing_domains(domains)
    if writers is None:
        return written
    for name in writers:
        if name not in written:
            known = ", ".join(map(repr, written)) or "none"
            raise SettingsError(
                "the grants' writers", f"{name!r} is no domain of the catalogue writing a bucket (those are: {known})"
            )
    return {name: written[name] for name in dict.fromkeys(writers)}


def vault_imports() -> list[Import]:
    """The vault reads a need by its key: does the asking node run a module that declares it."""
    why = "get a need: which node's module declares what it is asked"
    return [Import(kind="service", subject=buckets.NEEDS.direct_get_subject(">"), why=why)]


SERVICE_API = ("PING", "INFO", "STATS")


def vault_listens(vault_subjects: Sequence[str]) -> list[str]:
    """What the vault's user may subscribe to: its verbs, the service API under its own service
    names (the verbs' first token: `mesh-vault.secret` is served as `mesh-vault`) besides the bare
    discovery subjects, and its inboxes (the replies to its gets of the needs)."""
    names = sorted({subject.split(".", 1)[0] for subject in vault_subjects})
    service_api = [f"$SRV.{verb}" for verb in SERVICE_API]
    own = [f"$SRV.{verb}.{name}{tail}" for name in names for verb in SERVICE_API for tail in ("", ".>")]
    return [*vault_subjects, *service_api, *own, "_INBOX.>"]


def vault_publishes() -> list[str]:
    """What the vault's user may publish besides its answers: its gets of the needs."""
    return [item.subject for item in vault_imports()]


def operator_imports() -> list[Import]:
    service_api = [f"$SRV.{verb}.{buckets.SEAT}" for verb in SERVICE_API]
    return [
        *_asks([buckets.VERB_SUBJECT], "ask the verb, telling who asks"),
        *(Import(kind="service", subject=s, why="the service API of the seat") for s in service_api),
        *operator_fleet_imports(),
    ]


def derive_grants(
    domains: Mapping[str, Domain],
    *,
    nodes: Sequence[str],
    providers: Sequence[str] = (),
    operators: Sequence[str] = (),
    machines: Mapping[str, Sequence[str]] | None = None,
    writers: Sequence[str] | None = None,
    limits: Mapping[Kind, GivenLimits] | None = None,
    user_keys: Mapping[Party, str],
    account_keys: Mapping[Party, str] | None = None,
) -> Grants:
    """The grants of every party; `machines` names each provider's machines (the nodes running its
    module), `writers` the domains writing their bucket (`None`: every one the catalogue has),
    `limits` what each kind of party's account may hold where not its own (`registry.access.limits`),
    `user_keys` holds each party's user public nkey (and `account_keys` each account's, in JWT
    mode). A provider
    whose machines are not named leaves every node its consumers' verb (said in `wide`): name
    them, and only they may ask it."""
    catalogue = _Catalogue(domains, providers)
    asking, wide = _machines(nodes, providers, machines or {})
    written = chosen_writers(domains, writers)
    _refuse_widening(catalogue, written, providers)
    wanted = [
        *((Party(kind=Kind.NODE, name=n), node_imports(n, catalogue, machine=n in asking)) for n in nodes),
        *((Party(kind=Kind.PROVIDER, name=p), provider_imports(p, catalogue)) for p in providers),
        *((Party(kind=Kind.OPERATOR, name=o), operator_imports()) for o in operators),
        *((Party(kind=Kind.WRITER, name=w), writer_imports(bucket)) for w, bucket in written.items()),
        (VAULT, vault_imports()),
    ]
    accounts = account_keys or {}
    bounds = {kind: limits_of(kind, (limits or {}).get(kind)) for kind in {party.kind for party, _ in wanted}}
    parties = tuple(
        AccountGrant(
            party=party,
            account=party.account,
            user_key=user_keys[party],
            account_key=accounts.get(party),
            imports=tuple(imports),
            limits=bounds[party.kind],
        )
        for party, imports in wanted
    )
    seat = Party(kind=Kind.SEAT, name=buckets.SEAT)
    data = (AccountGrant(party=seat, account=DATA_ACCOUNT, user_key=user_keys[seat]),)
    _check_unique_accounts(parties)
    return Grants(data=data, parties=parties, skipped=tuple(catalogue.skipped), wide=tuple(wide))


def _machines(
    nodes: Sequence[str], providers: Sequence[str], machines: Mapping[str, Sequence[str]]
) -> tuple[set[str], list[str]]:
    """The nodes that may ask for consumers' credentials, and what was granted wide, and why."""
    known = set(nodes)  # a provider may run on every node: each looked up, not searched for
    for provider, named in machines.items():
        if provider not in providers:
            raise SettingsError("the grants' machines", f"{provider!r} is not a provider of the grants")
        for node in named:
            if node not in known:
                raise SettingsError("the grants' machines", f"{provider!r} runs on {node!r}, which is not a node")
    asking = {node for named in machines.values() for node in named}
    unnamed = [p for p in providers if p not in machines]
    if not unnamed:
        return asking, []
    reason = (
        f"provider {', '.join(map(repr, unnamed))}: no machine named (PROVIDER@NODE), so every node may "
        "ask the vault for consumers' credentials, and only the vault keeps them from nodes running no provider"
    )
    return set(nodes), [reason]


# The seat's buckets a domain could name that `_Catalogue` does not leave out already (`buckets.OWN`).
SEAT_BUCKETS = frozenset({buckets.LEASES.name, fleet.FLEET.name})


def _refuse_widening(catalogue: _Catalogue, written: Mapping[str, Bucket], providers: Sequence[str]) -> None:
    """A domain of the catalogue never widens a bucket the seat or a provider owns: a writer of one
    would write it, and one read with a key not led by `<node>` is read whole by every node (a
    provider's `_bound` so named let each node read every node's bound values). Refused, with
    every such domain and bucket named."""
    bound = {bound_bucket(provider).name for provider in providers}
    owner = {**dict.fromkeys(SEAT_BUCKETS, "the seat's"), **dict.fromkeys(bound, "a provider's")}
    problems = [
        f"domain {name!r} would give its writer {bucket.name}, {owner[bucket.name]} bucket"
        for name, bucket in written.items()
        if bucket.name in owner
    ]
    problems += [
        f"{bucket.name}, {owner[bucket.name]} bucket, would be read whole by every node (key {bucket.shape.text} "
        "is not led by <node>)"
        for bucket in catalogue.mesh_wide
        if bucket.name in owner
    ]
    problems += [
        f"{bucket.name} is the seat's bucket" for bucket in catalogue.node_keyed if bucket.name in SEAT_BUCKETS
    ]
    if problems:
        raise SettingsError("the domains file", "; ".join(sorted(set(problems))))


def verb_subjects(domains: Mapping[str, Domain]) -> list[str]:
    """The subjects the vault (any verb-answered domain) serves."""
    return sorted({a.subject for d in domains.values() if d.kinds and isinstance(a := d.answer(), VerbAnswer)})


def data_parties() -> tuple[Party, Party]:
    """The seat (the data account) and the vault (an account of its own): in every mesh."""
    return Party(kind=Kind.SEAT, name=buckets.SEAT), VAULT


def _check_unique_accounts(parties: Sequence[AccountGrant]) -> None:
    seen: dict[str, Party] = {}
    for grant in parties:
        if grant.account in seen:
            raise ValueError(f"{grant.party.label} and {seen[grant.account].label} share account {grant.account}")
        seen[grant.account] = grant.party
