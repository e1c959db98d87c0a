"""The errors of the shared library.

    RegistryError
    ├── TokenError          a token that is not the canonical escape of a name
    ├── KeyShapeError       a key that does not fit its bucket's shape
    ├── PlaceholderError    a `${kind:name}` that cannot be read
    ├── TemplateError       a key or name template of the catalogue that cannot be read
    ├── CatalogueError      a domains file that is wrong, naming file, domain and field
    └── SettingsError       a setting of either program (flag, environment variable or config
                            file) that is wrong, naming the setting but never its value

Each error carries what was wrong as attributes and builds its own message.
"""

from __future__ import annotations


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
