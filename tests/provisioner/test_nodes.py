"""`what=nodes`, `mesh-provisioner query nodes` and `top`: each node's sign of life (its
client's lease), its applied counts and a verdict saying how it is known, against a real
nats-server and seat. Ages in the answers are the server's stored times against the seat's clock:
the tests write them as `N s ago` before comparing."""

from __future__ import annotations

import io
import json
import re
import signal
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from mesh_dev.local_nats import LocalNats
from provisioner.commands.cli import main as cli_main
from provisioner.commands.top import Screen, TopOptions, fleet, frame, run_top
from provisioner.verb.nodes import Fleet, FleetView, LeaseSeen, answer_pages, judge, read_fleet
from provisioner.verb.request import Query
from provisioner_client.reconcile import ClientPlan
from provisioner_client.watch.watching import WatchTiming, watch
from registry.access import Kind
from registry.contract import PENDING_CAUSES, MergedAnswer, buckets
from registry.errors import ConnectionClosed, ServiceError
from registry.wire import Bus, BusOptions, Holder, KvItem, Lease, ask, connect, nats_client, node_key, put
from tests.helpers import clean_environment, put_many
from tests.isolation import Mesh, party

HOLDER = Holder(id="h1", host="host-1", pid=101, since=datetime(2026, 1, 1, tzinfo=UTC), ttl_seconds=30)
APPLIED = {
    "n1.web": {"state": "applied", "digest": "hmac-sha256:00", "changed_at": "2026-01-02T03:04:05Z"},
    "n1.db": {"state": "pending", "reasons": ["no value"], "changed_at": "2026-01-02T03:00:00Z"},
    "n2.api": {"state": "applied", "changed_at": "2026-01-01T00:00:00Z"},
    "n3.web": {"state": "pending", "changed_at": "2026-01-03T00:00:00Z"},
}
GONE = "no lease record: its client never ran, or the record was removed"


async def nodes_until(
    bus: Bus, check: Callable[[dict[str, Any]], bool], within: float = 15.0, **request: Any
) -> dict[str, Any]:
    """The seat's `what=nodes` answer once `check` holds: the seat's view follows the buckets
    a few milliseconds behind a write, and a verdict turns stale only as time passes."""
    with anyio.fail_after(within):
        while True:
            answer = await ask(bus, {"what": "nodes", **request})
            if check(answer):
                return answer
            await anyio.sleep(0.05)


def verdicts(answer: Mapping[str, Any]) -> dict[str, str]:
    return {entry["node"]: entry["verdict"] for entry in answer["entries"]}


@pytest.fixture
async def fleet_server(server: LocalNats, bus: Bus) -> LocalNats:
    """n1's lease held (host-1 pid 101, ttl 30 s), n2's released, n3 with applied records only,
    and a key out of the applied bucket's shape."""
    await put_many(bus, buckets.APPLIED, {key: json.dumps(value).encode() for key, value in APPLIED.items()})
    await put(bus, buckets.APPLIED, "n1.bad.key", b"{}")
    await Lease(bus, node_key("n1"), ttl=timedelta(seconds=30), holder=HOLDER).try_take()
    n2 = Lease(bus, node_key("n2"), ttl=timedelta(seconds=30))
    await n2.try_take()
    await n2.release()
    await nodes_until(bus, lambda a: verdicts(a) == {"n1": "healthy", "n2": "healthy", "n3": "gone"} and released_n2(a))
    return server


def applied_once(answer: Mapping[str, Any]) -> bool:
    return [e["applied"] for e in answer["entries"]] == [1, 1]


def released_n2(answer: Mapping[str, Any]) -> bool:
    """n2's release has reached the seat's view (it is healthy from its take on), as has the malformed key."""
    return len(answer["malformed"]) == 1 and any(
        e["node"] == "n2" and (e.get("lease") or {}).get("state") == "released" for e in answer["entries"]
    )


async def run_cli(url: str, *args: str) -> tuple[int, str, str]:
    """`mesh-provisioner` as a child process, its stdout a pipe: not a terminal."""
    command = [sys.executable, "-m", "provisioner.commands.cli", *args, "--nats-url", url]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def aged(text: str) -> str:
    return re.sub(r"\b\d+ s ago\b", "N s ago", text)


