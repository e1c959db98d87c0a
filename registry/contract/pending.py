"""Why a module is pending, in the few classes an operator pages on: its applied record's reasons
(`AppliedValue.reasons`), each told by how the node client words it
(`provisioner_client.resolving`, and its rollouts for the `rollout: ` ones). The node counts its
own pending modules by them, the seat its fleet's: one reading of the words, here.

    verb_refused          a verb (the vault, say) answered an error
    verb_unanswered       a verb did not answer in time, or nothing serves its subject
    rollout_waiting       `rollout: waiting for a slot`: the module's rollout budget is taken
    rollout_paused        `rollout: paused`: a node's change failed, or an operator paused it
    rollout_aborted       `rollout: aborted`: an operator aborted it; nobody changes until resumed
    rollout_unreachable   `rollout: coordination unreachable`: the fleet bucket could not be read
                          or written; the node waits, then follows its fallback
    other                 a value missing, a manifest unread, ...

A rollout's reason is told by the words it starts with (`registry.contract.fleet.ROLLOUT_REASONS`),
whatever follows (a place in the queue, who paused it); `fleet.reason_group` gives those words, so
that a listing by reason shows one line per class of them, not one per node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from registry.contract.fleet import ROLLOUT_REASONS, rollout_reason_class

OTHER = "other"
_SAID_AS = {
    "verb_refused": re.compile(r" answered error \S+: "),
    "verb_unanswered": re.compile(r" did not answer within |nobody answers |no responders"),
}
PENDING_CAUSES: tuple[str, ...] = (*_SAID_AS, *ROLLOUT_REASONS, OTHER)


def pending_causes(reasons: Iterable[str]) -> frozenset[str]:
    """The classes of a pending module's reasons (one per reason; none without reasons)."""
    return frozenset(_cause(reason) for reason in reasons)


def _cause(reason: str) -> str:
    rollout = rollout_reason_class(reason)
    if rollout is not None:
        return rollout
    return next((cause for cause, said in _SAID_AS.items() if said.search(reason)), OTHER)
