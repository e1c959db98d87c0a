"""Writes deploy/host/node.json and deploy/host/seat.json, the declarations mesh-host applies to
raise this project's pieces on a machine, from the files of deploy/ they carry (the units, the
settings files, the sysusers file): one source for each, never a copy drifting.

    python deploy/host/declarations.py            # writes node.json and seat.json here
    python deploy/host/declarations.py --check    # exit 1 naming each file that is not current
    python deploy/host/declarations.py node --node n1 --nats-url nats://nats1:4222 --out n1.json
    python deploy/host/declarations.py node --node n2 --nats-url nats://nats1:4222 --postgres --out n2.json

The last two write one node's declaration: its client.toml names that node and that server (the
shipped node.json carries deploy/settings/client.toml as it is: node n1, nats.example); with
--postgres, for the node that runs the postgres module, the postgres provisioner too (its unit,
a folder for the operator's drop-ins, and the service running after the client). A `seat`
takes --nats-url alike. Each directory's `unknown` policy is explained in deploy/host/README.md.
Needs nothing but Python 3.11.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parent
MODULE = "mesh-provisioner"  # the module every folder of ours belongs to (`owned` lists strays as its)
UNITS = Path("/etc/systemd/system")
CLIENT_UNIT = "mesh-provisioner-client.service"
SYSUSERS_UNIT = "mesh-provisioner-sysusers.service"
SEAT_UNIT = "mesh-provisioner.service"
POSTGRES_UNIT = "mesh-postgres-provisioner.service"


def _text(relative: str) -> str:
    return (DEPLOY / relative).read_text()


def directory(
    path: str, mode: str, unknown: str, *, owner: str | None = "root:root", knows: tuple[str, ...] = ()
) -> dict[str, object]:
    resource: dict[str, object] = {"type": "directory", "path": path, "mode": mode}
    if owner is not None:
        resource["owner"] = owner
    resource["unknown"] = unknown
    if unknown != "program":
        resource["module"] = MODULE
    if knows:
        resource["knows"] = [f"{path}/{name}" for name in knows]
    return resource


def file(path: str | Path, source: str, *, mode: str = "0644", content: str | None = None) -> dict[str, object]:
    text = _text(source) if content is None else content
    return {"type": "file", "path": str(path), "content": text, "mode": mode, "owner": "root:root"}


def service(unit: str) -> dict[str, object]:
    return {"type": "service", "unit": unit, "state": "running", "enabled": True}


def _set(toml: str, key: str, value: str | None, source: str) -> str:
    """`toml` with the first `key = "..."` line saying `value` (a TOML basic string)."""
    if value is None:
        return toml
    if any(c in value for c in '"\\\n') or not value.isprintable():
        raise SystemExit(f"declarations.py: {key} {value!r}: give it without quotes, backslashes or control characters")
    line = re.compile(rf'^{key} = "[^"\n]*"$', re.MULTILINE)
    if not line.search(toml):
        raise SystemExit(f'declarations.py: {source} has no line {key} = "..." to set')
    return line.sub(f'{key} = "{value}"', toml, count=1)


def node(name: str | None = None, nats_url: str | None = None, *, postgres: bool = False) -> dict[str, object]:
    settings = _set(_text("settings/client.toml"), "node", name, "settings/client.toml")
    settings = _set(settings, "url", nats_url, "settings/client.toml")
    dropins = UNITS / f"{CLIENT_UNIT}.d"
    resources = [
        file("/usr/lib/sysusers.d/mesh-provisioner.conf", "systemd/mesh-provisioner.sysusers.conf"),
        directory("/etc/mesh-provisioner", "0755", "module", knows=("nats-ca.pem",)),
        directory("/etc/mesh-provisioner/keys", "0700", "module", knows=("node.nk",)),
        directory("/etc/mesh-provisioner/modules", "0755", "module"),
        file("/etc/mesh-provisioner/client.toml", "settings/client.toml", content=settings),
        directory("/run/mesh-provisioner", "0755", "module"),
        directory("/run/mesh-provisioner/env", "0700", "program", owner=None),
        file(UNITS / SYSUSERS_UNIT, f"host/systemd/{SYSUSERS_UNIT}"),
        file(UNITS / CLIENT_UNIT, f"systemd/{CLIENT_UNIT}"),
        directory(str(dropins), "0755", "module"),
        file(dropins / "seed.conf", "host/systemd/mesh-provisioner-client-seed.conf"),
        service(SYSUSERS_UNIT),
        service(CLIENT_UNIT),
    ]
    if postgres:
        resources += postgres_provisioner()
    return {"declaration": 1, "resources": resources}


def postgres_provisioner() -> list[dict[str, object]]:
    """The postgres provisioner, after the client: it runs as the client's user (made before) and
    reads the postgres module's env file, the client's."""
    return [
        file(UNITS / POSTGRES_UNIT, f"systemd/{POSTGRES_UNIT}"),
        directory(str(UNITS / f"{POSTGRES_UNIT}.d"), "0755", "module"),
        service(POSTGRES_UNIT),
    ]


def seat(nats_url: str | None = None) -> dict[str, object]:
    settings = _set(_text("settings/server.toml"), "url", nats_url, "settings/server.toml")
    resources = [
        directory("/etc/mesh-provisioner", "0755", "module", knows=("grants.json", "domains.toml", "nats-ca.pem")),
        directory("/etc/mesh-provisioner/keys", "0700", "module", knows=("seat.nk",)),
        file("/etc/mesh-provisioner/server.toml", "settings/server.toml", content=settings),
        file(UNITS / SEAT_UNIT, f"systemd/{SEAT_UNIT}"),
        service(SEAT_UNIT),
    ]
    return {"declaration": 1, "resources": resources}


def render(declaration: dict[str, object]) -> str:
    return json.dumps(declaration, indent=2) + "\n"


SHIPPED: dict[str, Callable[[], dict[str, object]]] = {"node.json": node, "seat.json": seat}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python deploy/host/declarations.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("role", nargs="?", choices=["node", "seat"], help="write one machine's declaration to --out")
    parser.add_argument("--node", help="node: the name its client.toml gives (default: deploy's, n1)")
    parser.add_argument("--nats-url", help="the [nats] url its settings file gives (default: deploy's)")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="node: it runs the postgres module; add the postgres provisioner (its unit, running after the client)",
    )
    parser.add_argument("--out", type=Path, help="with a role: the file to write (default: standard output)")
    parser.add_argument("--check", action="store_true", help="say which shipped declaration is not current; exit 1")
    args = parser.parse_args(argv)
    if args.role == "seat" and args.node is not None:
        parser.error("--node is a node's: a seat serves every node")
    if args.role != "node" and args.postgres:
        parser.error("--postgres is a node's: give it with node, for the node that runs the postgres module")
    if args.role is not None:
        text = render(
            node(args.node, args.nats_url, postgres=args.postgres) if args.role == "node" else seat(args.nats_url)
        )
        if args.out is None:
            sys.stdout.write(text)
        else:
            args.out.write_text(text)
        return 0
    stale = [name for name, make in SHIPPED.items() if not _current(HERE / name, render(make()))]
    if args.check:
        for name in stale:
            print(f"deploy/host/{name} is not what deploy/ says: run {parser.prog}", file=sys.stderr)
        return 1 if stale else 0
    for name in stale:
        (HERE / name).write_text(render(SHIPPED[name]()))
        print(f"wrote deploy/host/{name}")
    return 0


def _current(path: Path, text: str) -> bool:
    return path.exists() and path.read_text() == text


if __name__ == "__main__":
    sys.exit(main())