TABLE = (
    "NODE  VERDICT  LEASE                   APPLIED  PENDING  CHANGED               WHY\n"
    "n1    healthy  held by host-1 pid 101  1        1        2026-01-02T03:04:05Z  lease renewed N s ago (ttl 30 s)\n"
    "n2    healthy  released                1        0        2026-01-01T00:00:00Z  lease released N s ago\n"
    f"n3    gone     none                    0        1        2026-01-03T00:00:00Z  {GONE}\n"
)
MALFORMED = (
    "           MALFORMED KEY                        REASON\n"
    "malformed  mesh-provisioner_applied n1.bad.key  it has 3 tokens, the shape has 2\n"
)


async def test_query_nodes_prints_each_nodes_verdict_and_exits_9_for_a_gone_node(fleet_server: LocalNats) -> None:
    code, out, _ = await run_cli(fleet_server.url, "query", "nodes")
    assert code == 9
    assert aged(out) == (
        f"{TABLE}\n{MALFORMED}\n3 nodes: 2 healthy, 0 stale, 1 gone; modules: 2 applied, 2 pending, 1 malformed\n"
    )


@pytest.mark.parametrize(
    ("args", "code", "nodes"),
    [
        pytest.param(["--state", "healthy"], 10, ["n1", "n2"], id="healthy ones only: the malformed key still says 10"),
        pytest.param(["--node", "n2"], 0, ["n2"], id="one healthy node: nothing out of shape under it"),
        pytest.param(["--state", "gone"], 9, ["n3"], id="the gone one"),
        pytest.param(["--stale-after", "0.001"], 9, ["n1", "n2", "n3"], id="a threshold every lease is past"),
    ],
)
async def test_query_nodes_exit_codes(fleet_server: LocalNats, args: list[str], code: int, nodes: list[str]) -> None:
    got, out, _ = await run_cli(fleet_server.url, "query", "nodes", "--jsonl", *args)
    lines = [json.loads(line) for line in out.splitlines()]
    assert got == code
    assert [line["node"] for line in lines if "node" in line] == nodes


async def test_query_nodes_json_has_the_lease_the_counts_and_how_the_verdict_is_known(
    fleet_server: LocalNats,
) -> None:
    code, out, _ = await run_cli(fleet_server.url, "query", "nodes", "--json")
    answer = json.loads(out)
    renewed_at = answer["entries"][0]["lease"].pop("renewed_at")
    released_at = answer["entries"][1]["lease"].pop("released_at")
    assert code == 9
    assert datetime.now(UTC) - _parsed(renewed_at) < timedelta(seconds=30) > datetime.now(UTC) - _parsed(released_at)
    assert json.loads(aged(json.dumps(answer))) == {
        "what": "nodes",
        "entries": [
            {
                "node": "n1",
                "verdict": "healthy",
                "because": "lease renewed N s ago (ttl 30 s)",
                "lease": {
                    "state": "held",
                    "host": "host-1",
                    "pid": 101,
                    "since": "2026-01-01T00:00:00.000Z",
                    "ttl_seconds": 30.0,
                },
                "applied": 1,
                "pending": 1,
                "changed_at": "2026-01-02T03:04:05.000Z",
            },
            {
                "node": "n2",
                "verdict": "healthy",
                "because": "lease released N s ago",
                "lease": {"state": "released"},
                "applied": 1,
                "pending": 0,
                "changed_at": "2026-01-01T00:00:00.000Z",
            },
            {
                "node": "n3",
                "verdict": "gone",
                "because": GONE,
                "lease": {"state": "none"},
                "applied": 0,
                "pending": 1,
                "changed_at": "2026-01-03T00:00:00.000Z",
            },
        ],
        "malformed": [
            {"key": "n1.bad.key", "bucket": buckets.APPLIED.name, "reason": "it has 3 tokens, the shape has 2"}
        ],
        "pages": 1,
        "total": {"entries": 3, "malformed": 1},
    }


