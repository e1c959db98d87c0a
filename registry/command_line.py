"""What every program's command line shares, so that one convention holds across all five:
`--version`; one table of exit codes, where a cause has the same number in every program (each
program's `--help` shows the rows it uses); a parser that takes no abbreviated flag and says "did
you mean" for an unknown flag or command; durations with units (`90s`, `10m`, `1h`); and one
printed timestamp format (RFC 3339, UTC, `Z`); a closed pipe ending a command quietly; and the
garbage collector paused while a program starts.

It imports nothing but the standard library's lightest modules: `--help` and `--version` stand on
it before a program loads anything else. `mesh_host` stands alone and keeps its own copy of the
rows it uses (`mesh_host.cli`), checked against these by a test.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import re
import select
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, ParamSpec

from registry.errors import RegistryError, sole_exception

DISTRIBUTION = "mesh-provisioner"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4
EXIT_VERB_ERROR = 5
EXIT_HELD = 6
EXIT_PENDING = 7
EXIT_WOULD_CHANGE = 8
EXIT_UNHEALTHY = 9
EXIT_MALFORMED = 10
EXIT_ROLLOUT_HELD = 11
EXIT_LOCAL = 12
EXIT_DECLARATION_REFUSED = 13
EXIT_NOTHING_CARRIED = 14
EXIT_CLOSED_PIPE = 141

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_FAILED: "failed: a runtime failure no other code names (said on stderr)",
    EXIT_USAGE: "usage: a command, flag, variable, settings or input file refused; nothing was done",
    EXIT_UNREACHABLE: "unreachable: no NATS server answered (mesh-postgres-provisioner: PostgreSQL)",
    EXIT_REFUSED: "refused by the bus: credentials, a permission, a full bucket, no answer, a connection closed",
    EXIT_VERB_ERROR: "verb error: the verb answered with an error",
    EXIT_HELD: "held elsewhere: another process holds what this one needs (a node's lease, mesh-host's state)",
    EXIT_PENDING: "pending: work is left (a module waits for a value, an env file drifted, a change action failed)",
    EXIT_WOULD_CHANGE: "would change: a check found what to change (printed)",
    EXIT_UNHEALTHY: "unhealthy: a node shown is stale, gone or over quota",
    EXIT_MALFORMED: "malformed: the answer holds malformed keys (listed and marked)",
    EXIT_ROLLOUT_HELD: "rollout held: a rollout shown is held, or the rollout paused is aborted",
    EXIT_LOCAL: "local failure: a file or folder of this machine cannot be read or written (named)",
    EXIT_DECLARATION_REFUSED: "declaration refused whole: nothing was changed",
    EXIT_NOTHING_CARRIED: "nothing carried: this mesh-host carries no declaration, or its bundle is broken",
    EXIT_CLOSED_PIPE: "stdout closed: its reader went away (| head), ended quietly",
}


_start_up_paused = False


def pause_collector_for_start_up(argv: Sequence[str] | None) -> None:
    """Pauses Python's cyclic garbage collector while the program imports and reads its settings,
    until `start_up_done`: what a start-up makes lives as long as the program, and each collection
    meanwhile scanned it all again (about 10 ms of a one-shot query's start-up, `python -m
    bench.startup`). Only when `argv` is None, the program's own process: a caller of `main` with
    arguments of its own (a test) keeps its collector as it is."""
    global _start_up_paused  # noqa: PLW0603 (the one process-wide state the collector is)
    if argv is None and gc.isenabled():
        gc.disable()
        _start_up_paused = True


def start_up_done() -> None:
    """Leaves what the start-up made out of every later collection and resumes the collector, if
    `pause_collector_for_start_up` paused it."""
    global _start_up_paused  # noqa: PLW0603
    if _start_up_paused:
        _start_up_paused = False
        gc.freeze()
        gc.enable()


def exit_code_of(err: RegistryError) -> int:
    """The exit code of a shared library's error, as every program answers it."""
    from registry import errors  # noqa: PLC0415 (its classes, once a command failed)

    if isinstance(err, errors.SettingsError | errors.CatalogueError):
        return EXIT_USAGE
    if isinstance(err, errors.Unreachable):
        return EXIT_UNREACHABLE
    if isinstance(err, errors.ServiceError):
        return EXIT_VERB_ERROR
    if isinstance(err, errors.BusError):
        return EXIT_REFUSED
    return EXIT_FAILED


def exit_codes_help(codes: Iterable[int]) -> str:
    """The `exit codes:` section of a program's `--help`: the rows of `codes`, as in every program."""
    rows = [f"  {code:<4} {EXIT_CODES[code]}" for code in sorted(set(codes))]
    return "exit codes (the same cause has the same number in every mesh-provisioner program):\n" + "\n".join(rows)


# -- version -----------------------------------------------------------------------------------


def version() -> str:
    """The installed distribution's version; looked up only when asked (importlib.metadata is slow)."""
    from importlib.metadata import PackageNotFoundError  # noqa: PLC0415
    from importlib.metadata import version as installed  # noqa: PLC0415

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


def exit_if_version(prog: str, argv: Sequence[str]) -> None:
    """`--version` answered before a parser is built: a program whose one parser is made of settings
    models (loading pydantic) says its version without loading them."""
    words = list(argv)
    if "--version" in words[: words.index("--") if "--" in words else None]:
        print(f"{prog} {version()}")
        sys.exit(EXIT_OK)


class _Version(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(f"{parser.prog.split()[0]} {version()}")
        parser.exit()


# -- the parser --------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """argparse's parser as every program uses it: no abbreviated flag (`--nod` is not `--node`),
    `--version`, an unknown flag refused by the (sub)command it was given to, with its usage, and
    "did you mean" for an unknown flag or command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        with_version = kwargs.pop("version", False)
        super().__init__(*args, **kwargs)
        if with_version:
            self.add_argument("--version", action=_Version)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        if rest:
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        return parsed, rest

    def error(self, message: str) -> NoReturn:
        hint = self._did_you_mean(message)
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{hint}\n")

    def _did_you_mean(self, message: str) -> str:
        choice = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if choice is not None:
            return did_you_mean(choice[1], re.findall(r"'([^']*)'", choice[2]))
        unknown = re.search(r"unrecognized arguments: (.*)$", message)
        if unknown is not None:
            flags = [word.split("=", 1)[0] for word in unknown[1].split() if word.startswith("--")]
            options = [name for name in self._option_string_actions if name.startswith("--")]
            later = [flag for flag in flags[:1] if flag in self._commands_options()]
            if later:
                return f"; {later[0]} goes after the command ({self.prog} COMMAND {later[0]})"
            return "".join(did_you_mean(flag, options) for flag in flags[:1])
        return ""

    def _commands_options(self) -> set[str]:
        """The options of this parser's commands: given before the command, they are said to go after it."""
        commands = [action for action in self._actions if isinstance(action, argparse._SubParsersAction)]
        return {name for action in commands for sub in action.choices.values() for name in sub._option_string_actions}


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """`; did you mean X?` when `given` is close to one of `known`, else nothing."""
    import difflib  # noqa: PLC0415 (once a name is not known: never on a command's way to its work)

    close = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


# -- durations ---------------------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
DURATION_HELP = "a duration with its unit: 500ms, 90s, 10m, 1h, 1d, or combined (1h30m)"


def parse_duration(text: str) -> timedelta:
    """`90s`, `10m`, `1h`, `1h30m`, `500ms`; a bare number is seconds, and ISO 8601 (`PT10M`) is
    still read for settings files written before units. `ValueError` saying what is taken otherwise."""
    said = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", said):
        return timedelta(seconds=float(said))
    if said.upper().startswith("P"):
        return _iso8601(said)
    parts = _PART.findall(said)
    if not parts or "".join(number + unit for number, unit in parts) != said:
        raise ValueError(f"not a duration: expected {DURATION_HELP}")
    return timedelta(seconds=sum(float(number) * _UNITS[unit] for number, unit in parts))


_ISO = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def _iso8601(text: str) -> timedelta:
    found = _ISO.fullmatch(text)
    if found is None or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        raise ValueError(f"not a duration: expected {DURATION_HELP}")
    days, hours, minutes, seconds = (float(part) if part else 0.0 for part in found.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def duration_text(span: timedelta) -> str:
    """`span` as a duration is given: `90s`, `10m`, `1h30m`, `500ms`."""
    milliseconds = round(span.total_seconds() * 1000)
    if milliseconds % 1000:
        return f"{milliseconds}ms"
    seconds, said = milliseconds // 1000, ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            said += f"{seconds // size}{unit}"
            seconds %= size
    return said or "0s"


# -- timestamps --------------------------------------------------------------------------------


def timestamp(moment: datetime, *, milliseconds: bool = False) -> str:
    """`moment` as every program prints one: RFC 3339, in UTC, with `Z` (`2026-12-05T13:05:51Z`).
    A naive `moment` is taken as UTC."""
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if milliseconds:
        return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- a closed pipe -------------------------------------------------------------------------------
# A reader that goes away ends a command quietly, as it ends a Unix tool.
#
# `mesh-provisioner query needs | head -1`: once `head` has its line it closes the pipe, and the
# next write to stdout fails. A Unix tool is killed by SIGPIPE there and says nothing; Python
# ignores SIGPIPE (a closed socket must not kill a daemon), so the write raises `BrokenPipeError`,
# a traceback follows, and at exit Python flushes stdout once more and prints "Exception ignored
# ... BrokenPipeError". `quiet_on_closed_pipe` wraps every console script's `main`: stdout is
# flushed while the command can still tell, and a closed pipe ends it with nothing printed and the
# exit status a shell reports for a tool killed by SIGPIPE (141), stdout pointed at /dev/null so
# that nothing is left to flush.

P = ParamSpec("P")


def quiet_on_closed_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """`main`, ending with `EXIT_CLOSED_PIPE` and nothing printed when its stdout's reader has gone
    (or its stderr's, shared: `2>&1 | head`). A `BrokenPipeError` from anything else is raised."""

    @functools.wraps(main)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:  # on SystemExit too: argparse's --help exits with the help still buffered
                sys.stdout.flush()
        except (BrokenPipeError, BaseExceptionGroup) as err:
            if not _is_closed_pipe(err) or not _silence_closed_outputs():
                raise
            return EXIT_CLOSED_PIPE

    return guarded


def _is_closed_pipe(err: BaseException) -> bool:
    found = sole_exception(err) if isinstance(err, BaseExceptionGroup) else err
    return isinstance(found, BrokenPipeError)


def _silence_closed_outputs() -> bool:
    """Points each of stdout and stderr whose reader has gone at /dev/null; whether one had."""
    closed = [stream for stream in (sys.stdout, sys.stderr) if _reader_gone(stream)]
    if not closed:
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in closed:
            os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)
    return True


def _reader_gone(stream: object) -> bool:
    """Whether `stream` is a pipe or socket whose reading end is closed (poll says POLLERR)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):  # replaced by a test's buffer, or closed
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def timestamp_of(text: str) -> str:
    """A time as stored (ISO 8601 with an offset, `2026-01-01T12:00:00+00:00`) as every program
    prints one; `text` as it is when it is no time with an offset."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return timestamp(moment) if moment.tzinfo is not None else text
