"""The node client of mesh-provisioner: registers a node's needs, resolves placeholders through
the registry, materializes env files, records what was applied and contributes collections.

The command line is `provisioner_client.cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from registry.lazy import lazy_names

if TYPE_CHECKING:
    from provisioner_client.errors import ClientError, ForeignKeyError, ManifestError, MaterializeError
    from provisioner_client.materializing.action import ModuleReport
    from provisioner_client.reconcile import ClientPlan, Report, reconcile
    from provisioner_client.settings import ClientSettings
    from provisioner_client.status import NodeStatus, read_status
    from provisioner_client.watch.watching import WatchTiming, watch

__all__ = [
    "ClientError",
    "ClientPlan",
    "ClientSettings",
    "ForeignKeyError",
    "ManifestError",
    "MaterializeError",
    "ModuleReport",
    "NodeStatus",
    "Report",
    "WatchTiming",
    "read_status",
    "reconcile",
    "watch",
]

# Where each name lives, imported on first use: `--help`, `--version` and `status` load only
# what they use.
_HOMES = {
    "ClientError": "provisioner_client.errors",
    "ForeignKeyError": "provisioner_client.errors",
    "ManifestError": "provisioner_client.errors",
    "MaterializeError": "provisioner_client.errors",
    "ClientPlan": "provisioner_client.reconcile",
    "ModuleReport": "provisioner_client.materializing.action",
    "Report": "provisioner_client.reconcile",
    "reconcile": "provisioner_client.reconcile",
    "ClientSettings": "provisioner_client.settings",
    "NodeStatus": "provisioner_client.status",
    "read_status": "provisioner_client.status",
    "WatchTiming": "provisioner_client.watch.watching",
    "watch": "provisioner_client.watch.watching",
}

__getattr__ = lazy_names(__name__, _HOMES)
