"""A multi-account nats-server with the seat serving the verb scoped by party, seeded with
keys of two nodes: the data and the seat in account `MESH`, nodes, an operator and a stranger in
accounts of their own, each importing the verb and the vault's secret verb with `share: true`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from pydantic import SecretStr

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import SECRET_SUBJECT
from provisioner.seat.server import run_server
from provisioner.seat.settings import ServerSettings
from registry.access import Kind, Party, PartyMap
from registry.contract import buckets
from registry.wire import Bus, BusOptions, ask, connect
from tests.helpers import put_many

N1, N2 = Party(kind=Kind.NODE, name="n1"), Party(kind=Kind.NODE, name="n2")
OPS = Party(kind=Kind.OPERATOR, name="ops")
STRANGER = "stranger"  # an account on the bus that no grant names
PARTIES = PartyMap.of([(N1, None), (N2, None), (OPS, None)])
NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'
NEEDS = {
    "n1.web.config.a": NEED,
    "n1.bad": b"{}",
    "n2.web.config.a": NEED,
    "n2.web.secret.b": NEED,
}
APPLIED = {"n1.web": b'{"state":"applied"}', "n2.web": b'{"state":"applied"}'}
COLLECT = {"n1.shell=3Azsh.web": b'{"items":["a"]}', "n2.shell=3Azsh.web": b'{"items":["b"]}'}
SHARED = [buckets.VERB_SUBJECT, SECRET_SUBJECT]


def accounts_config(accounts: Sequence[str]) -> str:
    """A static configuration: MESH exports the verbs, each other account imports them shared;
    each account's one user is named and has the password of its account."""
    exports = ", ".join(f'{{service: "{subject}"}}' for subject in SHARED)
    imports = ", ".join(f'{{service: {{account: MESH, subject: "{subject}"}}, share: true}}' for subject in SHARED)
    blocks = [
        f"MESH: {{ jetstream: enabled, users: [{{user: seat, password: seat}}], exports: [{exports}] }}",
        *(f'"{a}": {{ users: [{{user: "{a}", password: "{a}"}}], imports: [{imports}] }}' for a in accounts),
    ]
    return "accounts {\n  " + "\n  ".join(blocks) + "\n}\nno_auth_user: seat\n"


@asynccontextmanager
async def mesh(
    state: Path, extra: str = "", parties: PartyMap | None = PARTIES, **settings: Any
) -> AsyncIterator[LocalNats]:
    """The multi-account server, seeded, with the seat serving the verb scoped by `parties`."""
    config = accounts_config([N1.account, N2.account, OPS.account, STRANGER]) + extra
    async with local_nats(state, config) as server, anyio.create_task_group() as tasks:
        stop = anyio.Event()
        options = BusOptions(servers=(server.url,), name=buckets.SEAT)
        run = partial(run_server, bus_options=options, settings=ServerSettings(**settings), stop=stop, parties=parties)
        await tasks.start(run)
        async with connect(options) as seat:
            for bucket, values in ((buckets.NEEDS, NEEDS), (buckets.APPLIED, APPLIED), (buckets.COLLECT, COLLECT)):
                await put_many(seat, bucket, values)
        try:
            yield server
        finally:
            stop.set()


@asynccontextmanager
async def as_account(server: LocalNats, account: str) -> AsyncIterator[Bus]:
    options = BusOptions(servers=(server.url,), name=account, user=account, password=SecretStr(account))
    async with connect(options) as bus:
        yield bus


async def asked_by(server: LocalNats, account: str, request: dict[str, str]) -> dict[str, Any]:
    async with as_account(server, account) as bus:
        return await ask(bus, request)


def keys_of(answer: dict[str, Any]) -> list[str]:
    return [entry["key"] for entry in answer["entries"]] + [m["key"] for m in answer["malformed"]]


async def one_page(server: LocalNats, account: str, request: dict[str, str]) -> tuple[str | None, dict[str, Any]]:
    """One answer message as it is (no page followed): its error code, if any, and its body."""
    async with as_account(server, account) as bus:
        msg = await bus.request(buckets.VERB_SUBJECT, json.dumps(request).encode())
    return msg.headers.get("Nats-Service-Error-Code"), json.loads(msg.data)
