"""The request/reply floor: a bare nats-py responder that echoes each request, run as its own process.

`python -m bench.echo URL SUBJECT [--nkey SEED | --creds CREDS] [--answer FILE [--reply-header NAME]]`:
on a mesh, as a party (the operator's account, say), whose own connections then reach it without
any import. With `--answer`, it answers every request with that file's bytes instead (and a header
`NAME` of an 8-digit id): the bus carrying what the verb answers, the floor of the verb's own work."""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio
import nats
from nats.aio.msg import Msg

ID_LIKE = "0" * 8  # as long as the verb's request ids


async def serve(
    url: str, subject: str, credentials: dict[str, str], answer: bytes | None = None, header: str | None = None
) -> None:
    nc = await nats.connect(url, name="bench-echo", **credentials)
    headers = {header: ID_LIKE} if header else None

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    async def answering(msg: Msg) -> None:
        assert answer is not None
        await nc.publish(msg.reply, answer, headers=headers)

    await nc.subscribe(subject, queue="q", cb=echo if answer is None else answering)
    await nc.flush()
    print("ready", flush=True)
    await anyio.sleep_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("subject")
    parser.add_argument("--nkey", help="the party's nkey seed file")
    parser.add_argument("--creds", help="the party's .creds file")
    parser.add_argument("--answer", type=Path, help="answer every request with this file's bytes")
    parser.add_argument("--reply-header", help="with --answer, a header every answer carries")
    args = parser.parse_args()
    credentials = {"nkeys_seed": args.nkey} if args.nkey else {"user_credentials": args.creds} if args.creds else {}
    answer = args.answer.read_bytes() if args.answer else None
    anyio.run(serve, args.url, args.subject, credentials, answer, args.reply_header)


if __name__ == "__main__":
    main()
