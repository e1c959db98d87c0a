"""A program's edge: what is read once at start and passed down. Settings models for flags,
variables and files, with one precedence, and for a command's arguments (every flag generated from
a model); and the `nats` CLI's contexts, where a URL and credentials come from when no flag names
them.
"""

from __future__ import annotations

from registry.edge.nats_context import DEV_CONTEXT, NatsContext, NatsContexts
from registry.edge.settings import (
    BusSettings,
    CommandLine,
    Duration,
    EdgeSettings,
    LogSettings,
    add_settings_arguments,
    env_of,
    flag_of,
    given_flags,
    load_settings,
    setting_of,
)

__all__ = [
    "DEV_CONTEXT",
    "BusSettings",
    "CommandLine",
    "Duration",
    "EdgeSettings",
    "LogSettings",
    "NatsContext",
    "NatsContexts",
    "add_settings_arguments",
    "env_of",
    "flag_of",
    "given_flags",
    "load_settings",
    "setting_of",
]
