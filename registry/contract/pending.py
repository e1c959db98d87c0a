"""Why a module is pending, in the few classes an operator pages on: its applied record's reasons
(`AppliedValue.reasons`), each told by how the node client words it
(`provisioner_client.resolving`). The node counts its own pending modules by them, the seat its
fleet's: one reading of the words, here.

    verb_refused      a verb (the vault, say) answered an error
    verb_unanswered   a verb did not answer in time, or nothing serves its subject
    other             a value missing, a manifest unread, ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable

OTHER = "other"
_SAID_AS = {
    "verb_refused": re.compile(r" answered error \S+: "),
    "verb_unanswered": re.compile(r" did not answer within |nobody answers |no responders"),
}
PENDING_CAUSES: tuple[str, ...] = (*_SAID_AS, OTHER)


def pending_causes(reasons: Iterable[str]) -> frozenset[str]:
    """The classes of a pending module's reasons (one per reason; none without reasons)."""
    return frozenset(next((cause for cause, said in _SAID_AS.items() if said.search(r)), OTHER) for r in reasons)
