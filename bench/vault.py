"""The demo's development vault as a process of its own, as a real vault is: `python -m bench.vault URL`."""

from __future__ import annotations

import sys

import anyio

from mesh_dev.standins import CONSUMERS_SUBJECT, SECRET_SUBJECT, Vault
from registry.serving import EndpointSpec, serve
from registry.wire import BusOptions, connect


async def serve_vault(url: str) -> None:
    vault = Vault()
    endpoints = [
        EndpointSpec("secret", SECRET_SUBJECT, vault.answer_secret),
        EndpointSpec("consumers", CONSUMERS_SUBJECT, vault.answer_consumers),
    ]
    async with (
        connect(BusOptions(servers=(url,), name="bench-vault")) as bus,
        serve(bus, name="mesh-vault", version="0.1.0", description="development vault", endpoints=endpoints),
    ):
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(serve_vault, sys.argv[1])
