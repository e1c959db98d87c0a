"""The node client of mesh-provisioner: registers a node's needs, resolves placeholders through
the registry, materializes env files, records what was applied and contributes collections.

The command line is `provisioner_client.cli`.
"""

from provisioner_client.errors import ClientError, ForeignKeyError, ManifestError, MaterializeError
from provisioner_client.reconcile import ClientPlan, ModuleReport, Report, reconcile
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
