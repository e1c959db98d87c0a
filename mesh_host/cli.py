"""`mesh-host`: the one program installed by hand on a machine; it applies a declaration and owns
exactly its footprint. It decides nothing and connects to nothing.

    mesh-host profile | inventory | apply FILE | reconcile | bundle | owned  [--json] [--state DIR]
                                                                           [--root DIR] [--dry-run]

Every option comes after the command, as in every program of this repository.

Exit codes are in EXIT_CODES (and --help): the shared table's rows, the same in every program.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import pwd
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NoReturn

from mesh_host.errors import DeclarationRefused, MeshHostError, StateError, StateHeld

if TYPE_CHECKING:
    from mesh_host.applying.apply import ApplyFailed
    from mesh_host.applying.roots import Root
    from mesh_host.declaration import Declaration

VERSION = "0.1.0"  # the distribution's (a one-file build has no metadata): checked by tests/project/test_programs.py

# The shared exit-code table's rows this program uses, copied from registry.command_line (mesh_host
# imports nothing of the rest) and checked against it by tests/project/test_programs.py: a cause has the
# same number in every program.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_HELD = 6
EXIT_WOULD_CHANGE = 8
EXIT_LOCAL = 12
EXIT_DECLARATION_REFUSED = 13
EXIT_NOTHING_CARRIED = 14
EXIT_CLOSED_PIPE = 141
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_FAILED: "failed: a runtime failure no other code names (said on stderr)",
    EXIT_USAGE: "usage: a command, flag, variable, settings or input file refused; nothing was done",
    EXIT_HELD: "held elsewhere: another process holds what this one needs (a node's lease, mesh-host's state)",
    EXIT_WOULD_CHANGE: "would change: a check found what to change (printed)",
    EXIT_LOCAL: "local failure: a file or folder of this machine cannot be read or written (named)",
    EXIT_DECLARATION_REFUSED: "declaration refused whole: nothing was changed",
    EXIT_NOTHING_CARRIED: "nothing carried: this mesh-host carries no declaration, or its bundle is broken",
    EXIT_CLOSED_PIPE: "stdout closed: its reader went away (| head), ended quietly",
}
# What each code means for mesh-host in particular.
_IN_PARTICULAR = {
    EXIT_OK: "the machine matches the declaration (--dry-run: it already does); other commands: printed",
    EXIT_FAILED: "a step failed (--dry-run: would fail): no later step ran; what was done before it is "
    "printed and recorded in the footprint",
    EXIT_USAGE: "unknown command or option, a --root that is not a directory",
    EXIT_HELD: "another mesh-host holds the footprint in --state",
    EXIT_WOULD_CHANGE: "--dry-run: the machine does not match; what would change is printed",
    EXIT_LOCAL: "the footprint in --state cannot be read or written",
    EXIT_DECLARATION_REFUSED: "outside the vocabulary, not JSON, too large, unreadable; every problem is "
    "named where it is (resources[3].type: ...)",
    EXIT_NOTHING_CARRIED: "reconcile: a default build, or a broken bundle",
    EXIT_CLOSED_PIPE: "mesh-host owned | head -1",
}
EXIT_CODES_HELP = "exit codes (the same cause has the same number in every mesh-provisioner program):\n" + "\n".join(
    f"  {code:<4} {meaning}\n"
    + textwrap.fill(_IN_PARTICULAR[code], 100, initial_indent=" " * 7, subsequent_indent=" " * 7)
    for code, meaning in EXIT_CODES.items()
)
DESCRIPTION = """\
The one program installed by hand on a machine: it applies a declaration (directories, files,
archives, services) and owns exactly its footprint. It decides nothing and connects to nothing."""
EPILOG = f"""\
examples:
  mesh-host profile
  mesh-host apply node.json --dry-run
  mesh-host apply node.json --root /tmp/image --state /tmp/image-state
  mesh-host reconcile && mesh-host owned

--root DIR prefixes every path with DIR: the declaration's, the default --state and the moved-out
folder (~/.local/state/mesh-moved); links among a path's folders are followed inside DIR. It is for
tests and image building: services are skipped under it (they need the real machine). An explicit
--state is taken as given. `profile` always describes the running machine.