def _parsed(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def test_a_record_without_changed_at_counts_from_when_the_server_stored_it(server: LocalNats, bus: Bus) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    await put(bus, buckets.APPLIED, "n4.web", b'{"state":"applied","digest":"hmac-sha256:00"}')
    answer = await nodes_until(bus, lambda a: verdicts(a) == {"n4": "gone"}, node="n4")
    assert before <= _parsed(answer["entries"][0]["changed_at"]) <= datetime.now(UTC) + timedelta(seconds=1)


NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def held(age: float, ttl: float = 30) -> LeaseSeen:
    holder = Holder(id="h", host="h", pid=1, since=NOW - timedelta(hours=1), ttl_seconds=ttl)
    return LeaseSeen(1, NOW - timedelta(seconds=age), released=False, holder=holder)


def released(age: float) -> LeaseSeen:
    return LeaseSeen(1, NOW - timedelta(seconds=age), released=True)


@pytest.mark.parametrize(
    ("lease", "stale_after", "verdict", "because"),
    [
        pytest.param(held(12), 300, "healthy", "lease renewed 12 s ago (ttl 30 s)", id="renewed within its ttl"),
        pytest.param(
            held(36),
            300,
            "stale",
            "no renewal for 36 s: its lease expired (ttl 30 s)",
            id="held but past its ttl and the skew: its client died without releasing it",
        ),
        pytest.param(
            held(12),
            10,
            "stale",
            "no renewal for 12 s (ttl 30 s, stale after 10 s)",
            id="within its ttl but past the threshold asked",
        ),
        pytest.param(
            LeaseSeen(1, NOW - timedelta(seconds=5), released=False),
            300,
            "healthy",
            "lease renewed 5 s ago (holder unreadable)",
            id="a holder record that cannot be read",
        ),
        pytest.param(released(40), 300, "healthy", "lease released 40 s ago", id="released within the threshold"),
        pytest.param(
            released(600),
            300,
            "stale",
            "lease released 10 min ago, no sign of life since (stale after 5 min)",
            id="released longer ago than the threshold",
        ),
        pytest.param(
            released(3 * 86400),
            0.5,
            "stale",
            "lease released 3 d ago, no sign of life since (stale after 0.5 s)",
            id="days ago",
        ),
        pytest.param(None, 300, "gone", GONE, id="no lease record at all"),
    ],
)
def test_verdicts_say_how_they_are_known(
    lease: LeaseSeen | None, stale_after: float, verdict: str, because: str
) -> None:
    assert judge(lease, now=NOW, stale_after=timedelta(seconds=stale_after)) == (verdict, because)


@pytest.mark.parametrize(
    ("lease", "applied"),
    [
        pytest.param({"ttl_seconds": 1e300}, {}, id="a ttl past what a timedelta holds"),
        pytest.param({"ttl_seconds": "NaN"}, {}, id="a ttl that is not a number"),
        pytest.param({"since": "0001-01-01T00:00:00+05:00"}, {}, id="a since before year 1 in UTC"),
        pytest.param({}, {"changed_at": "9999-12-31T23:59:59-05:00"}, id="a changed_at after year 9999 in UTC"),
    ],
)
async def test_a_nodes_own_records_out_of_range_do_not_fail_the_fleets_answer(
    lease: dict[str, Any], applied: dict[str, Any]
) -> None:
    holder = {"id": "h", "host": "h", "pid": 1, "since": "2026-06-01T11:00:00Z", "ttl_seconds": 30} | lease
    fleet = Fleet()
    fleet.apply_lease(KvItem(node_key("n1"), json.dumps(holder).encode(), 1, stored_at=NOW))
    record = {"state": "applied"} | applied
    fleet.apply_applied(KvItem("n1.web", json.dumps(record).encode(), 2, stored_at=NOW))
    [page] = await answer_pages(fleet, Query(what="nodes"), budget=1 << 16, cursor_of=str, now=NOW)
    [entry] = json.loads(page)["entries"]
    assert entry["verdict"] == "healthy" and entry["applied"] == 1
    assert ("ttl_seconds" in entry["lease"]) == (not lease)
    assert entry["changed_at"] == "2026-06-01T12:00:00.000Z"  # out of range: when the server stored it


async def test_a_stopped_client_shows_stale_after_the_threshold_and_healthy_again_when_it_returns(
    server: LocalNats, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "modules").mkdir()
    plan = ClientPlan("n1", tmp_path / "modules", tmp_path / "env", lease_ttl=timedelta(seconds=3))
    timing = WatchTiming(debounce=timedelta(seconds=0.05))

    def n1_is(verdict: str, because: str) -> Callable[[dict[str, Any]], bool]:
        return lambda a: verdicts(a) == {"n1": verdict} and a["entries"][0]["because"].startswith(because)

    for _ in range(2):  # the client runs, stops, and comes back
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(partial(watch, bus, plan, timing, stop=stop))
            await nodes_until(bus, n1_is("healthy", "lease renewed"), stale_after=2)
            stop.set()
        answer = await nodes_until(bus, n1_is("stale", "lease released"), stale_after=2)
        assert answer["entries"][0]["because"].endswith("no sign of life since (stale after 2 s)")
        assert answer["entries"][0]["lease"]["state"] == "released"


async def test_a_node_is_answered_about_itself_only(mesh: Mesh) -> None:
    for name in ("n1", "n2"):
        async with mesh.connect(party(Kind.NODE, name)) as node:
            await Lease(node, node_key(name), ttl=timedelta(seconds=60)).try_take()
            await put(node, buckets.APPLIED, f"{name}.web", b'{"state":"applied"}')
    async with mesh.connect(party(Kind.OPERATOR, "ops")) as ops:  # the seat reads both nodes' leases
        # Leases and applied records reach the seat's view by separate watches: both are waited for.
        await nodes_until(ops, lambda a: verdicts(a) == {"n1": "healthy", "n2": "healthy"} and applied_once(a))
    async with mesh.connect(party(Kind.NODE, "n1")) as n1:
        own = await ask(n1, {"what": "nodes"})
        with pytest.raises(ServiceError) as refused:
            await ask(n1, {"what": "nodes", "node": "n2"})
    assert [entry["node"] for entry in own["entries"]] == ["n1"]
    assert own["entries"][0]["lease"]["state"] == "held"
    assert refused.value.code == "403"


@pytest.mark.parametrize(
    ("request_body", "says"),
    [
        pytest.param(
            {"what": "needs", "stale_after": 5},
            "'stale_after' does not apply to what='needs'; only to what='nodes'",
            id="a threshold for another what",
        ),
        pytest.param(
            {"what": "nodes", "stale_after": 0},
            "field 'stale_after': Input should be greater than 0",
            id="a threshold of zero",
        ),
        pytest.param(
            {"what": "nodes", "module": "web"},
            "'module' does not apply to what='nodes'; it takes node",
            id="a module for nodes",
        ),
    ],
)
async def test_the_verb_refuses_what_does_not_apply(
    server: LocalNats, bus: Bus, request_body: dict[str, Any], says: str
) -> None:
    with pytest.raises(ServiceError) as refused:
        await ask(bus, request_body)
    assert (refused.value.code, refused.value.description) == ("400", says)


async def test_top_once_prints_one_frame_and_exits_9_for_a_gone_node(fleet_server: LocalNats) -> None:
    code, out, _ = await run_cli(fleet_server.url, "top", "--once")
    first, *table = aged(out).splitlines(keepends=True)
    assert code == 9
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  ", first[:22])
    assert first[22:] == "3 nodes: 2 healthy, 0 stale, 1 gone; modules: 2 applied, 2 pending; 1 malformed\n"
    header, n1, n2, n3 = TABLE.splitlines(keepends=True)
    assert "".join(table) == f"{header}{n3}{n1}{n2}\n"  # gone and stale first


async def test_top_once_prints_its_frame_as_json_as_query_nodes_does(fleet_server: LocalNats) -> None:
    code, out, _ = await run_cli(fleet_server.url, "top", "--once", "--json")
    _, queried, _ = await run_cli(fleet_server.url, "query", "nodes", "--json")
    shown = json.loads(out)
    assert code == 9
    assert shown.pop("held") == {}
    assert [e["node"] for e in shown["entries"]] == [e["node"] for e in json.loads(queried)["entries"]]
    code, out, err = await run_cli(fleet_server.url, "top", "--json")
    assert (code, out) == (2, "") and "--json: applies only with --once" in err


async def test_top_prints_a_frame_every_interval_until_sigint_then_exits_0(fleet_server: LocalNats) -> None:
    command = [
        sys.executable,
        "-m",
        "provisioner.commands.cli",
        "top",
        "--interval",
        "0.2",
        "--nats-url",
        fleet_server.url,
    ]
    async with await anyio.open_process(command, env=clean_environment()) as process:
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(20):
            async for chunk in process.stdout:
                seen += chunk
                if seen.count(b" nodes: ") >= 2:
                    break
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(10):
            code = await process.wait()
            seen += b"".join([chunk async for chunk in process.stdout])
    frames = aged(seen.decode()).split("\n\n")
    assert code == 0
    assert len(frames) >= 3 and frames[-1] == ""  # every frame whole, a blank line after each
    assert all(frame.splitlines()[1].startswith("NODE  VERDICT") for frame in frames[:-1])


async def test_top_ends_with_the_error_once_its_connection_is_closed_for_good(server: LocalNats) -> None:
    async with connect(BusOptions(servers=(server.url,), name="test")) as bus:
        await nats_client(bus).close()  # as nats-server closing it would, after an authorization violation
        with anyio.fail_after(5), pytest.raises(ConnectionClosed):
            await run_top(bus, TopOptions(interval=timedelta(seconds=0.05)), io.StringIO(), anyio.Event())


async def test_a_paged_fleet_is_one_table_and_its_pages_are_counted(small_payload_server: LocalNats) -> None:
    values = {f"n{i:03}.web": b'{"state":"applied","changed_at":"2026-01-01T00:00:00Z"}' for i in range(300)}
    pages_read: list[tuple[int, int | None]] = []
    async with connect(BusOptions(servers=(small_payload_server.url,), name="test")) as bus:
        await put_many(bus, buckets.APPLIED, values)
        await nodes_until(bus, lambda a: len(a["entries"]) == 300)
        answer = await fleet(bus, TopOptions(), lambda read, pages: pages_read.append((read, pages)))
    code, out, _ = await run_cli(small_payload_server.url, "query", "nodes")
    pages = pages_read[0][1]
    assert pages is not None and pages > 1
    assert pages_read == [(page, pages) for page in range(1, pages + 1)]
    assert [entry["node"] for entry in answer.document()["entries"]] == [f"n{i:03}" for i in range(300)]
    assert code == 9
    assert out.splitlines()[-1] == "300 nodes: 0 healthy, 0 stale, 300 gone; modules: 300 applied, 0 pending"


def test_on_a_terminal_top_redraws_in_place_with_a_progress_bar_while_pages_are_read() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system=None, width=120)
    answer = MergedAnswer.model_validate(
        {
            "what": "nodes",
            "malformed": [],
            "entries": [
                {
                    "node": "n1",
                    "verdict": "stale",
                    "because": "lease released 10 min ago",
                    "lease": {"state": "released", "released_at": "2026-01-01T00:00:00Z"},
                    "applied": 3,
                    "pending": 1,
                    "changed_at": "2026-01-01T00:00:00Z",
                }
            ],
            "pages": 1,
            "total": {"entries": 1, "malformed": 0},
        }
    )
    with Screen(console) as screen:
        screen.on_page(1, 3)
        drawn_while_reading = out.getvalue()
        screen.show(frame(answer, None, console, NOW))
    assert "reading the fleet" in drawn_while_reading and "1/3" in drawn_while_reading
    last = out.getvalue().rsplit("\x1b[2K", 1)[-1]  # what the last redraw left on the screen
    assert "2026-06-01T12:00:00Z  1 node: 0 healthy, 1 stale, 0 gone; modules: 3 applied, 1 pending" in out.getvalue()
    assert "n1" in last and "stale" in last and "reading the fleet" not in last


