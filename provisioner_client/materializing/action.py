"""A module's change on the machine: its env file written once its rollout lets it (`apply`), its
change action and health command run, or the last good file put back when its rollout was aborted
(`_roll_back`); or the module pending (`pending`), every reason said and its file as it was.

A module whose env file would change (or whose change action has not run for its content) changes
only once its rollout lets it (`RolloutGate.admit`); a change admitted under a claim runs its
action at most once (`RolloutGate.run_under_claim`), then its health command. Whether the action
is due is judged by the node's own record of the action last run on its file
(`EnvFolder.acted_on`, kept before the bus is told), not by the applied record alone: a
nats-server that lost its last acknowledged writes serves an older one. A pending module's
reasons are bounded: at most `MAX_REASONS`, each capped (`bounded_reasons`).

The change action: a module's command, run once after its env file changed, with a timeout.
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

The health gate: a module's `on_change.health` command, run after its change action (`healthy`),
as the action is (no shell, a session of its own, the same minimal environment, killed at its
timeout). A change succeeded only when the action and the health command both exited 0; only
then is the node's rollout slot freed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio

from provisioner_client.errors import ManifestError, MaterializeError, capped
from provisioner_client.materializing.envfile import EnvFolder, Materialized, render
from provisioner_client.resolving.manifest import HealthCheck, LoadedManifest, OnChange
from provisioner_client.resolving.resolve import Resolver
from provisioner_client.rollout import Admission, RolloutGate
from registry.contract import ActionRecord, AppliedValue, Outcome, Placeholder, substitute

log = logging.getLogger(__name__)

MAX_REASONS = 20

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


@dataclass(frozen=True)
class Applying:
    """What applying one reconcile's changes needs: the node, its env folder, the environment a
    change action inherits, the rollout gate, and the list of the modules whose action ran."""

    node: str
    folder: EnvFolder
    action_env: Mapping[str, str]
    gate: RolloutGate
    actions_run: list[str]


@dataclass(frozen=True)
class ModuleReport:
    module: str
    applied: AppliedValue
    written: bool = False

    @property
    def action(self) -> ActionRecord | None:
        return self.applied.action


async def apply(
    applying: Applying, resolver: Resolver, loaded: LoadedManifest, *, previous: AppliedValue | None
) -> ModuleReport:
    """The module's env file written and its change action run, once its rollout lets it change
    (`provisioner_client.rollout`); else pending with why, its file as it was."""
    folder, gate = applying.folder, applying.gate
    module, manifest = loaded.module, loaded.manifest
    content = await rendered(resolver, loaded)
    old_action = _last_action(folder, module, previous)
    if isinstance(content, list):
        return pending(folder, module, content, previous)
    last_good = gate.rollback_due(module, manifest)
    if last_good is not None:
        return await _roll_back(applying, loaded, last_good, previous=previous)
    try:
        digest, on_disk = folder.digest(content), folder.digest_on_disk(module)
    except MaterializeError as err:
        return pending(folder, module, [str(err)], previous)
    ran = gate.ran(module, digest)
    action_due = manifest.on_change is not None and ran is None and (old_action is None or old_action.digest != digest)
    admission = GO
    if on_disk != digest or action_due:
        admission = await gate.admit(module, manifest, digest, first=on_disk is None)
        if not admission.go:
            return pending(folder, module, list(admission.reasons), previous)
    replaced = folder.content_on_disk(module) if admission.claimed else None  # the last good one to keep
    try:
        done = folder.materialize(module, content)
    except MaterializeError as err:
        return pending(folder, module, [str(err)], previous)
    action, problem = ran or old_action, None
    run = partial(_run_change, applying, loaded, done) if action_due else None
    check = partial(_run_health, applying, loaded, done.path, done.digest)
    if admission.claimed:  # the claim freed or failed, whether an action is due or not
        ran_now, problem = await gate.run_under_claim(module, done.digest, replaced=replaced, action=run, health=check)
        action = ran_now or action
    elif run is not None:
        action = await run()
        problem = await check() if action.ok else None
    reasons = (*admission.reasons, *((f"rollout: {problem}",) if problem else ()))
    applied = AppliedValue(state="applied", digest=done.digest, file=str(done.path), action=action, reasons=reasons)
    return ModuleReport(module, applied, written=done.written)


GO = Admission(go=True)


def _last_action(folder: EnvFolder, module: str, previous: AppliedValue | None) -> ActionRecord | None:
    """The change action last run on the module's file: the node's own record of it, the judge of
    whether it is due; the bus's applied record only where the node has none (a client before it
    kept one). A bus rolled back to an earlier prefix holds an older record: taken as the truth it
    would run an action again, or skip one its content needs."""
    return folder.acted_on(module) or (previous.action if previous else None)


async def _run_change(applying: Applying, loaded: LoadedManifest, done: Materialized) -> ActionRecord:
    assert loaded.manifest.on_change is not None
    env = action_environment(applying.action_env, node=applying.node, module=loaded.module, env_file=done.path)
    applying.actions_run.append(loaded.module)
    action = await run_action(loaded.module, loaded.manifest.on_change, done.digest, env=env)
    applying.folder.ran(loaded.module, action)
    return action


async def _run_health(applying: Applying, loaded: LoadedManifest, path: Path, digest: str) -> str | None:
    on_change = loaded.manifest.on_change
    if on_change is None or on_change.health is None:
        return None
    env = action_environment(applying.action_env, node=applying.node, module=loaded.module, env_file=path)
    return await healthy(loaded.module, on_change.health, digest, env=env)


async def _roll_back(
    applying: Applying, loaded: LoadedManifest, last_good: bytes, *, previous: AppliedValue | None
) -> ModuleReport:
    """An aborted rollout: the last good env file put back, the change action run again for it."""
    folder, module = applying.folder, loaded.module
    try:
        done = folder.materialize(module, last_good)
    except MaterializeError as err:
        return pending(folder, module, [str(err)], previous)
    action = None
    if loaded.manifest.on_change is not None:
        action = await _run_change(applying, loaded, done)
    left = pending(folder, module, [applying.gate.rolled_back(module)], previous)
    if action is None:
        return left
    return replace(left, applied=left.applied.model_copy(update={"action": action}))  # ran for the old values


async def rendered(resolver: Resolver, loaded: LoadedManifest) -> bytes | list[str]:
    """The module's env file as its values render it, or why it cannot be (each pending
    placeholder and its reason); the values are dropped here. Reconcile and the drift watch's
    `put_back` both render through it."""
    module, manifest = loaded.module, loaded.manifest
    values: dict[Placeholder, str] = {}
    env: dict[str, str] = {}
    try:
        values, reasons = await resolver.values(module, manifest.placeholders())
        if reasons:
            return reasons
        env = {name: substitute(text, values.__getitem__) for name, text in manifest.env.items()}
        return render(module, env)
    finally:
        values.clear()
        env.clear()


def pending(folder: EnvFolder, module: str, reasons: list[str], previous: AppliedValue | None) -> ModuleReport:
    reasons = bounded_reasons(reasons)
    unchanged = previous is not None and previous.reasons == tuple(reasons)
    level = logging.DEBUG if unchanged else logging.WARNING
    log.log(level, "module %s is pending: %s", module, capped("; ".join(reasons), 2000))
    action = _last_action(folder, module, previous)
    on_disk = folder.digest_on_disk(module)
    file = str(folder.path_of(module)) if on_disk else None
    applied = AppliedValue(state="pending", digest=on_disk, file=file, reasons=tuple(reasons), action=action)
    return ModuleReport(module, applied)


def held(folder: EnvFolder, module: str, error: ManifestError, previous: AppliedValue | None) -> ModuleReport:
    return pending(folder, module, [str(error)], previous)


def bounded_reasons(reasons: Sequence[str], *, count: int = MAX_REASONS) -> list[str]:
    """At most `count` reasons, each capped, then how many more there were."""
    kept = [capped(reason) for reason in reasons[:count]]
    return kept + ([f"... and {len(reasons) - count} more"] if len(reasons) > count else [])


async def healthy(module: str, check: HealthCheck, digest: str, *, env: Mapping[str, str]) -> str | None:
    """None when the health command exits 0 in time; else why not, in a few words."""
    record = await run_action(module, check, digest, env=env, what="health check")
    if record.ok:
        return None
    how = f"exit code {record.exit_code}" if record.exit_code is not None else record.outcome
    return f"the health check {' '.join(check.command)[:200]} failed ({how})"
