"""The grants as decentralized auth (JWT mode): operator, account and user JWTs signed with nkeys.

    <keys>/operator.nk                the operator's seed: it alone signs account JWTs (keep it safe)
    <keys>/account-<label>.nk         one seed per account: account-node-n1.nk, account-vault.nk,
                                      account-MESH.nk, account-SYS.nk (the system account)
    <keys>/<label>.creds              each user's JWT and seed, for nats-py's `user_credentials=`
                                      (seat.creds, node-n1.creds, ..., sys.creds: pushes accounts)
    <out>/jwt/operator.jwt            the signed JWTs, one file each
    <out>/jwt/account-<label>.jwt
    <out>/jwt/server-auth.conf        for nats-server: operator, system account, resolver, preloads

Only the operator signs account JWTs, so a party's account imports exactly what its signed JWT
says, however it edits its copy. The data account exports each bucket's subjects by wildcard
(`$KV.<bucket>.>`, where its stream republishes them
`$KVR.<bucket>.>`, `$JS.API.DIRECT.GET.<stream>.>`) and the seat's verb, the vault's account
(`account-vault.jwt`) the vault's verbs, publicly: what a party reaches is decided by its own
account's imports. So a node added later needs no change to the data account nor the vault's:
push its account JWT (`push_account`) and it connects at once, without a reload. Every party
account carries the limits of its kind (`registry.access.limits`).
Removing one deletes its account from the resolver (`delete_accounts`): its connections are
closed and its credential is refused.

A JWT whose content is unchanged is kept as it is (same `iat`, same `jti`): issuing again with one
more node rewrites only what that node adds, and the resolver sees nothing new elsewhere.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nkeys

from registry.access.accounts_conf import quoted
from registry.access.credentials import SEED_SUFFIX, CredentialError, issued_text, read_issued, read_seed, write_secret
from registry.access.grants import AccountGrant, Exports, Grants, Import, vault_listens, vault_publishes
from registry.access.limits import PartyLimits
from registry.access.parties import DATA_ACCOUNT, SYSTEM_ACCOUNT, Kind, Party
from registry.contract import JsonRefused, buckets, read_json
from registry.errors import BusError, SettingsError

if TYPE_CHECKING:  # issuing the grants never needs nats-py: only pushing them does
    from registry.wire import Bus

JWT_DIR = "jwt"
SERVER_AUTH = "server-auth.conf"
SYSTEM_USER = "sys"
OPERATOR_SEED = "operator.nk"
OPERATOR_NAME = "mesh-provisioner"
# Relative to nats-server's working directory; `render_server_auth` takes another.
DEFAULT_RESOLVER_DIR = "jwt-accounts"
CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"
CLAIMS_DELETE = "$SYS.REQ.CLAIMS.DELETE"

NO_LIMIT = -1
_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
_UNLIMITED = {
    "subs": NO_LIMIT,
    "data": NO_LIMIT,
    "payload": NO_LIMIT,
    "imports": NO_LIMIT,
    "exports": NO_LIMIT,
    "wildcards": True,
    "conn": NO_LIMIT,
    "leaf": NO_LIMIT,
}
_JETSTREAM = {"mem_storage": NO_LIMIT, "disk_storage": NO_LIMIT, "streams": NO_LIMIT, "consumer": NO_LIMIT}
_CREDS_JWT = re.compile(r"-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END NATS USER JWT------")


class AccountPushError(BusError):
    """The system account refused an account update or delete; `reason` is what it said."""


@dataclass(frozen=True)
class Nkey:
    """One nkey pair, from its seed."""

    seed: bytes

    @cached_property
    def _pair(self) -> nkeys.KeyPair:
        """Derived once: each derivation decodes the seed and computes the key pair again."""
        return nkeys.from_seed(bytearray(self.seed))

    @cached_property
    def public_key(self) -> str:
        return bytes(self._pair.public_key).decode()

    def sign(self, data: bytes) -> bytes:
        return bytes(self._pair.sign(data))

    def signed(self, data: bytes, signature: bytes) -> bool:
        try:
            return bool(self._pair.verify(data, signature))
        except nkeys.ErrInvalidSignature:
            return False


@dataclass(frozen=True)
class JwtAuth:
    """What nats-server needs to trust the issued JWTs: the operator, the system account's public
    key and every account's JWT by its public key."""

    operator_jwt: str
    system_account: str
    accounts: Mapping[str, str]

    @property
    def operator(self) -> str:
        """The operator's public key: the only issuer of account JWTs nats-server takes."""
        return str(claims_of(self.operator_jwt)["sub"])


