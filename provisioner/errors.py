"""The errors of the server package.

    ProvisionerError
    └── RequestError        a verb request answered with a service error; carries its code
        ├── Forbidden       a request its party may not make (403)
        ├── CursorGone      a paging cursor that is unknown or expired (410)
        └── Unavailable     the buckets could not be read just now (503)

Errors of the shared library (`registry.errors.RegistryError`: `BusError`, and `SettingsError` for
settings of either program) pass through unchanged; the CLI catches both bases at its edge.
"""

from __future__ import annotations


class ProvisionerError(Exception):
    """Base of every error the server package raises."""


class RequestError(ProvisionerError):
    """A request answered with a service error: `code` and `reason` go to the error headers."""

    code = "400"
    asker = ""  # who asked, as logs name it (a party's label), once the verb knows
    what = ""  # what was asked, once the request was read that far

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Forbidden(RequestError):
    """A request its party may not make (403): the scope comes from the bus, never from the body."""

    code = "403"


class CursorGone(RequestError):
    code = "410"

    def __init__(self) -> None:
        super().__init__("cursor unknown or expired; restart the listing without 'cursor'")


class Unavailable(RequestError):
    code = "503"
