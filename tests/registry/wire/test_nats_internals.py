"""nats-py's internals, checked at start (`registry.wire.nats_internals`): each private name we rely
on, taken away or changed in shape, is refused by name with the feature of ours it would break;
the installed nats-py passes, within the pin pyproject.toml declares."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path

import nats.micro.service
import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import Parser
from packaging.specifiers import SpecifierSet

from registry.errors import BusError
from registry.wire import BusOptions, check_nats_internals, connect_within, nats_internals

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test checks afresh: the check is remembered once passed, for the rest of the process."""
    monkeypatch.setattr(nats_internals, "_passed", set())


def test_the_installed_nats_py_has_every_internal_we_rely_on() -> None:
    check_nats_internals(serving=True)


def test_the_installed_nats_py_is_within_the_pin_and_the_pin_is_pyproject_s() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"nats-py{nats_internals.PIN}" in dependencies
    assert version("nats-py") in SpecifierSet(nats_internals.PIN)


def _empty_init() -> Callable[..., None]:
    """An `__init__` that sets nothing: the attribute each case names is among what it leaves unset."""

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        return None

    return __init__


async def _parse_without_routing(self: Parser, data: bytes = b"") -> None:
    if not data:  # still hands a PONG to the client: only the message hook is gone
        await self.nc._process_pong()


async def _parse_without_pongs(self: Parser, data: bytes = b"") -> None:
    if not data:  # still hands a message to the client: only the PONG hook is gone
        await self.nc._process_msg(0, b"", b"", b"", None)


def _client_init_without_transport(self: Client, *args: object, **kwargs: object) -> None:
    self._pongs = []


def _client_init_without_pongs(self: Client, *args: object, **kwargs: object) -> None:
    self._transport = None


async def _process_a_msg(self: Client, msg: object) -> None:
    return None


def _headers_by_instance(self: Client, raw: bytes) -> dict[str, str]:
    return {}


async def _process_headers_alone(self: Client, headers: bytes) -> None:
    return None


@dataclass(frozen=True)
class Change:
    """A change nats-py could make, what the check must name, and which feature of ours it says breaks."""

    owner: type
    name: str
    replacement: object | None  # None: the name is taken away
    named: str
    breaks: str
    serving: bool = False

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.replacement is None:
            monkeypatch.delattr(self.owner, self.name)
        else:
            monkeypatch.setattr(self.owner, self.name, self.replacement)


RAW = "Bus.subscribe_raw: a streamed listing"
HEADERS = "the bus's faster header parser"
PONG = "a flush given up on"
CHANGES = [
    pytest.param(
        Change(Client, "_process_msg", None, "Client._process_msg(sid, subject, reply, data, headers)", RAW),
        id="the parser's message hook taken away",
    ),
    pytest.param(
        Change(Client, "_process_msg", _process_a_msg, "Client._process_msg(sid, subject, reply, data, headers)", RAW),
        id="the parser's message hook taking a Msg instead",
    ),
    pytest.param(
        Change(Parser, "parse", _parse_without_routing, "Parser.parse calling the client's _process_msg", RAW),
        id="the parser no longer calling the hook on the client",
    ),
    pytest.param(
        Change(Subscription, "__init__", _empty_init(), "Subscription._id", RAW),
        id="a subscription without its id",
    ),
    pytest.param(
        Change(Client, "_parse_header_lines", None, "Client._parse_header_lines(raw), a static method", HEADERS),
        id="the header-line parser taken away",
    ),
    pytest.param(
        Change(
            Client,
            "_parse_header_lines",
            _headers_by_instance,
            "Client._parse_header_lines(raw), a static method",
            HEADERS,
        ),
        id="the header-line parser no longer static",
    ),
    pytest.param(
        Change(
            Client,
            "_process_headers",
            _process_headers_alone,
            "Client._process_headers calling _parse_header_lines",
            HEADERS,
        ),
        id="the headers parsed without the header-line parser",
    ),
    pytest.param(
        Change(Client, "__init__", _client_init_without_transport, "Client._transport", "closing a connect given up"),
        id="a client without its transport",
    ),
    pytest.param(
        Change(Client, "__init__", _client_init_without_pongs, "Client._pongs", PONG),
        id="a client without its list of PINGs waiting",
    ),
    pytest.param(
        Change(Parser, "parse", _parse_without_pongs, "Parser.parse calling the client's _process_pong", PONG),
        id="the parser no longer handing a PONG to the client",
    ),
    pytest.param(
        Change(Client, "_process_pong", None, "Client._process_pong(), setting the result of a future of _pongs", PONG),
        id="the PONG hook taken away",
    ),
    pytest.param(
        Change(
            nats.micro.service.Service,
            "__init__",
            _empty_init(),
            "Service._endpoints",
            "the service's ordered stop",
            serving=True,
        ),
        id="a service without its endpoints",
    ),
    pytest.param(
        Change(
            nats.micro.service.Endpoint,
            "__init__",
            _empty_init(),
            "Endpoint._subscription",
            "the service's ordered stop",
            serving=True,
        ),
        id="an endpoint without its subscription",
    ),
]


@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_internal_is_refused_naming_it_and_the_feature_it_breaks(
    change: Change, monkeypatch: pytest.MonkeyPatch
) -> None:
    change.apply(monkeypatch)
    with pytest.raises(BusError) as refused:
        check_nats_internals(serving=change.serving)
    reason = refused.value.reason
    assert f"no {change.named} (needed by {change.breaks}" in reason
    assert reason.count("(needed by ") == 1  # that change alone: every other internal still holds
    assert f"nats-py {version('nats-py')} has changed internals" in reason
    assert f"nats-py{nats_internals.PIN}" in reason


def test_the_service_s_internals_are_not_the_client_s_concern(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nats.micro.service.Service, "__init__", _empty_init())
    check_nats_internals()


def test_the_client_s_check_loads_no_service_api() -> None:
    """The node client checks nats-py as its bus connects, and serves nothing: nats.micro stays unloaded."""
    script = (
        "import json, sys\n"
        "from registry.wire import check_nats_internals\n"
        "check_nats_internals()\n"
        "print(json.dumps([m for m in sys.modules if m.startswith('nats.micro')]))"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


async def test_a_bus_does_not_connect_with_a_changed_nats_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(Client, "_process_msg")
    options = BusOptions(servers=("nats://127.0.0.1:1",), connect_timeout=timedelta(seconds=1))
    with pytest.raises(BusError, match=r"no Client\._process_msg"):
        async with connect_within(options, timedelta(seconds=1)):
            pass
