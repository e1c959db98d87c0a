"""`mesh-provisioner query` as operators read it: tables, JSON, JSON lines, filters, malformed
keys and their exit code, against a real nats-server and seat."""

from __future__ import annotations

import io
import json
import sys

import anyio
import pytest
from rich.console import Console

from mesh_dev.local_nats import LocalNats
from provisioner.commands import tables
from registry.contract import MergedAnswer, buckets
from registry.wire import Bus, BusOptions, ask, connect, put
from tests.helpers import clean_environment, put_many

NEED = b'{"placeholder":"${secret:db-password}","used_in":["DB_PASSWORD"]}'
NEEDS = {
    "n1.web.secret.db-password": NEED,
    "n1.web.config.db=3Aurl": b'{"placeholder":"${config:db:url}","used_in":["DB_URL","DSN"]}',
    "n2.api.secret.db-password": NEED,
    "n2.api.secret.api-token": b'{"placeholder":"${secret:api-token}","used_in":["TOKEN"]}',
    "n3.web.dir.state": b'{"placeholder":"${dir:state}","used_in":[]}',
    "n1.bad": b"{}",
}
UNREACHABLE = "secret db-password: mesh-vault.secret did not answer"
APPLIED = {
    "n1.web": json.dumps(
        {
            "state": "applied",
            "digest": "hmac-sha256:0123456789abcdef0123",
            "file": "/run/mesh/env/web.env",
            "action": {
                "command": ["true"],
                "digest": "hmac-sha256:0123456789abcdef0123",
                "outcome": "succeeded",
                "exit_code": 0,
                "finished_at": "2026-01-01T00:00:00Z",
            },
        }
    ).encode(),
    "n2.api": json.dumps({"state": "pending", "reasons": [UNREACHABLE, "config db:url: no value"]}).encode(),
    "n3.web": json.dumps(
        {
            "state": "pending",
            "digest": "hmac-sha256:fedcba9876543210",
            "reasons": [UNREACHABLE],
            "action": {
                "command": ["false"],
                "digest": "hmac-sha256:fedcba9876543210",
                "outcome": "failed",
                "exit_code": 1,
                "finished_at": "2026-01-01T00:00:00Z",
            },
        }
    ).encode(),
}
COLLECT = {
    "n1.shell=3Azsh=3Anormal.web": b'{"items":["alias ll=ls","alias la=ls -a"]}',
    "n2.shell=3Azsh=3Anormal.api": b'{"items":[]}',
}


@pytest.fixture
async def seeded(server: LocalNats, bus: Bus) -> LocalNats:
    await put_many(bus, buckets.NEEDS, NEEDS)
    await put_many(bus, buckets.APPLIED, APPLIED)
    await put_many(bus, buckets.COLLECT, COLLECT)
    return server


