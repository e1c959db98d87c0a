"""The site's seat remembers the copies' resets it may send again, within a bound: a flood of
resets on the site's data account (someone else's) cannot grow its memory past it."""

from __future__ import annotations

from provisioner.seat.site_resets import MOST_WAITING, RESEND_AFTER, SERVER_WAITS, LostResets
from registry.wire import Message

RESET = "$JS.hub.API.CONSUMER.RESET.KV_mesh-provisioner_registry.site-site1"


def reset(reply: str) -> Message:
    return Message(RESET, b"", {}, reply)


def test_a_flood_of_resets_is_remembered_up_to_a_bound_and_forgotten_when_the_server_stops_waiting() -> None:
    resets = LostResets()
    for number in range(MOST_WAITING + 500):
        resets.asked(reset(f"$JSC.R.{number}"), now=0.0)
    assert len(resets.waiting) == MOST_WAITING
    assert len(resets.due(RESEND_AFTER)) == MOST_WAITING
    assert resets.due(SERVER_WAITS + 1) == []
    assert resets.waiting == {}


def test_a_reset_answered_is_not_sent_again_and_one_heard_twice_counts_once() -> None:
    resets = LostResets()
    resets.asked(reset("$JSC.R.a"), now=0.0)
    resets.asked(reset("$JSC.R.a"), now=0.3)  # our own resend, heard again
    resets.asked(reset("$JSC.R.b"), now=0.0)
    resets.answered(Message("$JSC.R.a", b"{}", {}, ""))
    assert [reply for reply, _ in resets.due(RESEND_AFTER)] == ["$JSC.R.b"]
    assert resets.waiting["$JSC.R.b"].since == 0.0
