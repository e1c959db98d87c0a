"""The node client of mesh-provisioner: registers a node's needs, resolves placeholders through
the registry, materializes env files, records what was applied and contributes collections.

The command line is `provisioner_client.cli`; the demo's entry is `run_demo`.
"""

from provisioner_client.demo import run_demo
from provisioner_client.errors import ClientError, ForeignKeyError, ManifestError, MaterializeError, SettingsError
from provisioner_client.reconcile import ClientPlan, ModuleReport, Report, reconcile
from provisioner_client.settings import ClientSettings, load_settings
from provisioner_client.status import NodeStatus, read_status
from provisioner_client.watching import WatchTiming, watch

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
    "SettingsError",
    "WatchTiming",
    "load_settings",
    "read_status",
    "reconcile",
    "run_demo",
    "watch",
]
