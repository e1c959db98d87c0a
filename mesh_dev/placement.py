"""The demo's placements, from a file the user edits: where a new module's `${port:...}`,
`${dir:...}`, `${access:...}`, `${seat:...}` and `${machine:...}` values come from.

In the mesh the controller places modules and mirrors each placement into
`mesh-controller_assignments` (key `<node>.<module>`, value `{"plan": {<kind>: {<name>: value}}}`);
the demo has no controller, so a manifest of one's own stays pending ("no value at
mesh-controller_assignments key 'node-1.web'") until something writes its plan. Here that is
`<demo state>/placement.json`: one object per module of the demo's node, its plan as the controller
would write it, e.g. `{"web": {"port": {"http": 8081}}}`. It is written with the examples'
placements when missing, read at start and again whenever it changes (polled each second), and
the bucket's keys of the node are made to hold exactly what it says: a module removed from the file
loses its placement. A file that cannot be read as such is refused with a warning saying why, and
the placements stay as they were.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import anyio

from mesh_dev.standins import ASSIGNMENT, ASSIGNMENTS, dev_plans
from registry.contract import JsonRefused, read_json
from registry.errors import BusError, KeyShapeError, RegistryError
from registry.runtime import terminal_safe
from registry.wire import Bus, Changes, converge, snapshot

log = logging.getLogger(__name__)

PLACEMENT_FILE = "placement.json"  # under the demo's state folder
_MAX_BYTES = 256 * 1024
_POLL_SECONDS = 1.0

Plans = dict[str, dict[str, dict[str, object]]]


class PlacementRefused(RegistryError):
    def __init__(self, path: Path, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{terminal_safe(str(path))} not used: {reason}")


def seed_placement(path: Path, node: str) -> None:
    """The examples' placements written to `path` when it does not exist; an edited file is kept."""
    if not path.exists():
        path.write_text(json.dumps(dev_plans(node), indent=2) + "\n")


def read_placement(path: Path) -> Plans:
    """`path`'s plans, module by module; `PlacementRefused` saying why when it holds no such thing."""
    try:
        data = read_json(path.read_bytes(), max_bytes=_MAX_BYTES, max_depth=8)
    except OSError as err:
        raise PlacementRefused(path, f"cannot be read ({err.strerror})") from None
    except JsonRefused as err:
        raise PlacementRefused(path, f"not JSON: {err}") from None
    if not isinstance(data, dict):
        raise PlacementRefused(path, 'expected an object of modules, e.g. {"web": {"port": {"http": 8081}}}')
    for module, plan in data.items():
        if not isinstance(plan, dict) or not all(isinstance(names, dict) for names in plan.values()):
            raise PlacementRefused(
                path, f"module {terminal_safe(module)!r}: expected an object of kinds, each an object of names"
            )
    return data


def desired(node: str, plans: Mapping[str, Mapping[str, object]], path: Path) -> dict[str, bytes]:
    """The bucket's keys of `node` and what each holds."""
    try:
        return {ASSIGNMENT.build(node=node, module=m): json.dumps({"plan": p}).encode() for m, p in plans.items()}
    except KeyShapeError as err:
        raise PlacementRefused(path, str(err)) from None


async def place(bus: Bus, node: str, path: Path) -> Changes:
    """The node's keys in the placement bucket made to hold what `path` says."""
    wanted = desired(node, read_placement(path), path)
    current = await snapshot(bus, ASSIGNMENTS, ASSIGNMENT.filters(node=node), include_deleted=True)
    return await converge(bus, ASSIGNMENTS, current, wanted)


async def follow_placement(bus: Bus, node: str, path: Path) -> None:
    """`place` again each time `path` changes, until cancelled; a refused file or an outage is
    logged and the placements stay as they were until the next change. The first poll places
    again (nothing to write when the file is as it was at start): a change may come before it."""
    seen: tuple[int, int, int] | None = (-1, -1, -1)
    while True:
        await anyio.sleep(_POLL_SECONDS)
        now = _stamp(path)
        if now == seen:
            continue
        seen = now
        try:
            changes = await place(bus, node, path)
        except PlacementRefused as err:
            log.warning("%s; the placements stay as they were", err)
            continue
        except BusError as err:
            log.warning("placements from %s not written: %s", path, err)
            seen = None  # asked again at the next poll
            continue
        if changes:
            log.info("placements from %s: %s", path, changes.summary())


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size
