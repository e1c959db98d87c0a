"""The demo's development vault as a process of its own, as a real vault is: `python -m bench.vault URL`."""

from __future__ import annotations

import sys

import anyio
import nats
from nats import micro

from provisioner_client.standins import CONSUMERS_SUBJECT, SECRET_SUBJECT, Vault


async def serve(url: str) -> None:
    nc = await nats.connect(url, name="bench-vault")
    vault = Vault()
    service = await micro.add_service(nc, name="mesh-vault", version="0.1.0", description="development vault")
    await service.add_endpoint(name="secret", subject=SECRET_SUBJECT, handler=vault.answer_secret)
    await service.add_endpoint(name="consumers", subject=CONSUMERS_SUBJECT, handler=vault.answer_consumers)
    await nc.flush()
    await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(serve, sys.argv[1])
