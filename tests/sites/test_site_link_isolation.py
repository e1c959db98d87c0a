"""A site's data link credential in an attacker's hands: whoever holds
`leaf-<site>-data.nk` (or `.creds`) runs a leaf server of their own that dials the hub with it,
in place of the site's server, and sends from a client there every subject it likes: nats-server
lets into the hub's data account only what the link's user may publish, and sends back only what
it may subscribe to. The client asks for its answers on `_R_.` (the link's answers), so any answer
the hub would give comes back to it.

Every attack is judged by the hub's data, as the suite judges a node's (`tests/attacks.py`): every
bucket at the hub, keys, revisions and contents, is unchanged after it but for the site's node's
own keys (n1's, which the link carries), and what comes back is a refusal at most. The hub and its
seat run on exactly what `mesh-provisioner grants --mesh` writes (static and JWT), the real site
down: the rogue server is the site.

Refused, judged by the data: a put into the registry or another node's keys, a purge or delete of
a stream, a consumer of any kind (with a deliver subject into the registry, durable, on another
node's keys), a reset of another site's consumer, a delete of the site's own, the vault's verbs,
each plain and through the hub's domain. What the link's account at the hub being the site's own
(`site-<site>`, registry.access.sites.accounts) shows besides: the verb is never answered through
the link, whoever the rogue's importing account is named after (the operator, another node); the
link's `_R_.>` carries no answer of the hub's to a node at the hub (n2's bound value from its
provider); and on the vault link's credential, a rogue naming its importing account after n2's
reaches the vault as the site's account, never n2's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from mesh_dev.local_nats import LocalNats, local_nats
from mesh_dev.standins import Vault
from registry.access import Grants, Kind, creds_path
from registry.contract import Bucket, buckets
from registry.serving import EndpointSpec, serve
from registry.wire import Bus, get_direct, put
from tests.attacks import (
    API_ATTACKS,
    READ_ATTACKS,
    RequestAttack,
    barrier_through,
    data_buckets,
    everything,
    named,
    nothing_comes_back,
    outside_own_keys,
)
from tests.helpers import eventually, in_own_task, stream_barrier, wait_for
from tests.isolation import party
from tests.sites.seat_at_site import requests_answered
from tests.sites.site_mesh import SITE, SiteMesh, site_mesh

HUB_API = "$JS.hub.API."
LINK = f"leaf-{SITE}-data"
VAULT_LINK = f"leaf-{SITE}-vault"
SITE_NODE = "n1"  # the site's node: the link carries its writes
NEEDS, APPLIED, REGISTRY = buckets.NEEDS, buckets.APPLIED, buckets.REGISTRY
BOUND = Bucket("postgres_bound", NEEDS.shape)
A_NEED = b'{"placeholder":"${config:x}","used_in":["X"]}'
N2_BOUND = b'{"password":"n2s"}'
SECRET_VERB = "mesh-vault.secret"
ASKED = 20  # direct gets by n2 while the rogue listens


def at_the_hubs_domain(attack: RequestAttack) -> RequestAttack:
    """`attack` sent to the hub's JetStream through its domain (`$JS.hub.API.`), as a leaf reaches it."""
    return RequestAttack(
        f"{attack.name}, at the hub's domain", attack.subject.replace("$JS.API.", HUB_API), attack.body
    )


def write(name: str, subject: str) -> RequestAttack:
    return RequestAttack(name, subject, {"evil": True})


