"""`python -m bench.register URL FIRST_NODE NODES CONNECTIONS`: nodes registering their needs at once, as
their own process: each node's 100 keys published (pipelined, no wait for acknowledgements) over one of
CONNECTIONS connections, the nodes dealt out among them."""

from __future__ import annotations

import sys

import anyio
import nats

from bench.cases import need_items
from registry import buckets

NODE_KEYS = 100


async def register_nodes(url: str, nodes: range) -> None:
    nc = await nats.connect(url, name="bench-register")
    try:
        for node in nodes:
            for key, value in need_items(node, NODE_KEYS, NODE_KEYS):
                await nc.publish(buckets.NEEDS.subject(key), value)
            await nc.flush()
    finally:
        await nc.close()


async def register(url: str, first_node: int, nodes: int, connections: int) -> None:
    async with anyio.create_task_group() as tg:
        for lane in range(connections):
            tg.start_soon(register_nodes, url, range(first_node + lane, first_node + nodes, connections))


if __name__ == "__main__":
    url, first, count, connections = sys.argv[1:]
    anyio.run(register, url, int(first), int(count), int(connections))
