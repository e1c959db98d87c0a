"""The change action: a module's command, run once after its env file changed, with a timeout.

The command runs without a shell, in a session of its own (so a timeout ends it and whatever it
started), with the client's stdout and stderr. Its outcome, never its output, is recorded in
`applied` with the digest of the env file it ran for: a later reconcile runs it again only for
a different digest, so a failed or timed-out action is not retried for the same content.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from datetime import UTC, datetime

import anyio

from provisioner_client.manifest import OnChange
from registry.models import ActionRecord, Outcome

log = logging.getLogger(__name__)


async def run_action(module: str, on_change: OnChange, digest: str) -> ActionRecord:
    command = on_change.command
    log.info("running the change action of module %s: %s", module, " ".join(command))
    exit_code: int | None = None
    try:
        process = await anyio.open_process(list(command), stdin=subprocess.DEVNULL, stdout=None, stderr=None,
                                           start_new_session=True)  # fmt: skip
    except OSError as err:
        log.warning("change action of module %s could not start: %s", module, err.strerror)
        return _record(on_change, digest, "could not start", None)
    async with process:
        with anyio.move_on_after(on_change.timeout_seconds) as scope:
            exit_code = await process.wait()
        if scope.cancelled_caught:
            _kill_group(process.pid)
            with anyio.move_on_after(5, shield=True):
                await process.wait()
            log.warning("change action of module %s timed out after %g s", module, on_change.timeout_seconds)
            return _record(on_change, digest, "timed out", None)
    outcome: Outcome = "succeeded" if exit_code == 0 else "failed"
    log.log(logging.INFO if exit_code == 0 else logging.WARNING,
            "change action of module %s %s (exit code %s)", module, outcome, exit_code)  # fmt: skip
    return _record(on_change, digest, outcome, exit_code)


def _record(on_change: OnChange, digest: str, outcome: Outcome, exit_code: int | None) -> ActionRecord:
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    return ActionRecord(command=on_change.command, digest=digest, outcome=outcome, exit_code=exit_code,
                        finished_at=finished)  # fmt: skip


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
