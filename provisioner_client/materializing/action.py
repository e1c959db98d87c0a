"""The change action: a module's command, run once after its env file changed, with a timeout.

The command runs without a shell, in a session of its own (so a timeout ends it and whatever it
started), with the client's stdout and stderr, and with a minimal environment, never the
client's own (which holds the NATS credentials: `NATS_PASSWORD`, `NATS_NKEY`, ...):

    PATH            the client's PATH, else /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    LANG            the client's LANG, else C.UTF-8
    MESH_NODE       this node's name
    MESH_MODULE     the module's name
    MESH_ENV_FILE   the path of the module's env file, just written

`inherited(environ)` takes PATH and LANG from the client's environment, in `main()`.

Its outcome, never its output, is recorded in `applied` with the digest of the env file it ran
for: a later reconcile runs it again only for a different digest, so a failed or timed-out
action is not retried for the same content.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import anyio

from provisioner_client.errors import capped
from provisioner_client.resolving.manifest import HealthCheck, OnChange
from registry.contract import ActionRecord, Outcome

log = logging.getLogger(__name__)

DEFAULT_ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def inherited(environ: Mapping[str, str]) -> dict[str, str]:
    """What a change action takes from the client's environment: PATH and LANG, nothing else."""
    return {name: environ.get(name) or default for name, default in DEFAULT_ENVIRONMENT.items()}


def action_environment(base: Mapping[str, str], *, node: str, module: str, env_file: Path) -> dict[str, str]:
    return {**base, "MESH_NODE": node, "MESH_MODULE": module, "MESH_ENV_FILE": str(env_file)}


async def run_action(
    module: str, on_change: OnChange | HealthCheck, digest: str, *, env: Mapping[str, str], what: str = "change action"
) -> ActionRecord:
    """Runs the change action (or, `what` says, the health check) with exactly `env` (see `action_environment`)."""
    command = on_change.command
    log.info("running the %s of module %s: %s", what, module, " ".join(command)[:500])
    exit_code: int | None = None
    try:
        process = await anyio.open_process(
            list(command), stdin=subprocess.DEVNULL, stdout=None, stderr=None, start_new_session=True, env=dict(env)
        )
    except OSError as err:
        log.warning("%s of module %s could not start: %s", what, module, err.strerror)
        return _record(on_change, digest, "could not start", None)
    async with process:
        with anyio.move_on_after(on_change.timeout_seconds) as scope:
            exit_code = await process.wait()
        if scope.cancelled_caught:
            _kill_group(process.pid)
            with anyio.move_on_after(5, shield=True):
                await process.wait()
            log.warning("%s of module %s timed out after %g s", what, module, on_change.timeout_seconds)
            return _record(on_change, digest, "timed out", None)
    outcome: Outcome = "succeeded" if exit_code == 0 else "failed"
    log.log(
        logging.INFO if exit_code == 0 else logging.WARNING,
        "%s of module %s %s (exit code %s)",
        what,
        module,
        outcome,
        exit_code,
    )
    return _record(on_change, digest, outcome, exit_code)


def _record(on_change: OnChange | HealthCheck, digest: str, outcome: Outcome, exit_code: int | None) -> ActionRecord:
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    return ActionRecord(
        command=_recorded(on_change.command), digest=digest, outcome=outcome, exit_code=exit_code, finished_at=finished
    )


def _recorded(command: tuple[str, ...], *, count: int = 16) -> tuple[str, ...]:
    """The command as the record keeps it: bounded, so a long one never makes the record too large."""
    shown = tuple(capped(argument, 200) for argument in command[:count])
    return shown + ((f"... and {len(command) - count} more",) if len(command) > count else ())


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