LINK_ATTACKS = [
    *READ_ATTACKS,
    *API_ATTACKS,
    *[at_the_hubs_domain(attack) for attack in (*READ_ATTACKS, *API_ATTACKS)],
    write("a put into the registry", REGISTRY.subject("secret")),
    write("a put into the registry, at the hub's domain", f"{HUB_API}{REGISTRY.subject('secret')}"),
    write("a put into another node's need", NEEDS.subject("n2.web.config.x")),
    write("a put into another node's need, at the hub's domain", f"{HUB_API}{NEEDS.subject('n2.web.config.x')}"),
    write("a put into another node's applied record, at the hub's domain", f"{HUB_API}{APPLIED.subject('n2.web')}"),
    RequestAttack("a purge of the registry", f"{HUB_API}{REGISTRY.purge_api}", {}),
    RequestAttack("a delete of the registry", f"{HUB_API}STREAM.DELETE.{REGISTRY.stream}", {}),
    RequestAttack(
        "a consumer of the needs delivering into the registry, by the name-less create",
        f"{HUB_API}CONSUMER.CREATE.{NEEDS.stream}",
        {
            "stream_name": NEEDS.stream,
            "config": {
                "deliver_subject": REGISTRY.subject("secret"),
                "filter_subject": NEEDS.subject("n1.>"),
                "ack_policy": "none",
                "deliver_policy": "last_per_subject",
            },
        },
    ),
    RequestAttack(
        "a durable consumer of another node's applied records, delivered to the site's mirror",
        f"{HUB_API}CONSUMER.CREATE.{APPLIED.stream}",
        {
            "stream_name": APPLIED.stream,
            "config": {
                "durable_name": "evil",
                "deliver_subject": f"$JS.M.{SITE}.{APPLIED.stream}",
                "filter_subject": APPLIED.subject("n2.>"),
                "ack_policy": "none",
            },
        },
    ),
    RequestAttack(
        "a consumer of another node's provider keys",
        f"{HUB_API}{BOUND.consumer_create_api('evil', 'n2.>')}",
        {"stream_name": BOUND.stream, "config": {"name": "evil", "deliver_subject": f"$JS.S.{SITE}.x"}},
    ),
    RequestAttack(
        "a reset of another site's node's consumer", f"{HUB_API}CONSUMER.RESET.{BOUND.stream}.site-site2-n2", {}
    ),
    RequestAttack("a delete of the site's own consumer", f"{HUB_API}CONSUMER.DELETE.{NEEDS.stream}.site-{SITE}", {}),
    RequestAttack("the vault's secret verb, on the data link", "mesh-vault.secret", {"kind": "secret"}),
]
# What the verb answers a request with no `Nats-Request-Info`: the seat's own account, the mesh.
VERB_ATTACKS = [
    RequestAttack("the verb about the whole mesh", buckets.VERB_SUBJECT, {"what": "needs"}),
    RequestAttack("the verb about another node", buckets.VERB_SUBJECT, {"what": "needs", "node": "n2"}),
]


# What the rogue server forwards to the hub for its client: every subject a site's client could
# send, as a service import (so the rogue server itself gives each request a `_R_.` reply, as the
# site's server does for its nodes: a client may not publish with one).
FORWARDED = ("$JS.hub.API.>", "$JS.API.>", "$KV.>", "mesh-provisioner.>", "mesh-vault.>")


@dataclass(frozen=True)
class Rogue:
    """A leaf server of the attacker's, linked to the hub with the site's data link credential:
    its `LINKED` account is the link's, its client asks through it."""

    server: LocalNats

    async def client(self) -> Client:
        """A client of the rogue server asking the hub through the link (its own account's imports)."""
        return await nats.connect(self.server.url, user="client", password="rogue")

    async def listener(self) -> Client:
        """A user of the linked account itself: what it subscribes to, the hub may send it."""
        return await nats.connect(self.server.url, user="linked", password="rogue")


def rogue_config(mesh: SiteMesh, client_account: str = "CLIENT", link: str = LINK) -> str:
    if mesh.jwt:
        credential = f'credentials: "{creds_path(mesh.keys, link)}"'
    else:
        credential = f'nkey: "{(mesh.keys / f"{link}.nk").read_text().strip()}"'
    remote = f'{{urls: ["nats-leaf://127.0.0.1:{mesh.leaf_port}"], account: "LINKED", {credential}}}'
    exports = ", ".join(f'{{service: "{subject}"}}' for subject in FORWARDED)
    imports = ", ".join(f'{{service: {{account: "LINKED", subject: "{subject}"}}}}' for subject in FORWARDED)
    return (
        'server_name: "rogue"\n'
        f"leafnodes {{ remotes: [ {remote} ] }}\n"
        "accounts {\n"
        f'  LINKED {{ users: [{{user: "linked", password: "rogue"}}], exports: [{exports}] }}\n'
        f'  "{client_account}" {{ users: [{{user: "client", password: "rogue"}}], imports: [{imports}] }}\n'
        "}\n"
    )


