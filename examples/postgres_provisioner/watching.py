"""Applying the delivery once, or following it: the host replaces the env file atomically (a new
inode each time), so it is polled by path rather than watched, and applied when its content's
digest changes, after a failure (with a backoff while PostgreSQL is away) and every `resync`
seconds (a change made by hand in PostgreSQL is put back). Between polls the process keeps
digests only: the passwords are read from the file for the reconcile and dropped with it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from examples.postgres_provisioner.consumers import Digests, parse_consumers, read_env_variable
from examples.postgres_provisioner.errors import DeliveryError, PostgresUnavailable
from examples.postgres_provisioner.reconcile import Outcome, reconcile
from registry.runtime import event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What the provisioner applies, where from and how often: settings passed down from `main()`."""

    env_file: Path
    variable: str = "PG_CONSUMERS"
    dsn: str = ""
    poll: float = 2.0
    resync: float = 300.0
    backoff_max: float = 30.0


def apply_once(plan: Plan, digests: Digests) -> Outcome:
    """Reads the delivery and makes PostgreSQL match it; `DeliveryError` changes nothing."""
    value = read_env_variable(plan.env_file, plan.variable)
    consumers = parse_consumers(value, f"{plan.env_file} {plan.variable}")
    del value
    outcome = reconcile(plan.dsn, consumers, digests)
    level = logging.INFO if outcome.ok else logging.ERROR
    log.log(
        level, "reconciled %d consumers: %s", len(consumers), outcome.summary(), extra=event(path=str(plan.env_file))
    )
    return outcome


class Watcher:
    """One poll at a time: `poll()` applies the delivery when it changed or is due again."""

    def __init__(self, plan: Plan, digests: Digests | None = None) -> None:
        self.plan = plan
        self.digests = digests or Digests()
        self._stamp: tuple[int, int, int] | None = None
        self._content = ""  # the keyed digest of the file's content as last read
        self._due = 0.0  # when to apply whatever the file holds (a change makes it now)
        self._failures = 0

    def poll(self) -> Outcome | None:
        """Applies the delivery if the file changed or it is due; what was done, or None."""
        now = time.monotonic()
        if not self._look(now) or now < self._due:
            return None
        try:
            outcome = apply_once(self.plan, self.digests)
        except PostgresUnavailable as err:
            self._failed(now, str(err))
            return None
        except DeliveryError as err:
            reason = f"delivery not applied, waiting for it to change: {err}"
            log.error("%s", reason, extra=event(path=str(self.plan.env_file)))  # noqa: TRY400 -- expected, no traceback
            self._due = float("inf")
            return None
        if outcome.ok:
            self._failures, self._due = 0, now + self.plan.resync
        else:
            self._failed(now, "something was refused")
        return outcome

    def _look(self, now: float) -> bool:
        """Reads the file when its stamp changed (a change of content makes it due now); False when
        it cannot be read."""
        try:
            status = os.stat(self.plan.env_file)
            stamp = (status.st_ino, status.st_mtime_ns, status.st_size)
            data = None if stamp == self._stamp else self.plan.env_file.read_bytes()
        except OSError as err:
            if self._stamp is not None or self._failures == 0:
                log.warning("delivery not readable: %s", err.strerror, extra=event(path=str(self.plan.env_file)))
            self._stamp, self._failures = None, self._failures + 1
            return False
        if data is not None:
            self._stamp, content = stamp, self.digests.of(data.decode("utf-8", errors="replace"))
            if content != self._content:
                self._content, self._due = content, now
        return True

    def _failed(self, now: float, reason: str) -> None:
        self._failures += 1
        delay = min(self.plan.backoff_max, self.plan.poll * 2 ** min(self._failures, 16))
        log.error("%s; trying again in %.1f s", reason, delay, extra=event(path=str(self.plan.env_file)))
        self._due = now + delay

    def run(self, stop: threading.Event) -> None:
        """Polls every `plan.poll` seconds until `stop` is set."""
        while not stop.is_set():
            self.poll()
            stop.wait(self.plan.poll)
