"""The watch loop's backoff (pure logic): writes waiting for the hub do not grow it past their retry."""

from __future__ import annotations

from datetime import timedelta

from provisioner_client.watch.watching import Backoff


def test_delays_double_up_to_the_limit_and_start_again_once_reset() -> None:
    backoff = Backoff(timedelta(seconds=5))
    assert [backoff.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_a_long_cut_link_leaves_the_next_other_failure_retried_soon() -> None:
    """A site's cut link is retried every second for minutes; the first refusal after it (a
    conditional write judged against a mirror the hub had not caught up yet) waited 30 s, the
    delay the cut's retries had doubled to, when it took the hub a second to catch up."""
    backoff = Backoff(timedelta(seconds=30))
    waits = [backoff.next(cap=1.0) for _ in range(20)]
    assert waits == [0.5] + [1.0] * 19
    assert backoff.next() == 1.0
    assert backoff.next() == 2.0
