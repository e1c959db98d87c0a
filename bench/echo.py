"""The request/reply floor: a bare nats-py responder that echoes each request, run as its own process."""

from __future__ import annotations

import sys

import anyio
import nats
from nats.aio.msg import Msg


async def serve(url: str, subject: str) -> None:
    nc = await nats.connect(url, name="bench-echo")

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(subject, queue="q", cb=echo)
    await nc.flush()
    print("ready", flush=True)
    await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(serve, sys.argv[1], sys.argv[2])