def account_seed_path(folder: Path, account: str) -> Path:
    """`account-<label>.nk`: the account of a party's label, `MESH` or `SYS`."""
    return folder / f"account-{account}.nk"


def account_jwt_path(folder: Path, account: str) -> Path:
    return folder / JWT_DIR / f"account-{account}.jwt"


def creds_path(folder: Path, label: str) -> Path:
    return folder / f"{label}.creds"


def issue_account_keys(parties: Iterable[Party], keys: Path) -> dict[Party, str]:
    """Each party account's public key (the data account's parties have none of their own), from
    its seed in `keys`, else a new seed written there."""
    return {
        party: _nkey(account_seed_path(keys, party.label), nkeys.PREFIX_BYTE_ACCOUNT).public_key
        for party in parties
        if party.account != DATA_ACCOUNT
    }


def seeded_accounts(keys: Path) -> dict[str, str]:
    """Every account `keys` holds a seed of (`account-<label>.nk`: each account the grants issued
    there, the data and system accounts' too, and a removed party's, whose seed stays), its label
    by its public key: the accounts `--push` may delete, and none other."""
    found: dict[str, str] = {}
    for path in sorted(keys.glob(f"account-*{SEED_SUFFIX}")):
        seed = read_seed(path, nkeys.PREFIX_BYTE_ACCOUNT)
        found[Nkey(seed).public_key] = path.name.removeprefix("account-").removesuffix(SEED_SUFFIX)
    return found


def write_jwt_auth(
    out: Path, grants: Grants, vault_subjects: Sequence[str], *, keys: Path, resolver_dir: str = DEFAULT_RESOLVER_DIR
) -> JwtAuth:
    """Signs and writes every JWT of `grants` (whose party accounts carry their `account_key`) and
    `jwt/server-auth.conf` to `out`, the seeds and `.creds` files to `keys` (seeds there are kept);
    `vault_subjects` are the verbs the vault serves (`verb_subjects`)."""
    (out / JWT_DIR).mkdir(parents=True, exist_ok=True)
    operator = _nkey(keys / OPERATOR_SEED, nkeys.PREFIX_BYTE_OPERATOR)
    data = _nkey(account_seed_path(keys, DATA_ACCOUNT), nkeys.PREFIX_BYTE_ACCOUNT)
    system = _nkey(account_seed_path(keys, SYSTEM_ACCOUNT), nkeys.PREFIX_BYTE_ACCOUNT)
    operator_jwt = keep_or_sign(
        out / JWT_DIR / "operator.jwt",
        operator,
        subject=operator.public_key,
        name=OPERATOR_NAME,
        body={"type": "operator", "system_account": system.public_key},
    )
    accounts = {
        system.public_key: _account(out, SYSTEM_ACCOUNT, system, operator, _system_account()),
        data.public_key: _account(out, DATA_ACCOUNT, data, operator, data_account(grants)),
    }
    write_user_creds(keys, SYSTEM_USER, system, {})
    for grant in grants.data:
        write_user_creds(keys, grant.party.label, data, {})
    exporters = {DATA_ACCOUNT: data.public_key, **{g.account: g.account_key for g in grants.parties if g.account_key}}
    exports = grants.exports()
    for grant in grants.parties:
        key = _nkey(account_seed_path(keys, grant.party.label), nkeys.PREFIX_BYTE_ACCOUNT)
        if key.public_key != grant.account_key:
            raise CredentialError(account_seed_path(keys, grant.party.label), "not the account key of the grants")
        body = party_account(grant, exports.get(grant.account, {}), exporters)
        accounts[key.public_key] = _account(out, grant.party.label, key, operator, body)
        if grant.party.kind != Kind.SITE:  # a site's users are its links (registry.access.sites.jwt)
            write_user_creds(keys, grant.party.label, key, _user_permissions(grant, vault_subjects))
    labels = [SYSTEM_ACCOUNT, DATA_ACCOUNT, *(grant.party.label for grant in grants.parties)]
    _drop_accounts_not_in(out, {account_jwt_path(out, label) for label in labels})
    auth = JwtAuth(operator_jwt, system.public_key, accounts)
    (out / JWT_DIR / SERVER_AUTH).write_text(render_server_auth(auth, resolver_dir), encoding="utf-8")
    return auth


