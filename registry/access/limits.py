"""What one party's account may hold on nats-server: one table, rendered alike in a static
`accounts.conf` (`limits { max_connections, max_subscriptions, max_payload, max_leafnodes }`) and
in an account JWT (`conn`, `subs`, `payload`, `leaf`).

nats-server applies `subscriptions` to each connection of the account (a connection's next
subscription past it is refused with `-ERR 'maximum subscriptions exceeded'`), `connections` to the
account as a whole (the next connection is closed with `maximum account active connections
exceeded`), and `payload` to each message a connection publishes (a larger one closes the
connection with `Maximum Payload Violation`; what it receives is not bounded by it: a verb page of
the seat's own `max_payload` still reaches it). No party account exports anything or attaches a
leaf node; in JWT mode that is said by the claims (`exports: 0`, `wildcards: false`), in a static
configuration by the account block, which declares no export.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from registry.access.parties import Kind

# A value of the buckets' default `max_value_size` (64 KiB) with its key and headers, and room to
# spare; a seat configured with larger values needs its parties' payload raised with it.
PAYLOAD = 128 * 1024


@dataclass(frozen=True)
class PartyLimits:
    """Connections of the account, subscriptions of each connection, bytes of one published
    message (`None`: the server's own `max_payload`), leaf node connections."""

    connections: int
    subscriptions: int
    payload: int | None = PAYLOAD
    leafnodes: int = 0


# A node's client holds one connection (two while `status` runs beside it) and about ten
# subscriptions; a provider reads the whole needs bucket and may run a process per provision.
PARTY_LIMITS: Mapping[Kind, PartyLimits] = {
    Kind.NODE: PartyLimits(connections=16, subscriptions=1000),
    Kind.PROVIDER: PartyLimits(connections=64, subscriptions=10_000),
    Kind.OPERATOR: PartyLimits(connections=16, subscriptions=1000),
    # A domain writing its own bucket (the config service, the controller): a few processes.
    Kind.WRITER: PartyLimits(connections=16, subscriptions=1000),
    # The vault's answers (a provision's consumers) may be as large as the server allows.
    Kind.VAULT: PartyLimits(connections=64, subscriptions=1000, payload=None),
}


def limits_of(kind: Kind) -> PartyLimits:
    """The limits of a party account of `kind` (the seat's data account has none)."""
    return PARTY_LIMITS[kind]
