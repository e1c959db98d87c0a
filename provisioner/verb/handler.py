"""The provisioning verb: who asks, what is asked, and how it is answered.

Who asks comes from the bus: with a `PartyMap` (the grants the controller issued), the header
`Nats-Request-Info` names the asking account, and the query is scoped to that party
(`provisioner.verb.request.scoped`). Without one, every request is answered about the mesh, as on a
single-account development bus. How the scoped query is answered (from memory, or by reading a
bucket) is decided in one place, `provisioner.verb.answering`. The contract of requests and answers
is in the README.
"""

from __future__ import annotations

from collections.abc import Mapping

from provisioner.errors import Forbidden
from provisioner.verb.answering import Answer, Answering
from provisioner.verb.nodes import FleetView
from provisioner.verb.paging import PageCache
from provisioner.verb.registry_view import RegistryView
from provisioner.verb.request import Asked, parse_request, scoped
from registry.access import Party, PartyMap, UnknownAccount
from registry.wire import Bus


class Verb:
    """Answers the verb's requests; raises `RequestError` for one the verb refuses."""

    def __init__(
        self,
        bus: Bus,
        cache: PageCache,
        registry: RegistryView | None = None,
        parties: PartyMap | None = None,
        nodes: FleetView | None = None,
    ) -> None:
        self.parties = parties
        self.answering = Answering(bus, cache, registry, nodes)

    def answer(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        """How the request is answered (`provisioner.verb.answering`), once validated and scoped."""
        return self.answering.answer(self.asked(body, headers))

    def asked(self, body: bytes, headers: Mapping[str, str]) -> Asked:
        """The request validated and scoped to the party the bus says sent it; `Forbidden` for an
        account no grant was issued to, or a node asking about another node."""
        party = self.who_asks(headers)
        return Asked(scoped(parse_request(body), party), party)

    def who_asks(self, headers: Mapping[str, str]) -> Party | None:
        if self.parties is None:
            return None
        try:
            return self.parties.who_asks(headers)
        except UnknownAccount as err:
            raise Forbidden(str(err)) from None
