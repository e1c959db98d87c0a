"""The verb's request figures: how many requests of each `what` were answered with each code, and
how long they took (from the request's arrival to its answer sent). One source for both places
they are read: the seat's Prometheus series (`provisioner.metrics`) and the service's own
`$SRV.STATS` answer (`nats micro stats mesh-provisioner`).

The labels are bounded: a `what` of the contract, or `unread` for a request refused before its
`what` was read (a body out of shape, an account without grants); a code of the error contract.
Counting costs a dictionary update and a bisect per request.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from provisioner.verb.request import LISTABLE

UNREAD = "unread"
WHATS: tuple[str, ...] = (*LISTABLE, UNREAD)
OK = "200"
# Seconds: from a view's answer (well under a millisecond) to a whole listing read under load.
LATENCY_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LAST_ERROR_CHARS = 256


@dataclass
class Latency:
    """One `what`'s answers by how long they took: a count per bucket of `LATENCY_BUCKETS` (and
    one past the last), their count and their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += 1
        self.seconds += seconds

    def cumulative(self) -> Iterator[tuple[float, int]]:
        """Each bucket's upper bound (the last: infinity) with the answers at or under it."""
        below = 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.counts, strict=True):
            below += count
            yield bound, below


class RequestStats:
    """The verb's answers by `what` and code, and their latencies by `what`."""

    def __init__(self) -> None:
        self.received = 0
        self.answers: dict[tuple[str, str], int] = {}
        self.latency: dict[str, Latency] = {what: Latency() for what in WHATS}
        self.errors = 0
        self.last_error = ""

    def answered(self, what: str, code: str, seconds: float, reason: str = "") -> None:
        """Counts an answer sent: `what` asked (`UNREAD`: not read), the code it was answered with."""
        what = what if what in self.latency else UNREAD
        self.answers[what, code] = self.answers.get((what, code), 0) + 1
        self.latency[what].add(seconds)
        if code != OK:
            self.errors += 1
            self.last_error = f"{code} {reason}"[:LAST_ERROR_CHARS]

    @property
    def total(self) -> int:
        return sum(self.answers.values())

    @property
    def in_flight(self) -> int:
        """Requests received (`received` counts them) and not answered yet."""
        return self.received - self.total

    @property
    def seconds(self) -> float:
        return sum(latency.seconds for latency in self.latency.values())

    def as_data(self) -> dict[str, Any]:
        """The figures as `$SRV.STATS` carries them in the endpoint's `data`: answers by what and
        code, and each what's answers, their total seconds, their average in milliseconds and
        their histogram (`buckets`: answers at or under each bound, as Prometheus's `le`)."""
        answers: dict[str, dict[str, int]] = {}
        for (what, code), count in sorted(self.answers.items()):
            answers.setdefault(what, {})[code] = count
        return {"answers": answers, "latency": _latencies(self.latency)}


def _bound(bound: float) -> str:
    """A bucket's upper bound as Prometheus writes it (`le`): `0.005`, `1.0`, `+Inf`."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _latencies(latency: Mapping[str, Latency]) -> dict[str, dict[str, Any]]:
    return {
        what: {
            "answers": figures.total,
            "seconds": round(figures.seconds, 6),
            "average_ms": round(figures.seconds / figures.total * 1000, 3),
            "buckets": {_bound(bound): count for bound, count in figures.cumulative()},
        }
        for what, figures in latency.items()
        if figures.total
    }
