"""The mesh-provisioner server: keeps the registry bucket compiled from the domain catalogue and
serves the read-only verb `mesh-provisioner.provisioning` over the four buckets of the contract.

Modules, one concept each: `settings` (flags, environment, config file), `buckets` (making sure
the buckets exist), `registry_sync` (catalogue → registry bucket), `registry_view` (the registry
as it stands, answering `what=registry`), `verb` (request validation and listing), `paging`
(answers split by bytes, cursors), `service` (the micro service, concurrency, shutdown), `server`
(the task group that runs it all), `dev` (a local nats-server plus the server), `query` (asking
the verb and following pages) and `cli`.
"""

from provisioner.dev import Participant, run_dev
from provisioner.errors import (
    CursorGone,
    ProvisionerError,
    RequestError,
    SettingsError,
    Unavailable,
    VerbError,
)
from provisioner.query import ask, ask_page
from provisioner.server import run_server, until_signalled
from provisioner.settings import ServerSettings, load_server_settings

__all__ = [
    "CursorGone",
    "Participant",
    "ProvisionerError",
    "RequestError",
    "ServerSettings",
    "SettingsError",
    "Unavailable",
    "VerbError",
    "ask",
    "ask_page",
    "load_server_settings",
    "run_dev",
    "run_server",
    "until_signalled",
]