@asynccontextmanager
async def rogue_leaf(
    mesh: SiteMesh, folder: Path, client_account: str = "CLIENT", link: str = LINK
) -> AsyncIterator[Rogue]:
    """The rogue server on `link`'s credential, its client's account named `client_account` (how a
    request through an import names who asks)."""
    await anyio.Path(folder).mkdir(parents=True)
    async with local_nats(folder, rogue_config(mesh, client_account, link)) as running:
        yield Rogue(running)


@pytest.fixture(params=[False, True], ids=["static accounts", "decentralized JWT accounts"])
async def mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SiteMesh]:
    """The hub and its seat on the generated files; the site's server not running."""
    async with in_own_task(site_mesh(tmp_path / "mesh", jwt=request.param, with_site=False)) as running:
        yield running


@pytest.fixture
async def seat(mesh: SiteMesh) -> AsyncIterator[Bus]:
    """The hub's seat user, once every node-written bucket holds keys of n1 and n2, and the
    provider's bucket n2's bound value."""
    async with in_own_task(mesh.connect(party(Kind.SEAT))) as bus:
        for node in ("n1", "n2"):
            await put(bus, NEEDS, f"{node}.web.config.x", A_NEED)
            await put(bus, APPLIED, f"{node}.web", b'{"state":"applied"}')
            await put(bus, buckets.COLLECT, f"{node}.shell=3Azsh.web", b'{"items":["a"]}')
        await put(bus, BOUND, "n2.db.postgres", N2_BOUND)
        yield bus


@pytest.fixture
async def rogue_server(mesh: SiteMesh, seat: Bus, tmp_path: Path) -> AsyncIterator[Rogue]:
    """The rogue leaf server, once its link carries what the link's user may send: n1's own need,
    written at the hub through it."""
    async with in_own_task(rogue_leaf(mesh, tmp_path / "rogue")) as server:
        client = await server.client()
        try:
            await eventually(partial(_written_through, client, seat), "n1's need written through the link")
        finally:
            await client.close()
        yield server


@pytest.fixture
async def rogue(rogue_server: Rogue) -> AsyncIterator[Client]:
    """A client of the rogue leaf server, asking the hub through the link."""
    client = await rogue_server.client()
    try:
        yield client
    finally:
        await client.close()


async def _written_through(client: Client, seat: Bus) -> bool | None:
    own = f"{HUB_API}{NEEDS.subject('n1.web.config.x')}"
    try:
        await client.request(own, b'{"through":"the link"}', timeout=0.5)
    except nats.errors.Error:
        return None
    written = await get_direct(seat, NEEDS, "n1.web.config.x")
    return True if written is not None and written.value == b'{"through":"the link"}' else None


async def outside_the_sites_keys(seat: Bus) -> dict[str, list[tuple[str, bytes, int, bool]]]:
    return outside_own_keys(await everything(seat, await data_buckets(seat)), SITE_NODE)


async def consumers(seat: Bus) -> dict[str, list[tuple[str, str]]]:
    """Each hub bucket's consumers (name, where it delivers) but the seat's own reads (its
    snapshots deliver to its inboxes and come and go)."""
    found = {}
    for bucket in await data_buckets(seat):
        listed = await seat.jetstream(f"CONSUMER.LIST.{bucket.stream}", {}, operation="consumer list")
        configs = [c["config"] for c in listed["consumers"] or []]
        delivering = [(c.get("durable_name", ""), c.get("deliver_subject", "")) for c in configs]
        found[bucket.name] = sorted(d for d in delivering if not d[1].startswith("_INBOX."))
    return found