def _drop_accounts_not_in(out: Path, written: set[Path]) -> None:
    """A party no longer granted loses its account JWT here (its seeds in `keys` stay, unused)."""
    for path in (out / JWT_DIR).glob("account-*.jwt"):
        if path not in written:
            path.unlink()


def load_jwt_auth(out: Path) -> JwtAuth:
    """The operator and account JWTs `write_jwt_auth` wrote to `out`."""
    operator_jwt = _issued_jwt(out / JWT_DIR / "operator.jwt")
    accounts = {}
    for path in sorted((out / JWT_DIR).glob("account-*.jwt")):
        token = _issued_jwt(path)
        accounts[claims_of(token)["sub"]] = token
    return JwtAuth(operator_jwt, claims_of(operator_jwt)["nats"]["system_account"], accounts)


def _issued_jwt(path: Path) -> str:
    held = issued_text(path)
    if held is None:
        raise SettingsError(str(path), "is missing: issue the grants with --jwt first")
    return held.strip()


def render_server_auth(auth: JwtAuth, resolver_dir: str | Path) -> str:
    """The nats-server configuration of JWT mode, to `include` next to `jetstream { ... }`: the
    full resolver keeps accounts pushed at run time in `resolver_dir` and lets the operator delete
    them; the preloads are the accounts known when the grants were issued."""
    preload = [f"  {key}: {quoted(token)}" for key, token in sorted(auth.accounts.items())]
    return "\n".join(
        [
            "# Generated by registry.access.issuing.issue_grants(..., jwt=True): do not edit; issue the grants again.",
            "# Push an account at run time to $SYS.REQ.CLAIMS.UPDATE as the system account's user (sys.creds).",
            f"operator: {quoted(auth.operator_jwt)}",
            f"system_account: {quoted(auth.system_account)}",
            f"resolver: {{ type: full, dir: {quoted(str(resolver_dir))}, allow_delete: true }}",
            "resolver_preload: {",
            *preload,
            "}",
            "",
        ]
    )


def data_account(grants: Grants) -> dict[str, Any]:
    """The data account: JetStream, and public exports covering every party's imports by bucket."""
    imported = grants.exports_of(DATA_ACCOUNT)
    exports = {(kind, export_subject(subject), stream_reply) for kind, subject, stream_reply in imported}
    return {
        "type": "account",
        "exports": [_export(kind, subject, stream_reply) for kind, subject, stream_reply in sorted(exports)],
        "limits": {**_UNLIMITED, **_JETSTREAM},
    }


def export_subject(subject: str) -> str:
    """What the data account exports for an imported subject: a key's whole bucket (its keys, or
    where its stream republishes them), else itself."""
    tokens = subject.split(".")
    if tokens[0] in ("$KV", buckets.LIVE_PREFIX) and len(tokens) > 3:
        return ".".join([*tokens[:2], ">"])
    if tokens[:4] == ["$JS", "API", "DIRECT", "GET"] and len(tokens) > 5:
        return ".".join([*tokens[:5], ">"])
    return subject