@pytest.mark.parametrize("node", [None, "n1"], ids=["the whole fleet", "one node, with its key out of shape"])
async def test_the_listed_fleet_answers_as_the_kept_view_does(
    fleet_server: LocalNats, bus: Bus, node: str | None
) -> None:
    view = FleetView()
    async with anyio.create_task_group() as tg:
        await tg.start(view.follow, bus)
        with anyio.fail_after(10):
            await view.filled.wait()
        listed = await read_fleet(bus, node)
        tg.cancel_scope.cancel()
    query, now = Query(what="nodes", node=node), datetime.now(UTC)
    pages = await answer_pages(view, query, budget=60_000, cursor_of=str, now=now)
    assert await answer_pages(listed, query, budget=60_000, cursor_of=str, now=now) == pages
    assert len(json.loads(pages[0])["malformed"]) == 1


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf"])
def test_top_refuses_an_interval_it_cannot_wait(interval: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["top", "--interval", interval, "--nats-url", "nats://127.0.0.1:1"]) == 2
    assert "--interval" in capsys.readouterr().err


def applied(state: str, *reasons: str) -> bytes:
    return json.dumps({"state": state, "reasons": list(reasons)}).encode()


REFUSED = "${secret:db}: mesh-vault.secret answered error 403: no"


def test_the_fleet_counts_pending_modules_by_cause_as_records_come_and_go() -> None:
    fleet = Fleet()
    fleet.apply_applied(KvItem("n1.web", applied("pending", REFUSED, "no value"), 1, stored_at=NOW))
    fleet.apply_applied(KvItem("n1.db", applied("pending", REFUSED), 2, stored_at=NOW))
    fleet.apply_applied(KvItem("n2.web", applied("applied"), 3, stored_at=NOW))
    assert fleet.pending_by_cause == by_cause(verb_refused=2, verb_unanswered=0, other=1)
    fleet.apply_applied(KvItem("n1.web", applied("applied"), 4, stored_at=NOW))  # applied now
    assert fleet.pending_by_cause == by_cause(verb_refused=1, verb_unanswered=0, other=0)
    fleet.apply_applied(KvItem("n1.db", b"", 5, stored_at=NOW, deleted=True))
    assert fleet.pending_by_cause == by_cause(verb_refused=0, verb_unanswered=0, other=0)
    fleet.apply_applied(KvItem("n2.web", applied("pending", "x" * 100, REFUSED), 6, stored_at=NOW))
    fleet.apply_applied(KvItem("n2.api", b'{"state": "pending", "reasons": [7, null]}', 7, stored_at=NOW))
    assert fleet.pending_by_cause == by_cause(verb_refused=1, verb_unanswered=0, other=1)
    fleet.apply_applied(KvItem("n2.web", b"not json", 8, stored_at=NOW))  # malformed: no longer counted
    assert fleet.pending_by_cause == by_cause(verb_refused=0, verb_unanswered=0, other=0)
    fleet.apply_applied(KvItem("n2.web", applied("pending", REFUSED), 9, stored_at=NOW))
    fleet.forget_purged(buckets.APPLIED, "n2", 9)
    assert fleet.pending_by_cause == by_cause(verb_refused=0, verb_unanswered=0, other=0)


