"""`mesh-provisioner grants --jwt --push`: nats-server's resolver made to hold exactly the issued accounts.

The resolver is asked what it holds (`$SYS.REQ.CLAIMS.LIST`, then each account's JWT by
`$SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP`), then told the difference: each issued account JWT it lacks
or holds otherwise is pushed (`registry.access.push_account`, the exporting accounts first), each
account it holds that the grants no longer name is deleted (`registry.access.delete_accounts`:
its connections are closed, its credentials refused). Judging against the resolver rather than
against the files written before makes a push that failed half-way whole when run again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from registry.access import claims_of, delete_accounts, load_jwt_auth, operator_key, plan_resolver, push_account
from registry.errors import BusError, BusTimeout, NoResponders
from registry.wire import Bus, BusOptions, connect_within

CLAIMS_LIST = "$SYS.REQ.CLAIMS.LIST"
CLAIMS_LOOKUP = "$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP"
NOT_A_RESOLVER = (
    "is nats-server in JWT mode with a full resolver (include OUT/jwt/server-auth.conf), and is this "
    "the system account's user (KEYS/sys.creds)?"
)


@dataclass(frozen=True)
class Pushed:
    """What the resolver was told: the accounts pushed and deleted, by name."""

    pushed: tuple[str, ...]
    deleted: tuple[str, ...]

    def summary(self) -> str:
        if not (self.pushed or self.deleted):
            return "resolver: it holds exactly the issued accounts; nothing pushed"
        pushed = f"pushed {', '.join(self.pushed)}" if self.pushed else "pushed none"
        deleted = f"deleted {', '.join(self.deleted)}" if self.deleted else "deleted none"
        return f"resolver: {pushed}; {deleted}"


async def push_grants(options: BusOptions, *, out: Path, keys: Path) -> Pushed:
    """Pushes the account JWTs of `out/jwt` the resolver lacks or holds otherwise, and deletes the
    accounts it holds that they do not name, connected as `options` say (the system user)."""
    auth = load_jwt_auth(out)
    async with connect_within(options, options.connect_timeout) as bus:
        held = await held_accounts(bus)
        plan = plan_resolver(auth.accounts, held)
        for key in plan.push:
            await push_account(bus, auth.accounts[key], operator=auth.operator)
        if plan.delete:
            await delete_accounts(bus, operator_key(keys), plan.delete)
    return Pushed(
        pushed=tuple(_name(auth.accounts[key], key) for key in plan.push),
        deleted=tuple(_name(held[key], key) for key in plan.delete),
    )


async def held_accounts(bus: Bus) -> dict[str, str]:
    """Every account the resolver holds: its JWT by its public key."""
    listed = await _resolver_request(bus, CLAIMS_LIST, "list the resolver's accounts")
    keys = json.loads(listed).get("data")
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise BusError("list the resolver's accounts", "the answer holds no list of accounts")
    return {key: (await _resolver_request(bus, CLAIMS_LOOKUP.format(key), f"look up account {key}")) for key in keys}


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