@pytest.mark.parametrize("attack", LINK_ATTACKS, ids=named(LINK_ATTACKS))
async def test_a_rogue_leaf_on_the_sites_link_changes_nothing_at_the_hub(
    seat: Bus, rogue: Client, attack: RequestAttack
) -> None:
    before, made = await outside_the_sites_keys(seat), await consumers(seat)
    await nothing_comes_back(seat, rogue, attack, await data_buckets(seat))
    await barrier_through(rogue, f"{HUB_API}{NEEDS.subject('n1.web.config.x')}")  # on the attack's path, behind it
    await stream_barrier(seat, await data_buckets(seat))
    assert await outside_the_sites_keys(seat) == before
    assert await consumers(seat) == made


def account_of(mesh: SiteMesh, label: str) -> str:
    """How the hub names party `label`'s account in `Nats-Request-Info`: its name, or its public key (JWT)."""
    issued = Grants.model_validate_json((mesh.out / "grants.json").read_text())
    grant = next(g for g in issued.parties if g.party.label == label)
    return (grant.account_key or "") if mesh.jwt else grant.account


async def _verb_answer(client: Client) -> Msg | None:
    try:
        return await client.request(buckets.VERB_SUBJECT, b'{"what": "needs"}', timeout=0.5)
    except nats.errors.Error:
        return None


@pytest.mark.parametrize("named", [None, "operator-ops", "node-n2"], ids=["its own", "the operator's", "n2's"])
async def test_a_rogue_leaf_asking_the_verb_is_never_answered_at_the_hub(
    mesh: SiteMesh, seat: Bus, tmp_path: Path, named: str | None
) -> None:
    """The verb does not cross a link (the site's seat answers its nodes): the rogue server's
    client, its account named as it likes (after the operator's: the mesh; after n2's: n2's
    needs), is answered nothing, and the hub's seat is never asked."""
    before = await requests_answered(seat)
    client_account = account_of(mesh, named) if named is not None else "CLIENT"
    async with rogue_leaf(mesh, tmp_path / "rogue", client_account) as server:
        client = await server.client()
        try:
            await eventually(
                partial(_written_through, client, seat), "n1's need written through the link"
            )  # up, carrying
            answers = [await _verb_answer(client) for _ in range(5)]
        finally:
            await client.close()
    assert answers == [None] * 5
    assert await requests_answered(seat) == before


async def test_a_rogue_leaf_hears_no_answer_to_a_node_at_the_hub(mesh: SiteMesh, rogue_server: Rogue) -> None:
    """A user of the rogue server's linked account subscribes `_R_.>`; node n2, at the hub, gets its
    own postgres_bound key: the rogue must not hear the answer (the link's account at the hub is
    the site's own: the hub's answers to others are published in the data account). Judged once
    the listener heard the hub's answer to a write of the link's own, asked after n2's gets: the
    hub sends the link what it sends in order."""
    listener, client = await rogue_server.listener(), await rogue_server.client()
    heard: list[bytes] = []

    async def hear(msg: Msg) -> None:
        heard.append(msg.data)

    try:
        await listener.subscribe("_R_.>", cb=hear)
        await listener.flush()
        await answer_heard_through(client, heard)  # the subscription's interest is at the hub
        async with mesh.connect(party(Kind.NODE, "n2")) as n2:
            for _ in range(ASKED):
                got = await get_direct(n2, BOUND, "n2.db.postgres")
                assert got is not None and got.value == N2_BOUND
        await answer_heard_through(client, heard)
    finally:
        await client.close()
        await listener.close()
    assert N2_BOUND not in heard


async def answer_heard_through(client: Client, heard: list[bytes]) -> None:
    """Returns once the hub's answer to a write of n1's need through the link, which the link may
    carry, was heard among `heard`: the barrier behind what the hub sent the link before."""
    own = f"{HUB_API}{NEEDS.subject('n1.web.config.x')}"
    answer = await client.request(own, b'{"through":"the link"}', timeout=5)
    await wait_for(lambda: answer.data in heard, "the listener heard the answer to the link's own write")


