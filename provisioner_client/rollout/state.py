"""What the node remembers of its rollouts, in the materialize folder, across restarts of the
client and of nats-server: the node's record `state.records.ROLLOUT` holds, per module, the
change it is on and its claim's place in the queue, and whether that change's action started and
how it ended. A change's action runs at most once: the record says "started" (on disk) before the
action starts, so a client killed while it ran, or a reconcile whose later writes failed
(nats-server restarted), never runs it again.

The env file a change replaced is kept beside it (`state.records.keep_last_good`, mode 0600: it
holds what the env file held, secrets included), so that an aborted rollout can put it back where
the module allows (`"rollout": {"rollback": true}`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from provisioner_client.errors import MaterializeError
from provisioner_client.state import records
from provisioner_client.state.records import ModuleRollout, RolloutRecord

log = logging.getLogger(__name__)

RECORD = records.ROLLOUT.name


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
        records.forget_last_good(self.folder, module)

    def keep_last_good(self, module: str, content: bytes) -> None:
        records.keep_last_good(self.folder, module, content)

    def last_good(self, module: str) -> bytes | None:
        return records.last_good(self.folder, module)

    def _read(self) -> RolloutRecord:
        try:
            found = records.ROLLOUT.read(self.folder)
        except MaterializeError as err:  # unreadable: started afresh, said (a change may then run twice)
            log.warning("%s; the rollouts are remembered afresh", err)
            return RolloutRecord()
        return found or RolloutRecord()

    def _write(self) -> None:
        assert self._record is not None
        records.ROLLOUT.write(self.folder, self._record)
