"""What one party's account may hold on nats-server: one table, rendered alike in a static
`accounts.conf` (`limits { max_connections, max_subscriptions, max_payload, max_leafnodes }`) and
in an account JWT (`conn`, `subs`, `payload`, `leaf`).

nats-server applies `subscriptions` to each connection of the account (a connection's next
subscription past it is refused with `-ERR 'maximum subscriptions exceeded'`), `connections` to the
account as a whole (the next connection is closed with `maximum account active connections
exceeded`), and `payload` to each message a connection publishes (a larger one closes the
connection with `Maximum Payload Violation`; what it receives is not bounded by it: a verb page of
the seat's own `max_payload` still reaches it). No party account exports anything (but the vault's
verbs) or attaches a leaf node (but a site's links at the hub: `Kind.SITE`); in JWT mode that is
said by the claims (`exports: 0`, `wildcards: false`), in a static configuration by the account
block, which declares no export.

Each kind of party has its limits (`PARTY_LIMITS`); a mesh file may set others for a kind
(`GivenLimits`, `[limits.node]`), within bounds: never below what the party's own program needs
(`LEAST`), never past `MOST`.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from registry.access.parties import Kind
from registry.errors import SettingsError

# A value of the buckets' default `max_value_size` (64 KiB) with its key and headers, and room to
# spare; a seat configured with larger values needs its parties' payload raised with it.
PAYLOAD = 128 * 1024
# The least a party may be allowed to publish: a value of the buckets' default largest (64 KiB),
# or a verb request of the seat's largest body (64 KiB), with its headers.
LEAST_PAYLOAD = 64 * 1024 + 4096


class PartyLimits(BaseModel):
    """Connections of the account, subscriptions of each connection, bytes of one published
    message (none, `null` in grants.json: the server's own `max_payload`), leaf node connections."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    connections: int
    subscriptions: int
    payload: int | None = PAYLOAD
    leafnodes: int = 0


PARTY_LIMITS: Mapping[Kind, PartyLimits] = {
    Kind.NODE: PartyLimits(connections=16, subscriptions=1000),
    # A provider reads the whole needs bucket and may run a process per provision.
    Kind.PROVIDER: PartyLimits(connections=64, subscriptions=10_000),
    Kind.OPERATOR: PartyLimits(connections=16, subscriptions=1000),
    # A domain writing its own bucket (the config service, the controller): a few processes.
    Kind.WRITER: PartyLimits(connections=16, subscriptions=1000),
    # The vault's answers (a provision's consumers) may be as large as the server allows.
    Kind.VAULT: PartyLimits(connections=64, subscriptions=1000, payload=None),
    # A site's links (registry.access.sites): two leaf connections (its data account's, its vault's),
    # which an account JWT's `conn` counts too (a static `max_connections` does not; no client can
    # connect: the links' users are leaf connections only). A leaf connection holds the interest of
    # the whole site (a subscription per copy, per node and bucket its copies read) and sends the
    # hub its nodes' largest writes.
    Kind.SITE: PartyLimits(connections=2, subscriptions=100_000, payload=None, leafnodes=2),
}

# What each party's own program needs at the least, and why. A node's client holds one connection
# (two while `status` or a one-shot `reconcile` runs beside it); watching, one subscription per
# bucket it follows (the registry, config, placement, each provider's `_bound`: 6 with the
# examples) and its inbox, and a reconcile's batch reads one more each while they run. The vault
# serves its verbs and the service API ($SRV.PING, INFO, STATS, bare and by name and id: 9) and
# reads needs. The others ask and write on one connection, through an inbox or two.
LEAST: Mapping[Kind, tuple[PartyLimits, str]] = {
    Kind.NODE: (
        PartyLimits(connections=2, subscriptions=20, payload=LEAST_PAYLOAD),
        "a node's client (its watch, and `status` beside it)",
    ),
    Kind.PROVIDER: (PartyLimits(connections=1, subscriptions=10, payload=LEAST_PAYLOAD), "a provider's program"),
    Kind.OPERATOR: (PartyLimits(connections=1, subscriptions=10, payload=LEAST_PAYLOAD), "an operator's commands"),
    Kind.WRITER: (PartyLimits(connections=1, subscriptions=10, payload=LEAST_PAYLOAD), "a writing domain's program"),
    Kind.VAULT: (
        PartyLimits(connections=1, subscriptions=20, payload=LEAST_PAYLOAD),
        "the vault (its verbs and the service API)",
    ),
    Kind.SITE: (PartyLimits(connections=2, subscriptions=1000, payload=LEAST_PAYLOAD), "a site's two leaf links"),
}
# Past these a limit bounds nothing a mesh needs (nats-server takes a `max_payload` of 64 MiB at most).
MOST = PartyLimits(connections=100_000, subscriptions=1_000_000, payload=64 * 1024 * 1024)
LIMITED = ("connections", "subscriptions", "payload")


class GivenLimits(BaseModel):
    """The limits a mesh file sets for a kind of party (`[limits.node]`); each left out keeps the
    kind's own (`PARTY_LIMITS`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    connections: StrictInt | None = Field(default=None, ge=1, le=MOST.connections)
    subscriptions: StrictInt | None = Field(default=None, ge=1, le=MOST.subscriptions)
    payload: StrictInt | None = Field(default=None, ge=1, le=MOST.payload)


def limits_of(kind: Kind, given: GivenLimits | None = None) -> PartyLimits:
    """The limits of a party account of `kind` (the seat's data account has none), as `given`
    sets them; raises `SettingsError` for one below what the party's program needs."""
    problems = too_low(kind, given)
    if problems:
        raise SettingsError(f"the limits of {kind.value} accounts", "; ".join(problems))
    if given is None:
        return PARTY_LIMITS[kind]
    return PARTY_LIMITS[kind].model_copy(update=given.model_dump(exclude_none=True))


def too_low(kind: Kind, given: GivenLimits | None) -> list[str]:
    """Each limit `given` sets below what a party of `kind` needs, said with the least it takes."""
    if given is None:
        return []
    least, who = LEAST[kind]
    found = []
    for name in LIMITED:
        value, floor = getattr(given, name), getattr(least, name)
        if value is not None and floor is not None and value < floor:
            found.append(f"{name}: {value} is below {floor}, the least for {who}")
    return found