a declaration (JSON; resources applied in the order stated; anything else refuses it whole):
  {{"declaration": 1, "resources": [
    {{"id": "app-etc", "type": "directory", "path": "/etc/app", "mode": "0755", "owner": "root:root",
     "unknown": "module", "module": "app", "knows": ["/etc/app/local.toml"]}},
    {{"id": "app-conf", "type": "file", "path": "/etc/app/app.toml", "content": "port = 1\\n", "mode": "0640"}},
    {{"id": "tool", "type": "archive", "path": "/opt/tool", "source": "/var/lib/mesh/tool.tar.gz",
     "sha256": "<64 hex digits>", "mode": "0755"}},
    {{"id": "app", "type": "service", "unit": "app.service", "state": "running", "enabled": true}}]}}
  id (optional): the resource's stable name in messages and the footprint; a path changed under
  the same id moves it. owner ("user" or "user:group") is optional: left out, not maintained.
  unknown (optional), what a directory or archive does with what the host did not write: program
  (the program's, nothing declared inside), module (kept; owned lists it as the module's),
  move-out (moved to ~/.local/state/mesh-moved/<module>/, listed in moved.jsonl there); left out,
  it is left alone. knows: kept whatever the policy. An archive (tar: gzip, xz, zstd or none) is
  checked against its sha256 and every member before any change, then unpacked; its members are
  put back when they drift. enabled (optional): left out, the unit's enablement is left as it is.
  What the host created and no longer declares it removes (a directory once empty); what it found
  there it never removes.

{EXIT_CODES_HELP}"""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_CLOSED_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from mesh_host.applying.roots import Root  # noqa: PLC0415 (each command loads what it uses, after parsing)
    from mesh_host.bundle import BundleBroken  # noqa: PLC0415

    root = Root(Path(args.root).absolute()) if args.root else Root()
    if not root.base.is_dir():
        parser.error(f"--root {args.root}: not a directory")
    command: Callable[[argparse.Namespace, Root], int] = args.run
    try:
        return command(args, root)
    except DeclarationRefused as err:
        return _fail(
            args,
            EXIT_DECLARATION_REFUSED,
            str(err),
            {"refused": {"source": err.source, "problems": list(err.problems)}},
        )
    except StateError as err:
        code = EXIT_HELD if isinstance(err, StateHeld) else EXIT_LOCAL
        return _fail(args, code, str(err), {"state": {"path": err.path, "why": err.why}})
    except BundleBroken as err:
        return _fail(args, EXIT_NOTHING_CARRIED, str(err), {"carried": None, "broken": str(err)})
    except MeshHostError as err:
        return _fail(args, EXIT_FAILED, str(err), {})


class Parser(argparse.ArgumentParser):
    """registry.command_line.Parser's conventions, in the copy this standalone program keeps: no
    abbreviated option, an unknown one refused by the command it was given to, "did you mean"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        if rest:
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        return parsed, rest

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{self._did_you_mean(message)}\n")

    def _did_you_mean(self, message: str) -> str:
        choice = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if choice is not None:
            return _close(choice[1], re.findall(r"'([^']*)'", choice[2]))
        unknown = re.search(r"unrecognized arguments: (.*)$", message)
        if unknown is not None:
            flags = [word.split("=", 1)[0] for word in unknown[1].split() if word.startswith("--")]
            options = [name for name in self._option_string_actions if name.startswith("--")]
            later = [flag for flag in flags[:1] if flag in self._commands_options()]
            if later:
                return f"; {later[0]} goes after the command ({self.prog} COMMAND {later[0]})"
            return "".join(_close(flag, options) for flag in flags[:1])
        return ""

    def _commands_options(self) -> set[str]:
        """The options of this parser's commands: given before the command, they are said to go after it."""
        commands = [action for action in self._actions if isinstance(action, argparse._SubParsersAction)]
        return {name for action in commands for sub in action.choices.values() for name in sub._option_string_actions}