async def _asked_as(client: Client) -> str | None:
    try:
        answer = await client.request(SECRET_VERB, b'{"kind": "secret"}', timeout=0.5)
    except nats.errors.Error:
        return None
    found: str = json.loads(answer.data)["acc"]
    return found


async def test_a_rogue_leaf_on_the_vault_link_is_not_taken_for_another_node(
    mesh: SiteMesh, seat: Bus, tmp_path: Path
) -> None:
    """A stand-in of the vault at the hub, on the vault's own key, answers whom the bus says asked:
    a rogue leaf on the vault link's credential, its importing account named after n2's, must not
    be n2 to it (the vault would hand it n2's secrets). The hub's server names the site's account,
    whatever the leaf wrote."""
    vault = await mesh.raw(party(Kind.VAULT))
    try:
        await answering_who_asks(vault, SECRET_VERB)
        async with rogue_leaf(mesh, tmp_path / "rogue", account_of(mesh, "node-n2"), VAULT_LINK) as server:
            client = await server.client()
            try:
                asked_as = await eventually(partial(_asked_as, client), "the hub's answer naming who asked")
            finally:
                await client.close()
    finally:
        await vault.close()
    assert asked_as == account_of(mesh, f"site-{SITE}")


async def answering_who_asks(client: Client, subject: str) -> None:
    """Answers `subject` with the account `Nats-Request-Info` names."""

    async def answer(msg: Msg) -> None:
        info = json.loads((msg.headers or {}).get("Nats-Request-Info", "{}"))
        await msg.respond(json.dumps({"acc": info.get("acc")}).encode())

    await client.subscribe(subject, cb=answer)
    await client.flush()


async def _secret_asked(client: Client, node: str) -> Msg | None:
    body = json.dumps({"node": node, "module": "app", "kind": "secret", "name": "s"}).encode()
    try:
        return await client.request(SECRET_VERB, body, timeout=0.5)
    except nats.errors.Error:
        return None


@pytest.mark.parametrize("named", [None, "node-n2"], ids=["its own", "n2's"])
async def test_a_rogue_leaf_on_the_vault_link_gets_the_secrets_of_its_sites_nodes_alone(
    mesh: SiteMesh, seat: Bus, tmp_path: Path, named: str | None
) -> None:
    """The development vault holding the contract at the hub (the grants' parties, the needs read):
    through the vault link's credential, its importing account named as it likes, the rogue asks
    for the secret both n1 (at the site) and n2 (at the hub) declare. n2's is refused, and n2's
    value never comes back; n1's is answered: a site's server speaks for its own nodes."""
    for node in ("n1", "n2"):
        await put(seat, NEEDS, f"{node}.app.secret.s", b'{"placeholder":"${secret:s}","used_in":["S"]}')
    async with mesh.connect(party(Kind.VAULT)) as bus:
        vault = Vault(parties=Grants.model_validate_json((mesh.out / "grants.json").read_text()).party_map(), needs=bus)
        vault.secrets["s"] = "the-secret-value"
        endpoints = [EndpointSpec("secret", SECRET_VERB, vault.answer_secret)]
        async with serve(bus, name="mesh-vault", version="0.1.0", description="vault", endpoints=endpoints):
            client_account = account_of(mesh, named) if named is not None else "CLIENT"
            async with rogue_leaf(mesh, tmp_path / "rogue", client_account, VAULT_LINK) as server:
                client = await server.client()
                try:
                    own = await eventually(partial(_secret_asked, client, SITE_NODE), "the site node's secret asked")
                    other = await _secret_asked(client, "n2")
                finally:
                    await client.close()
    assert json.loads(own.data) == {"value": "the-secret-value"}
    assert other is not None and (other.headers or {}).get("Nats-Service-Error-Code") == "403"
    assert b"the-secret-value" not in other.data
    said = (other.headers or {}).get("Nats-Service-Error", "")
    assert said == f"site {SITE} is answered for the nodes living there; asked for node n2"
