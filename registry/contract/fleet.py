"""The fleet bucket, `mesh-provisioner_fleet`: what every node reads about the fleet as a whole, so
that a change reaches the fleet in waves and collections forget nodes gone for good.
Every key of it is built and parsed here:

    claim.<module>.<node>   node `node`'s claim of one of `module`'s rollout slots (`Claim`): the node
                            writes its own alone (its grants: `claim.*.<node>`), so it holds at most
                            one slot of a module and touches no other node's. The slots are the
                            first `budget` live claims by queue position (`Claim.position`: the
                            revision of the node's first write, kept across its renewals); a
                            claim not renewed within its ttl (at most `MAX_CLAIM_TTL`) is dead.
                            The seat judges each claim as the bus stored it and deletes one that
                            does not count (`provisioner.seat.rollouts`): of a node that does not
                            run the module, or naming a place in the queue the bus did not give
                            it; `live_claims` is every reader's one reading of what stands
    rollout.<module>        `module`'s rollout held (`Hold`): paused after a node's change failed (the
                            seat writes it, only for a node running the module) or by an operator,
                            aborted by an operator; none: the rollout runs
    gone.<node>             node `node` left out of every collection since it was gone longer than the
                            seat's `forget_after` (`Gone`); deleted when it is back

Names are escaped as every key's (`registry.contract.escaping`): a module named `a.b` is `a=2Eb`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from registry.contract.buckets import PREFIX, Bucket
from registry.contract.escaping import decode_token, encode_token
from registry.contract.keys import KeyShape
from registry.errors import KeyShapeError, TokenError

FLEET = Bucket(f"{PREFIX}_fleet", KeyShape("<kind>.<name>[.<node>]"))

CLAIM: Final = "claim"
ROLLOUT: Final = "rollout"
GONE: Final = "gone"
_SHAPES = "claim.<module>.<node> | rollout.<module> | gone.<node>"
_MAX_TEXT = 1024  # a reason or a name in a value: bounded, as every echoed text
MAX_CLAIM_TTL: Final = 300.0  # seconds a claim stands unrenewed at most, whatever it says


def claim_key(module: str, node: str) -> str:
    return f"{CLAIM}.{encode_token(module)}.{encode_token(node)}"


def claims_of(module: str) -> str:
    """The filter of every node's claim of `module`: `claim.<module>.>`."""
    return f"{CLAIM}.{encode_token(module)}.>"


def own_claims(node: str) -> str:
    """The filter of `node`'s claims of every module, `claim.*.<node>`: what its grants let it write."""
    return claims_by_token(encode_token(node))


def hold_key(module: str) -> str:
    return f"{ROLLOUT}.{encode_token(module)}"


def gone_key(node: str) -> str:
    return f"{GONE}.{encode_token(node)}"


@dataclass(frozen=True)
class FleetKey:
    """A key of the fleet bucket, read: its kind and the names it holds (decoded)."""

    kind: Literal["claim", "rollout", "gone"]
    module: str | None = None
    node: str | None = None


def parse_fleet_key(key: str) -> FleetKey:
    """The kind and names of `key`; `KeyShapeError` for a key of no shape this module builds."""
    tokens = key.split(".")
    try:
        if tokens[0] == CLAIM and len(tokens) == 3:
            return FleetKey(CLAIM, module=decode_token(tokens[1]), node=decode_token(tokens[2]))
        if tokens[0] == ROLLOUT and len(tokens) == 2:
            return FleetKey(ROLLOUT, module=decode_token(tokens[1]))
        if tokens[0] == GONE and len(tokens) == 2:
            return FleetKey(GONE, node=decode_token(tokens[1]))
    except TokenError as err:
        raise KeyShapeError(key[:200], _SHAPES, err.reason) from None
    raise KeyShapeError(key[:200], _SHAPES, "its kind or its count of tokens is none of these")


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Claim(_Value):
    """A node's claim of a rollout slot: `waiting` (queued behind the first `budget`), `running`
    (its env file written, its change action and health check running), `failed` (either failed:
    it keeps its slot, so failures use up the budget even while nobody pauses the rollout).
    `change` names the change (a short keyed digest of the values applied: no value); `ttl` is how
    long the claim stands without being written again (the holder renews it while it runs)."""

    state: Literal["waiting", "running", "failed"]
    change: str = Field(max_length=64)
    since: datetime
    ttl_seconds: float = Field(gt=0, le=24 * 3600)  # read as `MAX_CLAIM_TTL` at most (`lifetime`)
    reason: str = Field(default="", max_length=_MAX_TEXT)
    queued: int = Field(default=0, ge=0)  # the revision of its first write; 0: this write is it

    def position(self, revision: int) -> int:
        """Where the claim stands in its module's queue: the revision of its first write
        (`queued`), kept across renewals; a first write's own `revision`. The node's word, checked
        by the seat against the writes it read (`provisioner.seat.rollouts`); never past `revision`."""
        return self.queued if 0 < self.queued <= revision else revision

    def lifetime(self, max_ttl: float = MAX_CLAIM_TTL) -> timedelta:
        """How long the claim stands after its last write: its ttl, `max_ttl` at most."""
        return timedelta(seconds=min(self.ttl_seconds, max_ttl))


