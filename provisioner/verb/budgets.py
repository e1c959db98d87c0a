"""Bytes of answers each party may be sent a second: a party's listings cost the seat what it reads
and sends, and one node listing its own 64 KiB values as fast as it could ask made the seat spend a
quarter of its time in `send()` alone, every other party's answer waiting behind it.

Each party from another account has a bucket of tokens (bytes), filled at its rate up to
`BURST_SECONDS` of it. An answer is charged when it is ready; one that overdraws the bucket is sent
once the debt is paid back at the rate, the party's turn held meanwhile, so that its next request
waits too (`provisioner.verb.service`). A node reads its own keys: at 8 MiB/s its largest footprint
(its quota, 64 MiB a bucket) is answered in seconds, an honest node's few KB at once. Operators and
providers read the mesh, at a higher rate; the seat's own account is not bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from registry.access import Party

BURST_SECONDS = 4.0  # a party's bucket holds this many seconds of its rate
PARTIES_KEPT = 10_000  # parties whose bucket is remembered; past it, the full ones are forgotten


@dataclass(frozen=True)
class AnswerRates:
    """Bytes a second of answers: to a node (or any party answered about its own keys alone), and
    to a party that reads the mesh (an operator, a provider). 0: not bounded."""

    node: int = 8 * 1024 * 1024
    reader: int = 64 * 1024 * 1024

    def of(self, party: Party) -> int:
        return self.reader if party.sees_the_mesh else self.node


class AnswerBudgets:
    """Each party's bucket of bytes (see the module)."""

    def __init__(self, rates: AnswerRates, clock: Callable[[], float] = time.monotonic) -> None:
        self.rates = rates
        self._clock = clock
        self._levels: dict[Party, tuple[float, float]] = {}  # party: (bytes in its bucket, when)

    def wait_for(self, party: Party | None, size: int) -> float:
        """Charges `size` bytes to `party`; the seconds to wait before sending them (0: at once)."""
        rate = self.rates.of(party) if party is not None else 0
        if party is None or rate <= 0:
            return 0.0
        now, full = self._clock(), rate * BURST_SECONDS
        level, then = self._levels.get(party, (full, now))
        level = min(full, level + (now - then) * rate) - size
        if len(self._levels) >= PARTIES_KEPT:
            self._forget_full(now)
        self._levels[party] = (level, now)
        return max(0.0, -level / rate)

    def _forget_full(self, now: float) -> None:
        """Forgets the parties whose bucket has filled again: they start full anyway."""
        for party, (level, then) in list(self._levels.items()):
            rate = self.rates.of(party)
            if level + (now - then) * rate >= rate * BURST_SECONDS:
                del self._levels[party]
