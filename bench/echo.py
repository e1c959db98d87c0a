"""The request/reply floor: a bare nats-py responder that echoes each request, run as its own process.

`python -m bench.echo URL SUBJECT [--nkey SEED | --creds CREDS]`: on a mesh, as a party (the
operator's account, say), whose own connections then reach it without any import."""

from __future__ import annotations

import argparse

import anyio
import nats
from nats.aio.msg import Msg


async def serve(url: str, subject: str, credentials: dict[str, str]) -> None:
    nc = await nats.connect(url, name="bench-echo", **credentials)

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(subject, queue="q", cb=echo)
    await nc.flush()
    print("ready", flush=True)
    await anyio.sleep_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("subject")
    parser.add_argument("--nkey", help="the party's nkey seed file")
    parser.add_argument("--creds", help="the party's .creds file")
    args = parser.parse_args()
    credentials = {"nkeys_seed": args.nkey} if args.nkey else {"user_credentials": args.creds} if args.creds else {}
    anyio.run(serve, args.url, args.subject, credentials)


if __name__ == "__main__":
    main()
