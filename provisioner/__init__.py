"""The mesh-provisioner server: keeps the registry bucket compiled from the domain catalogue and
serves the read-only verb `mesh-provisioner.provisioning` over the four buckets of the contract.

Modules, one concept each: `settings` (what the server can be told), `buckets` (making sure
the buckets exist), `registry_sync` (catalogue → registry bucket), `registry_view` (the registry
as it stands, answering `what=registry`), `request` (what a request may ask), `listing` (entries
and malformed keys as JSON pages), `verb` (answering from memory or by listing, scoped to who
asks), `paging` (cursors), `service` (the micro service, concurrency, shutdown), `server` (the
task group that runs it all), `removal` (a node's keys removed, for the controller) and `cli`.
Reading settings, logging and signals are the shared edge in `registry`, and so is everything
that touches NATS (`registry.wire.bus`); running it all on one machine is `mesh_dev`, above this
package.
"""

from provisioner.commands.removal import remove_node
from provisioner.errors import (
    CursorGone,
    Forbidden,
    ProvisionerError,
    RequestError,
    Unavailable,
)
from provisioner.seat.server import run_server
from provisioner.settings import ServerSettings

__all__ = [
    "CursorGone",
    "Forbidden",
    "ProvisionerError",
    "RequestError",
    "ServerSettings",
    "Unavailable",
    "remove_node",
    "run_server",
]
