"""The `nats` CLI's contexts: where a tool looks for its NATS server when it is given none.

The `nats` CLI keeps each named context as a JSON file, `<config>/nats/context/<name>.json`, and
the selected one's name in `<config>/nats/context.txt`, where `<config>` is `$XDG_CONFIG_HOME`, or
`~/.config` without it. A context names a server (`url`) and how to log in (`creds`, `nkey`,
`user` and `password`, `token`, TLS files `cert`, `key`, `ca`, `inbox_prefix`); the CLI writes
more fields, and an empty string for a field not set. Of its other ways to connect (an `nsc`
lookup, an inline `user_jwt`, a SOCKS proxy, TLS first) none is honoured here: a context using
one is refused with its name rather than tried without it.

`mesh-provisioner-dev` writes a context of its own, `mesh-provisioner-dev`, while its nats-server
runs, with its process id beside the URL: the tools fall back on it when nothing else names a
server, and pass over it once that process is gone (a dev loop killed before it could remove it).

Files are read through the bounded JSON reader; a context may hold a password, so one is written
readable by its owner only, and nothing here logs or quotes a value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from registry.contract import JsonRefused, read_bounded, read_bounded_text, read_json
from registry.errors import SettingsError

DEV_CONTEXT = "mesh-provisioner-dev"
"""The context `mesh-provisioner-dev` writes while its nats-server runs."""

MAX_CONTEXT_BYTES = 64 * 1024


class NatsContext(BaseModel):
    """The fields of a context file this project reads; an empty string is a field not set."""

    # Built when a context is first read: a command given its server by a flag never builds it.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    description: str = ""
    url: str = ""
    creds: str = ""
    nkey: str = ""
    user: str = ""
    password: SecretStr = SecretStr("")
    token: SecretStr = SecretStr("")
    cert: str = ""
    key: str = ""
    ca: str = ""
    inbox_prefix: str = ""
    mesh_provisioner_dev_pid: int | None = None  # written by mesh-provisioner-dev alone
    # Set by the `nats` CLI and not honoured here: a context using one is refused, never half-used.
    nsc: str = ""
    user_jwt: str = ""
    socks_proxy: str = ""
    tls_first: bool = False

    def unhonoured(self) -> list[str]:
        """The fields set that this project cannot connect by; a credentials file makes nsc's moot."""
        logs_in_otherwise = bool(self.creds or self.nkey or self.user or self.token.get_secret_value())
        found = {
            "nsc": bool(self.nsc) and not logs_in_otherwise,
            "user_jwt": bool(self.user_jwt),
            "socks_proxy": bool(self.socks_proxy),
            "tls_first": self.tls_first,
        }
        return [name for name, is_set in found.items() if is_set]

    def as_file(self) -> bytes:
        """The JSON text of the file, secrets included: for `NatsContexts.write` alone."""
        fields = self.model_dump(exclude_defaults=True)
        for secret in ("password", "token"):
            if secret in fields:
                fields[secret] = fields[secret].get_secret_value()
        return (json.dumps(fields, indent=2, ensure_ascii=False) + "\n").encode()


@dataclass(frozen=True)
class NatsContexts:
    """The `nats` CLI's configuration folder (`<config>/nats`): its contexts and the selected one."""

    folder: Path

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> NatsContexts | None:
        """The folder `environ` points the `nats` CLI at; `None` with neither XDG_CONFIG_HOME nor HOME."""
        config = environ.get("XDG_CONFIG_HOME") or (
            str(Path(environ["HOME"]) / ".config") if environ.get("HOME") else ""
        )
        return cls(Path(config) / "nats") if config else None

    def path(self, name: str) -> Path:
        if not name or name.startswith(".") or "/" in name or os.sep in name or "\x00" in name:
            raise SettingsError(f"nats context {name!r}", "not a context name: no '/', no leading '.'")
        return self.folder / "context" / f"{name}.json"

    def selected(self) -> str | None:
        """The name the `nats` CLI's `context.txt` selects, if any."""
        try:
            name = read_bounded_text(self.folder / "context.txt", MAX_CONTEXT_BYTES).strip()
        except FileNotFoundError:
            return None
        except OSError as err:
            reason = f"cannot be read: {err.strerror or err}"
            raise SettingsError(f"nats CLI's {self.folder / 'context.txt'}", reason) from None
        return name or None

    def read(self, name: str) -> NatsContext:
        """Context `name`; `SettingsError` when it does not exist or cannot be used."""
        path = self.path(name)
        source = f"nats context {name!r} ({path})"
        try:
            context = NatsContext.model_validate(read_json(read_bounded(path, MAX_CONTEXT_BYTES)))
        except FileNotFoundError:
            raise SettingsError(source, "no such context") from None
        except OSError as err:
            raise SettingsError(source, f"cannot be read: {err.strerror}") from None
        except JsonRefused as err:
            raise SettingsError(source, f"not a context: {err.reason}") from None
        except ValidationError as err:
            raise SettingsError(source, f"not a context: {_complaints(err)}") from None
        if unhonoured := context.unhonoured():
            raise SettingsError(
                source,
                f"sets {', '.join(unhonoured)}, which mesh-provisioner cannot connect by; "
                "give it a creds or nkey file instead",
            )
        return context

    def dev(self) -> NatsContext | None:
        """`mesh-provisioner-dev`'s context while the dev loop that wrote it runs; `None` otherwise."""
        if not self.path(DEV_CONTEXT).exists():
            return None
        context = self.read(DEV_CONTEXT)
        pid = context.mesh_provisioner_dev_pid
        return context if pid is None or _running(pid) else None

    def write(self, name: str, context: NatsContext) -> Path:
        """Writes context `name` whole (a reader never sees half of it), readable by its owner only."""
        path = self.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        # The grants' writer, loaded by the dev loop alone: a program reading a context never needs it.
        from registry.access import write_secret  # noqa: PLC0415

        write_secret(partial, context.as_file())
        partial.replace(path)
        return path

    def remove_own(self, name: str, pid: int) -> None:
        """Removes context `name` if process `pid` wrote it: a later dev loop's is left alone."""
        path = self.path(name)
        try:
            if self.read(name).mesh_provisioner_dev_pid == pid:
                path.unlink(missing_ok=True)
        except SettingsError:  # gone, or no longer ours to judge
            return


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: running all the same
        return True
    return True


def _complaints(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '?'}: {e['msg']}"
        for e in err.errors(include_url=False, include_input=False)
    )
