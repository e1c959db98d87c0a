"""`status`: what `applied` says of each of this node's modules, and whether the file on disk agrees.

The file on disk is digested with the node's digest key (`envfile`), as the applied digest was;
status only reads: no lease, no write, and no key is made where there is none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from provisioner_client.envfile import EnvFolder
from provisioner_client.scope import NodeScope
from registry import buckets
from registry.bounded_json import JsonRefused, read_json
from registry.bus import Bus
from registry.errors import RegistryError
from registry.models import AppliedValue


@dataclass(frozen=True)
class ModuleStatus:
    module: str
    applied: AppliedValue
    on_disk: str | None

    @property
    def drifted(self) -> bool:
        return self.applied.digest is not None and self.on_disk != self.applied.digest

    def as_json(self) -> dict[str, object]:
        return {**self.applied.model_dump(mode="json"), "on_disk": self.on_disk, "drifted": self.drifted}


@dataclass(frozen=True)
class NodeStatus:
    node: str
    modules: dict[str, ModuleStatus]
    unreadable: dict[str, str]

    @property
    def ok(self) -> bool:
        """Every module applied and its file on disk as recorded: a drifted file is not ok
        (the next reconcile puts it back), so a script or an operator is told by the exit code."""
        modules = self.modules.values()
        return not self.unreadable and all(m.applied.state == "applied" and not m.drifted for m in modules)

    def as_json(self) -> str:
        document = {
            "node": self.node,
            "ok": self.ok,
            "modules": {name: status.as_json() for name, status in sorted(self.modules.items())},
            "unreadable": self.unreadable,
        }
        return json.dumps(document, indent=2, ensure_ascii=False)

    def as_text(self) -> str:
        if not self.modules and not self.unreadable:
            return f"node {self.node}: no modules recorded in {buckets.APPLIED.name}"
        lines = []
        for name, status in sorted(self.modules.items()):
            lines.extend(_module_lines(name, status))
        lines.extend(f"{key}: unreadable: {reason}" for key, reason in sorted(self.unreadable.items()))
        return "\n".join(lines)


def _module_lines(name: str, status: ModuleStatus) -> list[str]:
    applied = status.applied
    lines = [f"{name}: {applied.state}"]
    if applied.file:
        lines.append(f"  file:    {applied.file}")
    lines.append(f"  digest:  {applied.digest or '-'}")
    if status.drifted:
        lines.append(f"  on disk: {status.on_disk or 'missing'} (drifted; the next reconcile puts it back)")
    if applied.action:
        action = applied.action
        exit_code = f", exit code {action.exit_code}" if action.exit_code is not None else ""
        lines.append(f"  action:  {action.outcome}{exit_code} at {action.finished_at}")
    lines.extend(f"  reason:  {reason}" for reason in applied.reasons)
    return lines


async def read_status(bus: Bus, node: str, materialize: Path) -> NodeStatus:
    scope = NodeScope(node)
    folder = EnvFolder(materialize)
    modules: dict[str, ModuleStatus] = {}
    unreadable: dict[str, str] = {}
    for item in await scope.read(bus, buckets.APPLIED):
        if item.deleted:
            continue
        try:
            module = buckets.APPLIED.shape.parse(item.key)["module"]
            applied = AppliedValue.model_validate(read_json(item.value))
        except RegistryError as err:
            unreadable[item.key] = str(err)
            continue
        except JsonRefused as err:
            unreadable[item.key] = f"not an applied value: {err.reason}"
            continue
        except ValidationError as err:
            unreadable[item.key] = f"not an applied value: {err.errors()[0]['msg']}"
            continue
        modules[module] = ModuleStatus(module, applied, folder.digest_on_disk(module))
    return NodeStatus(node, modules, unreadable)
