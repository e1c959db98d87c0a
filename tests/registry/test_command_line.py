"""The conventions every program's command line shares (`registry.command_line`): durations with
units, one printed timestamp, "did you mean", no abbreviated flag, a flag refused by the command
it was given to; and what a command's start loads (a fresh interpreter: `--help` and `--version`
load neither the seat nor nats-py, a query not the seat)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest

from registry.command_line import (
    EXIT_USAGE,
    Parser,
    duration_text,
    parse_duration,
    pause_collector_for_start_up,
    start_up_done,
    timestamp,
    timestamp_of,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("10m", 600),
        ("1h", 3600),
        ("1d", 86400),
        ("1h30m", 5400),
        ("500ms", 0.5),
        ("2.5s", 2.5),
        ("600", 600),
        ("0.5", 0.5),
        ("PT10M", 600),
        ("P1DT1H", 90000),
    ],
)
def test_a_duration_is_read_with_its_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1x", "h", "10 m", "1h-5m", "-5s", "P", "PT", "1h 30m", "ten"])
def test_anything_else_is_refused_saying_what_is_taken(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration with its unit: 500ms, 90s, 10m, 1h"):
        parse_duration(text)


@pytest.mark.parametrize("seconds", [0.5, 1, 90, 600, 5400, 90000])
def test_a_duration_is_shown_as_it_is_given(seconds: float) -> None:
    assert parse_duration(duration_text(timedelta(seconds=seconds))) == timedelta(seconds=seconds)
    assert duration_text(timedelta(minutes=10)) == "10m" and duration_text(timedelta(seconds=5400)) == "1h30m"


def test_a_time_is_printed_in_rfc_3339_utc_with_z() -> None:
    moment = datetime(2026, 12, 5, 14, 5, 51, 250000, tzinfo=timezone(timedelta(hours=1)))
    assert timestamp(moment) == "2026-12-05T13:05:51Z"
    assert timestamp(moment, milliseconds=True) == "2026-12-05T13:05:51.250Z"
    assert timestamp(datetime(2026, 1, 1, 0, 0)) == "2026-01-01T00:00:00Z"  # naive: taken as UTC
    assert timestamp_of("2026-01-01T12:00:00+00:00") == "2026-01-01T12:00:00Z"
    assert timestamp_of(datetime(2026, 1, 1, tzinfo=UTC).isoformat(timespec="seconds")) == "2026-01-01T00:00:00Z"
    assert timestamp_of("not a time") == "not a time"


def _parser() -> Parser:
    parser = Parser(prog="tool", version=True)
    commands = parser.add_subparsers(dest="command", required=True)
    query = commands.add_parser("query")
    query.add_argument("--node")
    query.add_argument("--json", action="store_true")
    return parser


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as ended:
        _parser().parse_args(argv)
    assert ended.value.code == EXIT_USAGE
    return capsys.readouterr().err


def test_an_abbreviated_flag_is_refused_with_the_one_meant(capsys: pytest.CaptureFixture[str]) -> None:
    said = _refused(["query", "--nod", "n1"], capsys)
    assert said.endswith("tool query: error: unrecognized arguments: --nod n1; did you mean --node?\n")
    assert said.startswith("usage: tool query")


def test_an_unknown_flag_is_refused_by_its_command_with_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    said = _refused(["query", "--jsn"], capsys)
    assert "usage: tool query" in said and said.endswith("did you mean --json?\n")


def test_an_unknown_command_says_the_one_meant(capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(["qurey"], capsys).endswith("; did you mean query?\n")


def test_a_command_s_flag_before_it_is_said_to_go_after_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(["--json", "query"], capsys).endswith("--json goes after the command (tool COMMAND --json)\n")


def test_nothing_close_is_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(["query", "--zzzzzz"], capsys).endswith("unrecognized arguments: --zzzzzz\n")


def _loaded(code: str) -> set[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    return {name.split(".")[0] if not name.startswith("provisioner.") else name for name in json.loads(done.stderr)}


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("provisioner.commands.cli", ["--help"]),
        ("provisioner.commands.cli", ["--version"]),
        ("provisioner_client.cli", ["--help"]),
        ("provisioner_client.cli", ["--version"]),
        ("mesh_dev.cli", ["--version"]),
        ("examples.postgres_provisioner.cli", ["--version"]),
    ],
)
def test_help_and_version_load_neither_the_seat_nor_nats(module: str, argv: list[str]) -> None:
    quietly = "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):"
    loaded = _loaded(f"import contextlib, io\nfrom {module} import main\n{quietly}\n    main({argv!r})")
    assert not loaded & {"nats", "asyncio", "provisioner.seat", "provisioner.verb", "rich"}


def test_a_query_s_start_loads_no_seat() -> None:
    run = "from provisioner.commands import cli\ncli.build_parser(only='query').parse_args(['query'])"
    assert not _loaded(run) & {"provisioner.seat", "provisioner.verb", "provisioner.metrics"}


def test_a_query_up_to_its_connect_builds_neither_the_answer_s_pages_nor_the_server_s_settings() -> None:
    """What a query does before its request is its start-up: the pages are read after it, the
    server's settings (with its metrics endpoint) are `serve`'s alone, the TOML parser is a settings
    file's and "did you mean" an unknown name's."""
    script = (
        "import contextlib, io, json, sys\n"
        "from provisioner.commands.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    main(['query', '--nats-url', 'nats://127.0.0.1:1', '--wait', '1s'])\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert "registry.wire.bus" in loaded  # it went as far as connecting
    unused = {"registry.contract.pages", "provisioner.seat.settings", "registry.runtime.metrics_endpoint"}
    assert not loaded & (unused | {"tomllib", "difflib"})


def test_the_collector_is_paused_for_a_programs_start_up_only_and_its_heap_frozen_after() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        pause_collector_for_start_up(["query"])  # a caller's own arguments (a test): left as it is
        assert gc.isenabled()
        start_up_done()
        assert gc.get_freeze_count() == frozen
        pause_collector_for_start_up(None)  # the program's own process
        assert not gc.isenabled()
        start_up_done()
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen
        start_up_done()  # once only
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_a_one_shot_query_collects_nothing_before_its_logging_is_set_up() -> None:
    script = (
        "import gc, sys\n"
        "from registry import runtime\n"
        "from provisioner.commands import cli\n"
        "configure = runtime.configure_logging\n"
        "counts = []\n"
        "gc.callbacks.append(lambda phase, info: counts.append(phase))\n"
        "def configured(**kwargs):\n"
        "    configure(**kwargs)\n"
        "    print(counts.count('start'), gc.isenabled(), flush=True)\n"
        "    sys.exit(0)\n"
        "runtime.configure_logging = configured\n"
        "sys.argv = ['mesh-provisioner', 'query', '--nats-url', 'nats://127.0.0.1:1']\n"
        "cli.main()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.split() == ["0", "False"]  # configured, the start-up made no collection