async def query(url: str, *args: str) -> tuple[int, str, str]:
    """`mesh-provisioner query` as a child process, its stdout a pipe: not a terminal."""
    command = [sys.executable, "-m", "provisioner.commands.cli", "query", "--nats-url", url, *args]
    result = await anyio.run_process(command, env=clean_environment(), check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_needs_prints_a_plain_table_marks_the_malformed_key_and_exits_10(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url, "needs", "--node", "n1")
    assert code == 10
    assert out == (
        "NODE  MODULE  KIND    NAME         USED IN\n"
        "n1    web     config  db:url       DB_URL, DSN\n"
        "n1    web     secret  db-password  DB_PASSWORD\n"
        "\n"
        "           MALFORMED KEY  REASON\n"
        "malformed  n1.bad         it has 2 tokens, the shape has 4\n"
        "\n"
        "2 entries, 1 malformed\n"
    )


async def test_applied_shows_state_short_digest_reasons_and_the_action(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url, "applied")
    assert code == 0
    two, one = f"2: {UNREACHABLE}", f"1: {UNREACHABLE}"
    assert out == (
        f"NODE  MODULE  STATE    DIGEST        {'REASONS':{len(two)}}  ACTION\n"
        f"n1    web     applied  0123456789ab  {'':{len(two)}}  succeeded\n"
        f"n2    api     pending                {two}\n"
        f"n3    web     pending  fedcba987654  {one}  failed (exit 1)\n"
        "\n"
        "3 entries\n"
    )


async def test_collect_counts_each_contributors_items(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url, "collect", "--collection", "shell:zsh:normal")
    assert code == 0
    assert out == (
        "NODE  COLLECTION        CONTRIBUTOR  ITEMS\n"
        "n1    shell:zsh:normal  web          2\n"
        "n2    shell:zsh:normal  api          0\n"
        "\n"
        "2 entries\n"
    )


async def test_the_registry_table_has_one_row_per_kind_with_where_values_are_found(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url)
    header, *rows, blank, count = out.splitlines()
    assert code == 0
    assert header.split() == ["KIND", "DOMAIN", "MODULE", "VIA", "WHERE"]
    assert (len(rows), blank, count) == (13, "", "13 entries")
    by_kind = {row.split()[0]: row.split(maxsplit=4) for row in rows}
    assert by_kind["secret"] == ["secret", "vault-secrets", "mesh-vault", "verb", "mesh-vault.secret"]
    assert by_kind["bound"][3:] == ["bucket", "<provider>_bound <node>.<module>.<provision>[.<local>]"]


async def test_json_is_the_merged_answer_unchanged(seeded: LocalNats, bus: Bus) -> None:
    code, out, _ = await query(seeded.url, "needs", "--json")
    assert code == 10
    assert json.loads(out) == await ask(bus, {"what": "needs"})
    assert out.startswith('{\n  "what": "needs"')


async def test_jsonl_prints_one_object_per_entry_then_each_malformed_key_marked(seeded: LocalNats, bus: Bus) -> None:
    code, out, _ = await query(seeded.url, "needs", "--jsonl")
    answer = await ask(bus, {"what": "needs"})
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 10
    marked = {"key": "n1.bad", "reason": "it has 2 tokens, the shape has 4", "malformed": True}
    assert lines == [*answer["entries"], marked]


async def test_who_needs_a_kind_and_name_across_the_mesh(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url, "needs", "--kind", "secret", "--name", "db-password", "--jsonl")
    found = [json.loads(line) for line in out.splitlines()]
    assert code == 10  # n1.bad lies under the listing: its kind cannot be read, so it is kept
    assert [(e["node"], e["module"]) for e in found if "node" in e] == [("n1", "web"), ("n2", "api")]


async def test_state_is_filtered_here_and_json_counts_what_is_kept(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url, "applied", "--state", "pending", "--json", "--compact")
    answer = json.loads(out)
    assert code == 0
    assert [e["key"] for e in answer["entries"]] == ["n2.api", "n3.web"]
    assert answer["total"] == {"entries": 2, "malformed": 0}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["applied", "--kind", "secret"],
            "--kind: does not apply to applied; only to registry, needs",
            id="a kind for applied",
        ),
        pytest.param(
            ["needs", "--state", "pending"],
            "--state: does not apply to needs; only to applied, nodes",
            id="a state for needs",
        ),
    ],
)
async def test_a_filter_that_does_not_apply_is_a_usage_error(seeded: LocalNats, args: list[str], says: str) -> None:
    code, out, err = await query(seeded.url, *args)
    assert (code, out) == (2, "")
    assert err.strip().splitlines()[-1] == f"mesh-provisioner query: {says}"


