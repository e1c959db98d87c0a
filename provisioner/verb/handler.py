"""The provisioning verb: who asks, what is asked, and how it is answered.

Who asks comes from the bus: with a `PartyMap` (the grants the controller issued), the header
`Nats-Request-Info` names the asking account, and the query is scoped to that party
(`provisioner.verb.request.scoped`). Without one the seat fails closed: it answers only requests
from inside its own account (a single-account development bus, where no request carries the
header), about the mesh, and refuses any request the bus says came from another account. How the
scoped query is answered (from memory, or by reading a bucket) is decided in one place,
`provisioner.verb.answering`. The contract of requests and answers is docs/verb.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from provisioner.errors import Forbidden, RequestError
from provisioner.seat.settings import ServerSettings
from provisioner.verb.answering import Answer, Answering
from provisioner.verb.nodes import FleetView
from provisioner.verb.own_pages import OwnPages
from provisioner.verb.paging import PageCache
from provisioner.verb.registry_view import RegistryView
from provisioner.verb.request import Asked, parse_request, scoped
from registry.access import REQUEST_INFO, Party, PartyMap, UnknownAccount
from registry.edge import env_of, flag_of
from registry.wire import Bus

GRANTS_SETTING = f"{flag_of(ServerSettings, 'grants_file')}, {env_of(ServerSettings, 'grants_file')}"
NO_GRANTS = (
    f"the request came from another account, and this seat was started without a grants file "
    f"({GRANTS_SETTING}): it answers only its own account's requests"
)


class Verb:
    """Answers the verb's requests; raises `RequestError` for one the verb refuses."""

    def __init__(
        self,
        bus: Bus,
        cache: PageCache,
        registry: RegistryView | None = None,
        parties: PartyMap | None = None,
        nodes: FleetView | None = None,
        *,
        own: OwnPages | None = None,
    ) -> None:
        self.parties = parties
        self.registry = registry
        self.answering = Answering(bus, cache, registry, nodes, own)

    def answer(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        """How the request is answered (`provisioner.verb.answering`), once validated and scoped."""
        asked = self.asked(body, headers)
        try:
            return self.answering.answer(asked)
        except RequestError as err:  # a cursor gone, say: said as the party's
            err.asker, err.what = asker_of(asked.party), asked.query.what
            raise

    def asked(self, body: bytes, headers: Mapping[str, str]) -> Asked:
        """The request validated and scoped to the party the bus says sent it; `Forbidden` for an
        account no grant was issued to, or a node asking about another node."""
        party = self.who_asks(headers)
        try:
            query = parse_request(body)
        except RequestError as err:
            err.asker = asker_of(party)
            raise
        try:
            shared = self.registry.shared_collections() if self.registry is not None else frozenset()
            return Asked(scoped(query, party, shared), party)
        except RequestError as err:
            err.asker, err.what = asker_of(party), query.what
            raise

    def who_asks(self, headers: Mapping[str, str]) -> Party | None:
        if self.parties is None:
            if REQUEST_INFO in headers:
                refused = Forbidden(NO_GRANTS)
                refused.asker = "another account"
                raise refused
            return None
        try:
            return self.parties.who_asks(headers)
        except UnknownAccount as err:
            refused = Forbidden(str(err))
            refused.asker = f"account {err.account[:64]}"
            raise refused from None


def asker_of(party: Party | None) -> str:
    """How logs name who asked: its party's label, or the seat's own account."""
    return party.label if party is not None else "the seat's own account"
