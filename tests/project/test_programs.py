"""docs/programs.md against the programs themselves: every program's commands, their flags, which
print `--json`, and each program's exit codes, read from the argparse parsers and the programs'
tables of codes, must be what the page's tables say; a flag, a command or an exit code added
without its row fails here. And the conventions every program shares: mesh-host's copy of the
exit-code rows and of the version is the shared one's.

The page's tables are written by this module: `python -m tests.project.test_programs` prints them.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import examples.postgres_provisioner.cli
import mesh_dev.cli
import mesh_host.cli
import provisioner.commands.cli
import provisioner_client.cli
from registry import command_line

PAGE = Path(__file__).resolve().parents[2] / "docs" / "programs.md"
BEGIN, END = "<!-- programs: written by python -m tests.project.test_programs -->", "<!-- programs: end -->"


@dataclass(frozen=True)
class Program:
    name: str
    parser: Callable[[], argparse.ArgumentParser]
    exit_codes: tuple[int, ...]


PROGRAMS = (
    Program("mesh-provisioner", provisioner.commands.cli.build_parser, provisioner.commands.cli.EXIT_CODES),
    Program("mesh-provisioner-client", provisioner_client.cli.build_parser, provisioner_client.cli.EXIT_CODES),
    Program("mesh-provisioner-dev", mesh_dev.cli.build_parser, mesh_dev.cli.EXIT_CODES),
    Program(
        "mesh-postgres-provisioner",
        examples.postgres_provisioner.cli.build_parser,
        examples.postgres_provisioner.cli.EXIT_CODES,
    ),
    Program("mesh-host", mesh_host.cli.build_parser, tuple(mesh_host.cli.EXIT_CODES)),
)
# The flags of these groups are listed once, below the tables, not in every command's row.
SHARED_GROUPS = {"NATS connection": "NATS", "logging": "logging"}
_LEFT_OUT = ("-h", "--help", "--version")


def commands(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command `parser` runs, by its words (`rollout status`); a program without commands is ``."""
    subcommands = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subcommands:
        yield path, parser
        return
    for action in subcommands:
        for name, sub in action.choices.items():
            yield from commands(sub, f"{path} {name}".strip())


def flags(parser: argparse.ArgumentParser) -> list[str]:
    """A command's own flags and arguments, in the order of its help; a shared group as one name."""
    said: list[str] = []
    for group in parser._action_groups:
        shared = next((short for title, short in SHARED_GROUPS.items() if (group.title or "").startswith(title)), None)
        if shared is not None and group._group_actions:
            said.append(f"*{shared}*")
            continue
        for action in group._group_actions:
            said.extend(_names(action))
    return said


def _names(action: argparse.Action) -> list[str]:
    if not action.option_strings:
        return [] if isinstance(action, argparse._SubParsersAction) else [str(action.metavar or action.dest)]
    return [name for name in action.option_strings if name.startswith("--") and name not in _LEFT_OUT]


def shared_flags(parser: argparse.ArgumentParser, title: str) -> list[str]:
    return [
        name
        for group in parser._action_groups
        if (group.title or "").startswith(title)
        for action in group._group_actions
        for name in action.option_strings
        if name not in _LEFT_OUT
    ]


def render() -> str:
    """The page's tables, as the programs are."""
    lines = [BEGIN, "", "| program | command | flags | `--json` |", "| --- | --- | --- | --- |"]
    for program in PROGRAMS:
        for command, parser in commands(program.parser()):
            shown = ", ".join(f"`{flag}`" for flag in flags(parser))
            json = "yes" if "--json" in parser._option_string_actions else ""
            lines.append(f"| `{program.name}` | {command or '(none)'} | {shown} | {json} |")
    lines += ["", "| program | exit codes |", "| --- | --- |"]
    for program in PROGRAMS:
        lines.append(f"| `{program.name}` | {', '.join(str(code) for code in program.exit_codes)} |")
    lines += ["", "| code | meaning, in every program |", "| --- | --- |"]
    lines += [f"| {code} | {meaning} |" for code, meaning in command_line.EXIT_CODES.items()]
    query = dict(commands(provisioner.commands.cli.build_parser()))["query"]
    for title, short in SHARED_GROUPS.items():
        lines += ["", f"*{short}*: " + ", ".join(f"`{flag}`" for flag in shared_flags(query, title))]
    return "\n".join([*lines, "", END])


def test_the_page_has_a_row_for_every_command_flag_and_exit_code() -> None:
    text = PAGE.read_text()
    assert BEGIN in text and END in text, f"{PAGE} has no tables between {BEGIN} and {END}"
    written = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert written == render(), "docs/programs.md differs from the programs: python -m tests.project.test_programs"


def test_every_program_s_exit_codes_are_rows_of_the_shared_table() -> None:
    for program in PROGRAMS:
        assert set(program.exit_codes) <= set(command_line.EXIT_CODES), program.name
        assert command_line.EXIT_OK in program.exit_codes and command_line.EXIT_USAGE in program.exit_codes


def test_mesh_host_s_copy_of_the_rows_is_the_shared_table_s() -> None:
    shared = command_line.EXIT_CODES
    assert {code: shared[code] for code in mesh_host.cli.EXIT_CODES} == mesh_host.cli.EXIT_CODES
    copied = [*("EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_HELD", "EXIT_WOULD_CHANGE", "EXIT_LOCAL")]
    copied += ["EXIT_DECLARATION_REFUSED", "EXIT_NOTHING_CARRIED", "EXIT_CLOSED_PIPE"]
    for name in copied:
        assert getattr(mesh_host.cli, name) == getattr(command_line, name), name


def test_mesh_host_s_version_is_the_distribution_s() -> None:
    assert importlib.metadata.version(command_line.DISTRIBUTION) == mesh_host.cli.VERSION


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda program: program.name)
def test_every_program_says_its_version_and_its_exit_codes(
    program: Program, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        program.parser().parse_args(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out == f"{program.name} {command_line.version()}\n"
    shown = program.parser().format_help()
    for code in program.exit_codes:
        assert f"  {code:<4} {command_line.EXIT_CODES[code]}" in shown, (program.name, code)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda program: program.name)
def test_no_program_takes_an_abbreviated_flag(program: Program) -> None:
    for _, parser in commands(program.parser()):
        assert parser.allow_abbrev is False


if __name__ == "__main__":
    print(render())
