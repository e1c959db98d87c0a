"""A pending module's reasons in the classes an operator pages on, read the one way both the node
and the seat count them."""

from __future__ import annotations

from registry.contract import PENDING_CAUSES, pending_causes


def test_each_reason_has_one_class_and_a_module_may_have_several() -> None:
    reasons = [
        "${secret:db}: mesh-vault.secret answered error 403: not yours",
        "${secret:api}: mesh-vault.secret did not answer within 2.0 s",
        "${dir:state}: no value in mesh-dir for state",
    ]
    assert pending_causes(reasons[:1]) == {"verb_refused"}
    assert pending_causes(reasons[1:2]) == {"verb_unanswered"}
    assert pending_causes(["nobody answers mesh-vault.secret"]) == {"verb_unanswered"}
    assert pending_causes(reasons) == {"verb_refused", "verb_unanswered", "other"}
    assert pending_causes([]) == frozenset()
    assert PENDING_CAUSES[:2] == ("verb_refused", "verb_unanswered") and PENDING_CAUSES[-1] == "other"