def _close(given: str, known: list[str]) -> str:
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mesh-host", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"mesh-host {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, run, said in (
        ("profile", _profile, "what this machine can be asked to do"),
        ("inventory", _inventory, "what this machine is, and what it holds"),
        ("apply", _apply, "make this machine match a declaration from a file"),
        ("reconcile", _reconcile, "make this machine match the declaration this host carries"),
        ("bundle", _bundle, "show what this host carries"),
        ("owned", _owned, "what this host has applied and still owns"),
    ):
        sub = commands.add_parser(name, help=said, description=said, epilog=EPILOG)
        sub.set_defaults(run=run)
        if name == "apply":
            sub.add_argument("file", metavar="FILE", help="the declaration (JSON); - reads standard input")
        if name in ("apply", "reconcile"):
            sub.add_argument("--dry-run", action="store_true", help="read and check the declaration, change nothing")
        _add_common(sub)
    return parser


def _add_common(parser: argparse.ArgumentParser) -> None:
    """The options every command takes, after it."""
    parser.add_argument("--json", action="store_true", help="machine-readable")
    parser.add_argument(
        "--state",
        metavar="DIR",
        help="where this node keeps what it knows, its footprint (default: /var/lib/mesh-host as root, "
        "else ~/.local/state/mesh-host; inside --root when given)",
    )
    parser.add_argument(
        "--root",
        metavar="DIR",
        help="prefix every path with DIR, for tests and image building (services are skipped under it)",
    )


def _profile(args: argparse.Namespace, root: Root) -> int:
    from mesh_host.describing.profile import detect  # noqa: PLC0415

    profile = detect()
    _print(args, profile.render().rstrip("\n"), profile.as_json())
    return EXIT_OK


def _inventory(args: argparse.Namespace, root: Root) -> int:
    from mesh_host.describing.inventory import take  # noqa: PLC0415

    inventory = take(root=root.base)
    _print(args, inventory.render().rstrip("\n"), inventory.as_json())
    return EXIT_OK


def _apply(args: argparse.Namespace, root: Root) -> int:
    from mesh_host.declaration import parse_declaration, read_declaration, read_text  # noqa: PLC0415

    if args.file == "-":
        declaration = parse_declaration(read_text(sys.stdin.buffer, "standard input"), "standard input")
    else:
        declaration = read_declaration(Path(args.file))
    return _applying(args, root, declaration)


def _reconcile(args: argparse.Namespace, root: Root) -> int:
    from mesh_host.bundle import carried  # noqa: PLC0415
    from mesh_host.declaration import parse_declaration  # noqa: PLC0415

    bundle = carried()
    if bundle is None:
        why = (
            "this host carries no declaration (a default build): nothing to reconcile. Build one that does with "
            "python -m mesh_host.build --bundle FILE --out dist/mesh-host, or use mesh-host apply FILE"
        )
        return _fail(args, EXIT_NOTHING_CARRIED, why, {"carried": None})
    return _applying(args, root, parse_declaration(bundle.text, f"the declaration carried from {bundle.source}"))


def _applying(args: argparse.Namespace, root: Root, declaration: Declaration) -> int:
    from mesh_host.applying.apply import ApplyFailed, Host, apply  # noqa: PLC0415

    host = Host(root, _state(args, root), _home())
    try:
        report = apply(declaration, host, dry_run=args.dry_run)
    except ApplyFailed as failed:
        done = failed.done
        count = len(done.changes) or "nothing"
        text = "\n".join(
            [*done.lines(), f"before it, would change: {count}" if args.dry_run else f"done before it: {count}"]
        )
        _print(args, text, done.as_json() | {"ok": False, "failed": _failure(failed)})
        verb = "would fail" if args.dry_run else "failed"
        _say(f"{failed.where} {failed.subject} {verb}: {failed.why}; no later step ran")
        return EXIT_FAILED
    _print(args, report.render(), report.as_json() | {"ok": True})
    return EXIT_WOULD_CHANGE if args.dry_run and report.changes else EXIT_OK


def _failure(failed: ApplyFailed) -> dict[str, str]:
    return {"where": failed.where, "subject": failed.subject, "why": failed.why}


def _bundle(args: argparse.Namespace, root: Root) -> int:
    from mesh_host.bundle import carried  # noqa: PLC0415
    from mesh_host.declaration import parse_declaration  # noqa: PLC0415

    bundle = carried()
    if bundle is None:
        _print(args, "this host carries no declaration: a default build (reconcile refuses)", {"carried": None})
        return EXIT_OK
    heading = f"carries the declaration from {bundle.source} (sha256 {bundle.sha256})"
    said = {"source": bundle.source, "sha256": bundle.sha256, "text": bundle.text}
    _print(args, f"{heading}\n\n{bundle.text.rstrip()}", {"carried": said})
    parse_declaration(bundle.text, f"the declaration carried from {bundle.source}")  # refused: exit 13, saying why
    return EXIT_OK


def _owned(args: argparse.Namespace, root: Root) -> int:
    from mesh_host.applying.owned import owned  # noqa: PLC0415

    holding = owned(root, _state(args, root))
    _print(args, holding.render(), holding.as_json())
    return EXIT_OK


def _state(args: argparse.Namespace, root: Root) -> Path:
    from mesh_host.applying.roots import default_state  # noqa: PLC0415

    if args.state:
        return Path(args.state)
    return root.folder(default_state(_home(), privileged=os.geteuid() == 0))


def _home() -> PurePosixPath:
    """The home of the user the host runs as (its mesh-moved folder), from the user database first."""
    try:
        return PurePosixPath(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        return PurePosixPath(os.environ.get("HOME") or "/")


def _print(args: argparse.Namespace, text: str, data: dict[str, object]) -> None:
    print(json.dumps(data, indent=2) if args.json else text, flush=True)


def _say(message: str) -> None:
    print(f"mesh-host: {message}", file=sys.stderr, flush=True)


def _fail(args: argparse.Namespace, code: int, message: str, data: dict[str, object]) -> int:
    if args.json:
        _print(args, "", {"ok": False, "error": message} | data)
    _say(message)
    return code


if __name__ == "__main__":
    sys.exit(main())
