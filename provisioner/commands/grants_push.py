"""`mesh-provisioner grants --jwt --push`: nats-server's resolver made to hold exactly the issued accounts.

The resolver is asked what it holds (`$SYS.REQ.CLAIMS.LIST`, then the JWT of each issued account
it lists by `$SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP`), then told the difference: each issued account
JWT it lacks or holds otherwise is pushed (`registry.access.push_account`, the exporting accounts
first), each account it holds that the grants issued from the keys folder (a seed of it there)
and no longer name is deleted (`registry.access.delete_accounts`: its connections are closed, its
credentials refused). An account the operator signed for anything else is left alone, and said.
Judging against the resolver rather than against the files written before makes a push that
failed half-way whole when run again.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from registry.access import (
    claims_of,
    delete_accounts,
    load_jwt_auth,
    operator_key,
    plan_resolver,
    push_account,
    seeded_accounts,
)
from registry.errors import BusError, BusTimeout, NoResponders
from registry.wire import Bus, BusOptions, connect_within

CLAIMS_LIST = "$SYS.REQ.CLAIMS.LIST"
CLAIMS_LOOKUP = "$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP"
NOT_A_RESOLVER = (
    "is nats-server in JWT mode with a full resolver (include OUT/jwt/server-auth.conf), and is this "
    "the system account's user (KEYS/sys.creds)?"
)
FOREIGN_SHOWN = 3  # of the accounts left alone, the keys the summary shows


@dataclass(frozen=True)
class Pushed:
    """What the resolver was told: the accounts pushed and deleted, by name; `foreign`, the accounts
    it holds that the grants never issued (no seed in the keys folder), left alone, by key."""

    pushed: tuple[str, ...]
    deleted: tuple[str, ...]
    foreign: tuple[str, ...] = ()

    def summary(self) -> str:
        if not (self.pushed or self.deleted):
            said = "resolver: it holds exactly the issued accounts; nothing pushed"
        else:
            pushed = f"pushed {', '.join(self.pushed)}" if self.pushed else "pushed none"
            deleted = f"deleted {', '.join(self.deleted)}" if self.deleted else "deleted none"
            said = f"resolver: {pushed}; {deleted}"
        if not self.foreign:
            return said
        shown = ", ".join(self.foreign[:FOREIGN_SHOWN]) + (", ..." if len(self.foreign) > FOREIGN_SHOWN else "")
        return f"{said}; left alone {len(self.foreign)} accounts the grants never issued ({shown})"


async def push_grants(options: BusOptions, *, out: Path, keys: Path) -> Pushed:
    """Pushes the account JWTs of `out/jwt` the resolver lacks or holds otherwise, and deletes the
    accounts it holds that `keys` holds seeds of and they do not name, connected as `options` say
    (the system user)."""
    auth = load_jwt_auth(out)
    ours = seeded_accounts(keys)
    async with connect_within(options, options.connect_timeout) as bus:
        held = await held_accounts(bus, auth.accounts.keys())
        plan = plan_resolver(auth.accounts, held, ours=ours.keys())
        for key in plan.push:
            await push_account(bus, auth.accounts[key], operator=auth.operator)
        if plan.delete:
            await delete_accounts(bus, operator_key(keys), plan.delete)
    return Pushed(
        pushed=tuple(_name(auth.accounts[key], key) for key in plan.push),
        deleted=tuple(ours[key] for key in plan.delete),
        foreign=tuple(sorted(key for key in held if key not in ours)),
    )


async def held_accounts(bus: Bus, issued: Collection[str]) -> dict[str, str | None]:
    """Every account the resolver holds, by its public key: its JWT for those of `issued` (the
    others are not looked up: `None`)."""
    operation = "list the resolver's accounts"
    try:
        keys = json.loads(await _resolver_request(bus, CLAIMS_LIST, operation)).get("data")
    except (ValueError, AttributeError):
        keys = None
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise BusError(operation, "the answer holds no list of accounts")
    return {
        key: (await _resolver_request(bus, CLAIMS_LOOKUP.format(key), f"look up account {key}"))
        if key in issued
        else None
        for key in keys
    }


async def _resolver_request(bus: Bus, subject: str, operation: str) -> str:
    try:
        reply = await bus.request(subject, operation=operation)
    except (NoResponders, BusTimeout) as err:
        raise BusError(operation, f"{err.reason}: {NOT_A_RESOLVER}") from err
    return reply.data.decode()


def _name(token: str, key: str) -> str:
    """An account as the summary names it: the name its JWT carries, else its key."""
    try:
        return str(claims_of(token)["name"])
    except (ValueError, KeyError, IndexError):
        return key