def party_account(grant: AccountGrant, exported: Exports, exporters: Mapping[str, str]) -> dict[str, Any]:
    """A party's account: its imports exactly as granted (`exporters`: each exporting account's
    public key by name), what others import from it (`exported`, the vault's verbs: `Grants.exports`),
    bounded, without JetStream. Its exports are public: only the operator signs an import of them."""
    exports = [_export(kind, subject, stream_reply) for kind, subject, stream_reply in exported]
    limits = {**_UNLIMITED, "exports": len(exports), "wildcards": False, **_claimed(grant.held_to)}
    imports = [_import(item, exporters[item.account]) for item in grant.imports]
    body: dict[str, Any] = {"type": "account", "imports": imports, "limits": limits}
    if exports:
        body["exports"] = exports
    return body


def _claimed(limits: PartyLimits) -> dict[str, int]:
    """The account's limits as its JWT claims name them (`registry.access.limits`)."""
    payload = NO_LIMIT if limits.payload is None else limits.payload
    return {"conn": limits.connections, "subs": limits.subscriptions, "payload": payload, "leaf": limits.leafnodes}


def _system_account() -> dict[str, Any]:
    return {"type": "account", "limits": dict(_UNLIMITED)}


def _export(kind: str, subject: str, stream_reply: bool) -> dict[str, Any]:
    found: dict[str, Any] = {"name": subject, "subject": subject, "type": kind}
    if stream_reply:
        found["response_type"] = "Stream"
    return found


def _import(item: Import, exporter_key: str) -> dict[str, Any]:
    found: dict[str, Any] = {
        "name": item.why or item.subject,
        "subject": item.subject,
        "account": exporter_key,
        "type": item.kind,
    }
    if item.share:
        found["share"] = True
    if item.to is not None:
        found["local_subject"] = item.to
    return found


def _user_permissions(grant: AccountGrant, vault_subjects: Sequence[str]) -> dict[str, Any]:
    """A party's user may do all its account may; the vault's answers its verbs and gets needs."""
    if grant.party.kind != Kind.VAULT:
        return {}
    return {
        "pub": {"allow": vault_publishes()},
        "sub": {"allow": vault_listens(vault_subjects)},
        "resp": {"max": 1, "ttl": 0},
    }


def _account(out: Path, account: str, key: Nkey, operator: Nkey, body: dict[str, Any]) -> str:
    return keep_or_sign(account_jwt_path(out, account), operator, subject=key.public_key, name=account, body=body)


