"""The errors of the shared library.

    RegistryError
    ├── TokenError          a token that is not the canonical escape of a name
    ├── KeyShapeError       a key that does not fit its bucket's shape
    ├── PlaceholderError    a `${kind:name}` that cannot be read
    ├── TemplateError       a key or name template of the catalogue that cannot be read
    ├── CatalogueError      a domains file that is wrong, naming file, domain and field
    ├── SettingsError       a setting of either program (flag, environment variable or config
    │                       file) that is wrong, naming the setting but never its value
    └── BusError            a NATS operation that failed: `operation` and `reason`, the cause kept
        ├── NotFound            a bucket, stream or key that does not exist
        ├── NoResponders        nobody serves the subject asked
        │   ├── NoRoute             this account neither imports the subject nor serves it now
        │   └── NobodyBehindImport  it imports the subject, and nobody serves it in the exporting account
        ├── BusTimeout          no answer in time
        ├── PermissionDenied    the bus refused a subject (`subject`) to this connection
        ├── AuthorizationRefused    every server refused the credentials: which were used (never a
        │                           secret) and how others are given
        ├── ConnectionClosed    the connection is closed for good
        ├── JetStreamError      JetStream answered an error: `code` and `err_code`
        │   └── WrongLastSequence   a conditional write lost to another writer (10071)
        ├── ServiceError        a service (the verb, the vault) answered `code` and `description`
        └── ConvergeError       a converge failed part-way; `done` says what was already written

Each error carries what was wrong as attributes and builds its own message. `sole_exception`
finds the error a task group's exception group stands for, so that a caller raises it as itself.
"""

from __future__ import annotations

import sys


class RegistryError(Exception):
    """Base of every error the shared library raises."""


class TokenError(RegistryError):
    def __init__(self, token: str, reason: str) -> None:
        self.token = token
        self.reason = reason
        super().__init__(f"token {token!r} is not canonical: {reason}")


class KeyShapeError(RegistryError):
    def __init__(self, key: str, shape: str, reason: str) -> None:
        self.key = key
        self.shape = shape
        self.reason = reason
        super().__init__(f"key {key!r} is out of shape {shape}: {reason}")


class PlaceholderError(RegistryError):
    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason
        super().__init__(f"placeholder {text!r}: {reason}")


class TemplateError(RegistryError):
    def __init__(self, template: str, reason: str) -> None:
        self.template = template
        self.reason = reason
        super().__init__(f"template {template!r}: {reason}")


class CatalogueError(RegistryError):
    def __init__(self, source: str, reason: str, *, domain: str | None = None, field: str | None = None) -> None:
        self.source = source
        self.domain = domain
        self.field = field
        self.reason = reason
        where = source
        if domain is not None:
            where += f", domain {domain!r}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {reason}")


class SettingsError(RegistryError):
    """Settings either program cannot start with; both CLIs answer it with exit code 2."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


class BusError(RegistryError):
    """A NATS operation failed; says which and why. The nats-py error, if any, is the `__cause__`."""

    def __init__(self, operation: str, reason: str) -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(f"{operation}: {reason}")


class Unreachable(BusError):
    """No NATS server answered a one-shot command's connection in time."""


class NotFound(BusError):
    pass


class NoResponders(BusError):
    pass


class NoRoute(NoResponders):
    """Nothing leads `subject` anywhere from `account`: it has no import of it and nothing in it
    subscribes (nats-server's trace of the request stayed there). Either another account serves it
    and this one is not granted it, or this account serves it itself and that is down (`serves`
    says what should)."""

    def __init__(self, operation: str, subject: str, account: str, *, serves: str) -> None:
        self.subject = subject
        self.account = account
        reason = (
            f"nobody answers {subject}: account {account} neither imports it nor serves it (nats-server's trace "
            "of the request): the grants do not give it to this party (a node name its key does not cover, or "
            f"grants not yet loaded), or {serves}"
        )
        super().__init__(operation, reason)


class NobodyBehindImport(NoResponders):
    """`account` imports `subject` from `exporter`, where nothing serves it (nats-server's trace of
    the request crossed the import): `serves` says what should."""

    def __init__(self, operation: str, subject: str, account: str, exporter: str, *, serves: str) -> None:
        self.subject = subject
        self.account = account
        self.exporter = exporter
        reason = (
            f"nobody answers {subject}: account {account} imports it from account {exporter}, where nothing "
            f"serves it (nats-server's trace of the request): {serves}"
        )
        super().__init__(operation, reason)


class BusTimeout(BusError):
    pass


class PermissionDenied(BusError):
    def __init__(self, operation: str, subject: str, reason: str) -> None:
        self.subject = subject
        super().__init__(operation, reason)


class AuthorizationRefused(BusError):
    """Every server refused this connection's credentials: `credentials` names those used (never a
    secret), `hint` says how others are given."""

    def __init__(self, operation: str, servers: str, reason: str, *, credentials: str, hint: str = "") -> None:
        self.servers = servers
        self.credentials = credentials
        self.hint = hint
        refused = f"no NATS server at {servers} accepted {credentials}: {reason}"
        super().__init__(operation, f"{refused}; {hint}" if hint else refused)


class ConnectionClosed(BusError):
    pass


class JetStreamError(BusError):
    def __init__(self, operation: str, code: int, err_code: int, description: str) -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        super().__init__(operation, f"{description} (code {code}, error {err_code})")


class WrongLastSequence(JetStreamError):
    ERR_CODE = 10071


class ServiceError(BusError):
    """A service answered with the micro service error headers."""

    def __init__(self, operation: str, code: str, description: str) -> None:
        self.code = code
        self.description = description
        super().__init__(operation, f"answered {code}: {description}")


class ConvergeError(BusError):
    """A converge failed part-way; `done` says what had already been written or deleted."""

    def __init__(self, bucket: str, key: str, reason: str, done: str) -> None:
        self.bucket = bucket
        self.key = key
        self.done = done
        super().__init__(f"converge {bucket}", f"key {key!r}: {reason} (already done: {done})")


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The failure a task group's exception group stands for, looked for inside nested groups and
    past the cancellations of siblings (the leaves, depth first, in order).

    The one failure when the group holds one. When it holds several (tasks that failed at once,
    such as every write in flight when the connection closes), the first of them: a caller that
    raises it keeps its class, hence its exit code, and the others are the same story told again.
    When it holds nothing but cancellations, the group itself."""
    failures = [err for err in _leaves(group) if not _cancelled(err)]
    return failures[0] if failures else group


def _cancelled(err: BaseException) -> bool:
    """nats-py runs on asyncio alone, so anyio's cancellation is asyncio's, known outside a loop
    too; asyncio not loaded, nothing was cancelled by it (a command's `--help` never loads it)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(err, asyncio.CancelledError)


def _leaves(err: BaseException) -> list[BaseException]:
    if not isinstance(err, BaseExceptionGroup):
        return [err]
    return [leaf for inner in err.exceptions for leaf in _leaves(inner)]