def test_on_a_terminal_the_table_is_boxed_and_the_malformed_key_marked() -> None:
    answer = MergedAnswer.model_validate(
        {
            "what": "collect",
            "entries": [
                {
                    "key": "n1.c.web",
                    "node": "n1",
                    "collection": "c",
                    "contributor": "web",
                    "revision": 1,
                    "value": {"items": ["[bold]x"]},
                }
            ],
            "malformed": [{"key": "n1.bad", "reason": "it has 2 tokens, the shape has 3"}],
            "pages": 1,
            "total": {"entries": 1, "malformed": 1},
        }
    )
    out = io.StringIO()
    tables.print_answer(answer, Console(file=out, force_terminal=True, color_system=None, width=100))
    text = out.getvalue()
    assert "─" in text  # the header's rule
    assert [line.split() for line in text.splitlines() if "n1" in line] == [
        ["n1", "c", "web", "1"],
        ["malformed", "n1.bad", "it", "has", "2", "tokens,", "the", "shape", "has", "3"],
    ]
    assert text.rstrip().endswith("1 entry, 1 malformed")


def test_what_a_node_wrote_reaches_the_terminal_without_its_escape_sequences() -> None:
    host = "evil\x1b]0;owned\x07\x1b[2J\x9b1m"  # a terminal title, a clear screen, an 8-bit CSI
    answer = MergedAnswer.model_validate(
        {
            "what": "nodes",
            "entries": [
                {
                    "node": "n1",
                    "verdict": "healthy",
                    "because": "renewed",
                    "applied": 0,
                    "pending": 0,
                    "lease": {"state": "held", "renewed_at": "2026-01-01T00:00:00.000Z", "host": host, "pid": 1},
                    "changed_at": None,
                }
            ],
            "malformed": [{"key": "n1.bad", "bucket": "b", "reason": "why\x1b[31m"}],
            "pages": 1,
            "total": {"entries": 1, "malformed": 1},
        }
    )
    out = io.StringIO()
    tables.print_answer(answer, Console(file=out, force_terminal=True, color_system=None, width=200))
    text = out.getvalue()
    assert not any(c in text for c in "\x07\x1b\x9b")  # no colours asked (color_system=None): none of rich's
    assert "held by evil\\x1b]0;owned\\x07\\x1b[2J\\x9b1m pid 1" in text
    assert "why\\x1b[31m" in text


async def test_a_paged_answer_is_one_table(small_payload_server: LocalNats) -> None:
    values = {f"n{i:03}.web.secret.s{i:03}": NEED for i in range(300)}
    async with connect(BusOptions(servers=(small_payload_server.url,), name="test")) as bus:
        await put_many(bus, buckets.NEEDS, values)
        await put(bus, buckets.NEEDS, "n1.bad", b"{}")
        assert (await ask(bus, {"what": "needs"}))["pages"] > 1
    code, out, _ = await query(small_payload_server.url, "needs")
    lines = out.splitlines()
    assert code == 10
    assert [line.split()[0] for line in lines[1:301]] == [f"n{i:03}" for i in range(300)]
    assert lines[-1] == "300 entries, 1 malformed"


async def test_pending_grouped_by_reason_names_how_many_modules_and_which(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url, "applied", "--state", "pending", "--by-reason")
    width = len(UNREACHABLE)
    assert code == 0
    assert out == (
        f"{'REASON':{width}}  MODULES  WHICH\n"
        f"{UNREACHABLE}  2        n2/api, n3/web\n"
        f"{'config db:url: no value':{width}}  1        n2/api\n"
        "\n"
        "2 reasons, given by 2 modules\n"
    )


async def test_by_reason_as_json_lists_each_reason_with_its_modules(seeded: LocalNats) -> None:
    code, out, _ = await query(seeded.url, "applied", "--by-reason", "--json")
    assert code == 0
    assert json.loads(out) == {
        "reasons": [
            {
                "reason": UNREACHABLE,
                "count": 2,
                "modules": [{"node": "n2", "module": "api"}, {"node": "n3", "module": "web"}],
            },
            {"reason": "config db:url: no value", "count": 1, "modules": [{"node": "n2", "module": "api"}]},
        ],
        "malformed": [],
    }


async def test_by_reason_only_applies_to_applied(seeded: LocalNats) -> None:
    code, out, err = await query(seeded.url, "needs", "--by-reason")
    assert (code, out) == (2, "")
    last = err.strip().splitlines()[-1]
    assert last == "mesh-provisioner query: --by-reason: does not apply to needs; only to applied"
