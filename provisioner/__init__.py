"""The mesh-provisioner server: keeps the registry bucket compiled from the domain catalogue and
serves the read-only verb `mesh-provisioner.provisioning` over the four buckets of the contract.

Modules, one concept each: `settings` (what the server can be told), `buckets` (making sure
the buckets exist), `registry_sync` (catalogue → registry bucket), `registry_view` (the registry
as it stands, answering `what=registry`), `verb` (request validation and listing), `paging`
(answers split by bytes, cursors), `service` (the micro service, concurrency, shutdown), `server`
(the task group that runs it all) and `cli`. Reading settings, logging and signals are the shared
edge in `registry`; running it all on one machine is `mesh_dev`, above this package.
"""

from provisioner.errors import (
    CursorGone,
    ProvisionerError,
    RequestError,
    Unavailable,
    VerbError,
)
from provisioner.server import run_server
from provisioner.settings import ServerSettings

__all__ = [
    "CursorGone",
    "ProvisionerError",
    "RequestError",
    "ServerSettings",
    "Unavailable",
    "VerbError",
    "run_server",
]