def write_user_creds(keys: Path, label: str, account: Nkey, permissions: dict[str, Any]) -> None:
    """`keys/<label>.creds` for the user of seed `keys/<label>.nk` (made when there is none),
    signed by `account`; kept as it is when it holds these very claims."""
    user = _nkey(keys / f"{label}{SEED_SUFFIX}", nkeys.PREFIX_BYTE_USER)
    body = {"type": "user", "subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT, "pub": {}, "sub": {}}
    body.update(permissions)
    path = creds_path(keys, label)
    held = read_issued(path) or b""
    existing = _CREDS_JWT.search(held.decode(errors="replace"))
    token = keep_or_sign(
        None, account, subject=user.public_key, name=label, body=body, existing=existing.group(1) if existing else None
    )
    wanted = creds(token, user.seed)
    if held != wanted or path.stat().st_mode & 0o077:
        write_secret(path, wanted)


def creds(user_jwt: str, seed: bytes) -> bytes:
    """A `.creds` file as nats-server's tools write it: the user's JWT, then its seed."""
    return (
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    ).encode()


def encode_jwt(issuer: Nkey, *, subject: str, name: str, body: Mapping[str, Any], issued_at: int | None = None) -> str:
    """A JWT as nats-server reads it: `nats` holds `body` (with `version: 2`); `jti` is the
    base32 SHA-256 of the claims without it; the issuer's nkey signs `header.payload`."""
    claims: dict[str, Any] = {
        "iat": int(time.time()) if issued_at is None else issued_at,
        "iss": issuer.public_key,
        "name": name,
        "nats": {**body, "version": 2},
        "sub": subject,
    }
    digest = hashlib.sha256(_json(claims)).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signing_input = f"{_b64(_json(_HEADER))}.{_b64(_json(claims))}"
    return f"{signing_input}.{_b64(issuer.sign(signing_input.encode()))}"


def claims_of(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified: for reading what was issued, never for trusting it."""
    payload = token.split(".")[1]
    decoded = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    claims = read_json(decoded, max_bytes=len(decoded))  # as long as its file's bound allowed; depth bounded
    if not isinstance(claims, dict):
        raise JsonRefused("a JWT's claims are a JSON object")
    return claims


def keep_or_sign(
    path: Path | None, issuer: Nkey, *, subject: str, name: str, body: dict[str, Any], existing: str | None = None
) -> str:
    """The JWT at `path` (or `existing`) if `issuer` signed these very claims, else a new one;
    `path` is written only when it does not hold it already."""
    held = issued_text(path) if path is not None else None
    if existing is None and held is not None:
        existing = held.strip()
    if existing is not None and _same(existing, issuer, subject, name, body):
        token = existing
    else:
        token = encode_jwt(issuer, subject=subject, name=name, body=body)
    if path is not None and held != token + "\n":
        path.write_text(token + "\n", encoding="utf-8")
    return token


def _same(token: str, issuer: Nkey, subject: str, name: str, body: Mapping[str, Any]) -> bool:
    try:
        header, payload, signature = token.split(".")
        claims = claims_of(token)
        signed = issuer.signed(f"{header}.{payload}".encode(), _unb64(signature))
    except ValueError:
        return False
    wanted = {"iss": issuer.public_key, "sub": subject, "name": name, "nats": {**body, "version": 2}}
    return signed and all(claims.get(k) == v for k, v in wanted.items())


def _nkey(path: Path, prefix: int) -> Nkey:
    """The seed at `path`, else a new one written there."""
    if path.exists():
        return Nkey(read_seed(path, prefix))
    seed = bytes(nkeys.encode_seed(os.urandom(32), prefix))
    write_secret(path, seed + b"\n")
    return Nkey(seed)


async def push_account(bus: Bus, account_jwt: str, *, operator: str) -> str:
    """Hands an account JWT (new or changed) to the resolver, as the system account's user; what
    the server answered. Its connections take the new claims at once, a new account connects.

    Refuses a JWT `operator` (its public key) did not issue: the resolver would store it anyway,
    and the server, which takes account claims from the operator only, would then refuse the
    account's users."""
    claims = claims_of(account_jwt)
    operation = f"push account {str(claims.get('name'))[:64]}"
    if claims.get("iss") != operator:
        raise AccountPushError(operation, "not issued by the operator: nats-server would refuse its users")
    return await _claims_request(bus, CLAIMS_UPDATE, account_jwt, operation)


async def delete_accounts(bus: Bus, operator: Nkey, account_keys: Sequence[str]) -> str:
    """Deletes accounts from the resolver (it must allow deletes): their connections are closed
    and their credentials refused. Issue the grants again without them, or a restart preloads them."""
    request = encode_jwt(
        operator,
        subject=operator.public_key,
        name="delete accounts",
        body={"type": "generic", "accounts": list(account_keys)},
    )
    return await _claims_request(bus, CLAIMS_DELETE, request, "delete accounts")


def operator_key(keys: Path) -> Nkey:
    """The operator's key `write_jwt_auth` issued to `keys`."""
    return Nkey(read_seed(keys / OPERATOR_SEED, nkeys.PREFIX_BYTE_OPERATOR))


def account_key(keys: Path, account: str) -> Nkey:
    """The key of account `account` (a party's label, `MESH` or `SYS`) issued to `keys`."""
    return Nkey(read_seed(account_seed_path(keys, account), nkeys.PREFIX_BYTE_ACCOUNT))


async def _claims_request(bus: Bus, subject: str, token: str, operation: str) -> str:
    reply = await bus.request(subject, token.encode(), operation=operation)
    answer = json.loads(reply.data)
    error = answer.get("error")
    if isinstance(error, dict):
        raise AccountPushError(operation, str(error.get("description", error))[:1024])
    return str(answer.get("data", {}).get("message", ""))


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
