"""What the node remembers of its rollouts, in the materialize folder, across restarts of the
client and of nats-server: `.mesh-provisioner-client.rollout.json` (mode 0600, written as the
env files are) holds, per module, the change it is on and its claim's place in the queue, and
whether that change's action started and how it ended. A change's action runs at most once:
the record says "started" (on disk) before the action starts, so a client killed while it ran,
or a reconcile whose later writes failed (nats-server restarted), never runs it again.

The env file a change replaced is kept beside it (`.mesh-provisioner-client.last-good.<module>`,
mode 0600: it holds what the env file held, secrets included), so that an aborted rollout can
put it back where the module allows (`"rollout": {"rollback": true}`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provisioner_client.errors import MaterializeError
from provisioner_client.materializing import files
from registry.contract import ActionRecord, to_json

log = logging.getLogger(__name__)

RECORD = ".mesh-provisioner-client.rollout.json"
LAST_GOOD = ".mesh-provisioner-client.last-good."
_MAX_BYTES = 4 * 1024 * 1024
_LAST_GOOD_BYTES = 64 * 1024 * 1024
WHAT = "rollout record"

Stage = Literal["waiting", "running", "done", "failed", "resumed", "withdrawn"]


class ModuleRollout(BaseModel):
    """One module's rollout as this node knows it.

    `stage`: `waiting` (its claim queued), `running` (admitted: file, action, health), `done`
    (succeeded; `claimed` until its claim is deleted), `failed` (its claim kept, failed),
    `resumed` (failed, then resumed: its claim deleted), `withdrawn` (the change went away
    before it ran). `claimed`: a claim of the node's stands in the fleet bucket (to renew or delete)."""

    model_config = ConfigDict(extra="ignore")

    change: str = ""
    digest: str = ""
    queued: int = 0
    stage: Stage = "waiting"
    claimed: bool = False
    renewed_at: datetime | None = None
    started: bool = False
    action: ActionRecord | None = None
    reason: str = ""
    saw_hold: bool = False
    under_claim: bool = False  # the change was applied under a claim: an abort may roll it back
    rolled_back: bool = False
    unreachable_since: datetime | None = None
    pacing_change: str = ""  # splay and wait: the change they are timing
    pacing_applied: bool = False  # that change was let through: its burst is over
    burst_since: datetime | None = None
    changed_at: datetime | None = None
    splay_until: datetime | None = None


class RolloutRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    modules: dict[str, ModuleRollout] = Field(default_factory=dict)


class RolloutState:
    """The rollout record of the materialize folder: read once, written on every change of it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._record: RolloutRecord | None = None

    @property
    def modules(self) -> dict[str, ModuleRollout]:
        if self._record is None:
            self._record = self._read()
        return self._record.modules

    def get(self, module: str) -> ModuleRollout | None:
        return self.modules.get(module)

    def put(self, module: str, value: ModuleRollout) -> None:
        """Keeps `value` as the module's, on disk before this returns."""
        self.modules[module] = value
        self._write()

    def forget(self, module: str) -> None:
        if self.modules.pop(module, None) is not None:
            self._write()
        files.remove(self._last_good_path(module), what="last good env file")

    def keep_last_good(self, module: str, content: bytes) -> None:
        files.write_atomically(self._last_good_path(module), content, what="last good env file")

    def last_good(self, module: str) -> bytes | None:
        found = files.read_regular(self._last_good_path(module), limit=_LAST_GOOD_BYTES, what="last good env file")
        return found.content if found is not None else None

    def _last_good_path(self, module: str) -> Path:
        return self.folder / f"{LAST_GOOD}{module}"

    def _read(self) -> RolloutRecord:
        try:
            found = files.read_record(
                self.folder / RECORD, _parsed, limit=_MAX_BYTES, what=WHAT, shape="rollouts by module"
            )
        except MaterializeError as err:  # unreadable: started afresh, said (a change may then run twice)
            log.warning("%s; the rollouts are remembered afresh", err)
            return RolloutRecord()
        return found or RolloutRecord()

    def _write(self) -> None:
        assert self._record is not None
        files.write_atomically(self.folder / RECORD, to_json(self._record), what=WHAT)


def _parsed(document: object) -> RolloutRecord | None:
    try:
        return RolloutRecord.model_validate(document)
    except ValidationError:
        return None


def is_own(name: str) -> bool:
    """A file this module keeps in the env folder (its temporary files are a killed client's leftovers)."""
    return name == RECORD or name.startswith(LAST_GOOD)
