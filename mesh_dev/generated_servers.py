"""A nats-server on what `mesh-provisioner grants --mesh` wrote for it (`OUT/sites/`): the hub or a
site, static or JWT, for the tests and the benchmark across sites.

`generated_config` copies the server's generated files into a folder of its own and returns the
configuration that includes them: its name, its JetStream store and domain, its monitoring port if
asked, and (JWT) its server-auth.conf, the site's own or the hub's, with a resolver folder of its
own. Run it with `mesh_dev.local_nats.local_nats`, or anything that starts nats-server on a text.
"""

from __future__ import annotations

from pathlib import Path

from registry.access import DEFAULT_RESOLVER_DIR, SERVER_AUTH, load_jwt_auth, render_server_auth

SITES_DIR = "sites"


def generated_config(out: Path, folder: Path, name: str, *, jwt: bool = False, monitor: int | None = None) -> str:
    """Server `name`'s generated files copied into `folder` (made), and the configuration including them."""
    folder.mkdir(parents=True)
    sites = out / SITES_DIR
    own = f"{name}.jwt.conf" if jwt else f"{name}.conf"
    for generated in (f"{name}.jetstream.conf", own):
        (folder / generated).write_bytes((sites / generated).read_bytes())
    http = f'http: "127.0.0.1:{monitor}"\n' if monitor else ""
    auth = f"include ./{SERVER_AUTH}\n" if jwt else ""
    if jwt:
        (folder / SERVER_AUTH).write_text(_server_auth(out, folder, name))
    return (
        f'server_name: "{name}"\n{http}{auth}'
        f'jetstream {{ store_dir: "{folder / "js"}", include ./{name}.jetstream.conf }}\n'
        f"include ./{own}\n"
    )


def _server_auth(out: Path, folder: Path, name: str) -> str:
    """A site's own server-auth.conf, or the hub's (jwt/server-auth.conf's accounts), resolving in `folder`."""
    site_own = out / SITES_DIR / f"{name}.server-auth.conf"
    text = site_own.read_text() if site_own.exists() else render_server_auth(load_jwt_auth(out), DEFAULT_RESOLVER_DIR)
    return text.replace(f'dir: "{DEFAULT_RESOLVER_DIR}"', f'dir: "{folder / "resolver"}"')