def test_a_purge_forgets_what_it_reached_even_when_the_watch_brings_it_later() -> None:
    """The quota guard purges by a count of its own: the view's watch may still be behind it, and
    a purged record it brings later would never be taken away (a purge leaves no marker)."""
    fleet = Fleet()
    fleet.apply_applied(KvItem("n2.web", applied("pending", REFUSED), 3, stored_at=NOW))
    fleet.apply_applied(KvItem("n2.late", applied("pending", REFUSED), 9, stored_at=NOW))  # after the count
    fleet.forget_purged(buckets.APPLIED, "n2", 5)
    fleet.apply_applied(KvItem("n2.api", applied("pending", REFUSED), 4, stored_at=NOW))  # purged, heard late
    fleet.apply_applied(KvItem("n2.bad.key", b"{}", 5, stored_at=NOW))
    assert list(fleet.modules["n2"]) == ["late"]
    assert fleet.pending_by_cause == by_cause(verb_refused=1)
    assert fleet.tally("n2").pending == 1
    assert len(fleet.malformed) == 0
    fleet.apply_applied(KvItem("n2.api", applied("applied"), 10, stored_at=NOW))  # written again: seen
    assert sorted(fleet.modules["n2"]) == ["api", "late"]


def by_cause(**counts: int) -> dict[str, int]:
    """Every cause of `PENDING_CAUSES`, those not given at 0."""
    return {cause: counts.get(cause, 0) for cause in PENDING_CAUSES}