class Hold(_Value):
    """A module's rollout held: `paused` (no node takes a slot; those running finish) or `aborted`
    (the nodes that changed go back to their last good values where the module can; nobody
    changes until an operator resumes). `by` says who held it (`seat`, an operator's name)."""

    state: Literal["paused", "aborted"]
    since: datetime
    by: str = Field(max_length=_MAX_TEXT)
    reason: str = Field(default="", max_length=_MAX_TEXT)
    node: str | None = Field(default=None, max_length=_MAX_TEXT)  # whose failure paused it


class Gone(_Value):
    """A node left out of collections: when it was last seen, and since when it is left out."""

    last_seen: datetime | None = None
    since: datetime


def read_claim(value: bytes) -> Claim | None:
    """The claim a stored value holds; None for a value that is none (a node's own word, unread)."""
    try:
        return Claim.model_validate_json(value)
    except ValueError:
        return None


class Stored(Protocol):
    """A key's entry as read from the bus (`registry.wire.KvItem`)."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> bytes: ...
    @property
    def revision(self) -> int: ...
    @property
    def deleted(self) -> bool: ...
    @property
    def stored_at(self) -> datetime | None: ...


@dataclass(frozen=True)
class LiveClaim:
    """A claim standing: its node (the key's), the claim, its place in the queue and its revision."""

    node: str
    claim: Claim
    position: int
    revision: int = 0


def live_claims(
    items: Iterable[Stored], now: datetime, *, skew: timedelta, max_ttl: float = MAX_CLAIM_TTL
) -> list[LiveClaim]:
    """The live claims among `items` (claim keys as read), in queue order: the one reading of the
    claims every reader shares (the seat, the nodes' admission, `rollout status`, `top`).

    A key of no shape or a non-canonical token (which no node's grant can refuse: its module's
    token is any one), a deleted key, a value that is no claim and a claim not written again
    within its lifetime (`Claim.lifetime`, from the server's stamp, plus `skew`) are no claim."""
    found = []
    for item in items:
        if item.deleted:
            continue
        try:
            key = parse_fleet_key(item.key)
        except KeyShapeError:
            continue
        claim = read_claim(item.value)
        if key.kind != CLAIM or key.node is None or claim is None:
            continue
        if (item.stored_at or now) + claim.lifetime(max_ttl) + skew < now:
            continue
        found.append(LiveClaim(key.node, claim, claim.position(item.revision), item.revision))
    return sorted(found, key=lambda live: (live.position, live.node))


def copied_reason(text: str, limit: int = _MAX_TEXT) -> str:
    """A node's text as the seat copies it into a value it writes (a hold's reason): control,
    format and separator characters dropped (a line break, a tab: a space), so that no escape
    sequence or reordering of one party's reaches another's terminal; at most `limit` characters."""
    kept = (" " if char in "\t\n\r" else char for char in text if char.isprintable() or char in "\t\n\r")
    return "".join(kept)[:limit]


def read_hold(value: bytes, stored_at: datetime | None = None) -> Hold:
    """The hold a stored value holds. One no party of the contract would write (only operators and
    the seat write holds: a newer version's, a damaged one) holds all the same, as paused by nobody
    known since it was stored, so that every node and every view read it alike."""
    try:
        return Hold.model_validate_json(value)
    except ValueError:
        return Hold(state="paused", since=stored_at or datetime.now(UTC), by="?", reason="unreadable hold")


# The words a node's applied record starts its reason with while a rollout holds its module back,
# by the class the seat and `query applied --by-reason` read it in (`registry.contract.pending`):
# whatever follows them (a place in the queue, who paused) is the node's.
ROLLOUT_REASONS: Final = {
    "rollout_waiting": "rollout: waiting for a slot",
    "rollout_paused": "rollout: paused",
    "rollout_aborted": "rollout: aborted",
    "rollout_unreachable": "rollout: coordination unreachable",
}


def rollout_reason_class(reason: str) -> str | None:
    """The class of a pending module's reason that a rollout gave (`ROLLOUT_REASONS`), None for another."""
    return next((cause for cause, start in ROLLOUT_REASONS.items() if reason.startswith(start)), None)


def reason_group(reason: str) -> str:
    """What a listing by reason groups `reason` under: a rollout's reason under its class's words
    (`rollout: waiting for a slot`), one line for every node held back alike; any other as it is."""
    cause = rollout_reason_class(reason)
    return ROLLOUT_REASONS[cause] if cause is not None else reason


# What each node writes of the fleet, for the seat's quota guard (`provisioner.seat.quotas`): its
# claims alone. A key's owner is its last token (any module token: a node's grants take any).


def claim_owner(key: str) -> str | None:
    """The node token whose claim `key` is (`claim.<module>.<node>`, the token as the key holds it);
    None for a key no node writes (a hold, a gone mark)."""
    tokens = key.split(".")
    return tokens[2] if len(tokens) == 3 and tokens[0] == CLAIM else None


def claims_by_token(token: str) -> str:
    """The filter of every claim of the node whose key token is `token`: `claim.*.<token>`."""
    return f"{CLAIM}.*.{token}"
