"""The mesh-provisioner server: keeps the registry bucket compiled from the domain catalogue and
serves the read-only verb `mesh-provisioner.provisioning` over the buckets of the contract.

Its concerns, one sub-package each: `seat` (the server's composition: the buckets it makes and
keeps, the hourly compile of the registry, the quota guard, gone marks, rollout holds and a site's
copies), `verb` (a request validated and scoped to who asks, answered from memory or by a listing
paged or streamed from a bucket), `metrics` (the seat's figures for Prometheus) and `commands` (the
operators' `mesh-provisioner`: `serve`, `query`, `top`, `grants`, `remove-node`, `rollout`); and
`settings`, what its commands can be told. Reading settings, logging and signals are the shared edge
in `registry`, and so is everything that touches NATS (`registry.wire.bus`); running it all on one
machine is `mesh_dev`, above this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from registry.lazy import lazy_names

if TYPE_CHECKING:
    from provisioner.commands.removal import remove_node
    from provisioner.errors import (
        CursorGone,
        Forbidden,
        ProvisionerError,
        RequestError,
        Unavailable,
    )
    from provisioner.seat.server import run_server
    from provisioner.seat.settings import ServerSettings

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

# Where each name lives, imported on first use: a command that needs none of them (`--help`,
# `--version`, `query`) never loads the seat.
_HOMES = {
    "CursorGone": "provisioner.errors",
    "Forbidden": "provisioner.errors",
    "ProvisionerError": "provisioner.errors",
    "RequestError": "provisioner.errors",
    "Unavailable": "provisioner.errors",
    "ServerSettings": "provisioner.seat.settings",
    "remove_node": "provisioner.commands.removal",
    "run_server": "provisioner.seat.server",
}

__getattr__ = lazy_names(__name__, _HOMES)
