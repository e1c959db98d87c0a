"""The errors of the postgres provisioner; none ever holds a password.

ProvisionerError
├── DeliveryError        the delivered env file or its consumers value cannot be used: nothing is changed
└── PostgresUnavailable  PostgreSQL cannot be reached or refused the provisioner's connection
"""

from __future__ import annotations


class ProvisionerError(Exception):
    """Base of every error the provisioner raises."""


class DeliveryError(ProvisionerError):
    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


class PostgresUnavailable(ProvisionerError):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"PostgreSQL is not available: {reason}")
