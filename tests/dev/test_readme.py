"""The README's set-up and every command the documentation shows, run as printed on a fresh clone.

The repository is cloned into a temporary folder (with this work tree's tracked and new files over
the clone, so what is tested is what would be committed), `./scripts/run` is started there as the
README says, from a shell whose PATH has no `.venv`, and each command of the second-shell blocks
(in the README or a page of `docs/`) is run by `bash` in a clean environment (a "second shell":
only HOME, PATH, LANG and TERM), one process per command after the block's `source` lines. Where
a document shows what a command prints (a ```text block right after it), the output is compared
with it: `...` alone on a line stands for any lines, `...` in a line for any text. Every other
command must exit 0.

The clone's `.venv` reuses this one's packages (a `.pth` line naming its site-packages, and its
nats-server binary) so `./scripts/run` installs only the project itself, in seconds, and never
touches this virtualenv. Every shell block of the README and of `docs/*.md` is either run here or
listed in NOT_RUNNABLE with the reason: a block added to either without it fails
`test_every_shell_block_of_the_documentation_is_run_or_said_why_not`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("*.md")))
SHELL_LANGUAGES = {"sh", "shell", "bash", "console"}

SET_UP = "./scripts/run"
SECOND_SHELL = (
    "source .venv/bin/activate",
    "mesh-provisioner query needs --node node-1",
    "mesh-provisioner query applied --module app",
    "mesh-provisioner-client status --config state/demo/client.toml",
    "echo 'EDITED=by hand' >> state/demo/env/app.env && sleep 5",
    "mesh-provisioner query",
)
AFTER_STOP = ("./scripts/run --reset",)
NOT_RUNNABLE = {
    "./scripts/test": "the whole suite, of which this test is a part",
    "mesh-provisioner rollout status": "a real mesh's rollouts, as its operator; "
    "tests/provisioner/test_rollout_command.py runs each of these on an operator's own account, static and JWT",
    "mesh-provisioner-client reconcile --node n1 --manifests /etc/mesh-provisioner/modules --materialize "
    "/run/mesh-provisioner/env": "a real node's folders, written as root; the demo runs the same client "
    "(tests/deploy/test_units.py checks these paths against the defaults and the units)",
    "mesh-provisioner grants --out /etc/nats/mesh --keys /srv/secrets/mesh-keys \\": "writes /etc/nats and "
    "/srv/secrets; tests/deploy/test_deploy.py runs the same command into a temporary folder",
    "mesh-provisioner grants --mesh /etc/mesh-provisioner/mesh.toml --check \\": "a real mesh's folders and "
    "resolver; tests/registry/test_grants_interface.py runs --check and --push on temporary ones",
    "pip install '.[build]'": "builds the host file for a real node (PyInstaller, tens of seconds); "
    "tests/mesh_host/test_single_file.py builds one with node.json and runs it in an empty folder",
    "python3 -m venv /opt/mesh-provisioner && /opt/mesh-provisioner/bin/pip install .": "installs on a real "
    "node as root; tests/mesh_host/test_node_from_host.py lays the node down under a temporary root",
    "mesh-provisioner serve --site home --sites-file OUT/sites/sites.json --grants-file OUT/grants.json \\": "a "
    "site's server and its seeds; tests/sites/test_site_seat.py runs the seat at a site on a generated configuration",
    "mesh-provisioner top": "runs until Ctrl-C; tests/provisioner/test_nodes.py runs it until SIGINT and --once",
    ".venv/bin/python -m bench": "a benchmark of minutes; its figures are measured on demand, not asserted by tests",
    ".venv/bin/python -m bench --scale --keys 1000000": "a benchmark of minutes (a million keys filled first)",
    ".venv/bin/python -m bench --fill": "a benchmark of minutes; tests/bench runs the fill and the soak for seconds",
}
READY_TIMEOUT = 300  # a first ./scripts/run builds the project's editable install
COMMAND_TIMEOUT = 120  # seconds a second-shell command may take


@dataclass(frozen=True)
class Block:
    """A code block of a document: indented (language "", a shell block) or fenced."""

    line: int
    language: str
    lines: tuple[str, ...]
    document: str = "README.md"

    @property
    def is_shell(self) -> bool:
        return self.language in SHELL_LANGUAGES or self.language == ""

    @property
    def first(self) -> str:
        """Its first command, without a comment, spaces collapsed: how the lists here name it."""
        return " ".join(self.lines[0].split("#", 1)[0].split())

    def commands(self) -> Iterator[str]:
        """Each command, continuation lines joined."""
        pending = ""
        for line in self.lines:
            if not line.strip():
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            yield pending + line
            pending = ""


def documented_blocks() -> list[Block]:
    """Every code block of the README, then of each page of `docs/`, in that order."""
    return [block for path in DOCUMENTS for block in readme_blocks(path.read_text(), str(path.relative_to(ROOT)))]


def readme_blocks(text: str, document: str = "README.md") -> list[Block]:
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            blocks.append(Block(i + 1, line[3:].strip() or "plain", tuple(lines[i + 1 : end]), document))
            i = end + 1
        elif line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or _blank_inside(lines, end)):
                end += 1
            blocks.append(Block(i + 1, "", tuple(x[4:] for x in lines[i:end]), document))
            i = end
        else:
            i += 1
    return blocks


def _blank_inside(lines: list[str], at: int) -> bool:
    return not lines[at].strip() and at + 1 < len(lines) and lines[at + 1].startswith("    ")


def shown_output(blocks: list[Block], block: Block) -> Block | None:
    """The ```text block right after `block` in its document, if any: what it says its last command prints."""
    after = blocks[blocks.index(block) + 1 :]
    return after[0] if after and after[0].language == "text" and after[0].document == block.document else None


def excerpt(expected: tuple[str, ...]) -> re.Pattern[str]:
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*".join(re.escape(piece) for piece in line.rstrip().split("...")) + r"[ \t]*\n")
    return re.compile("^" + "".join(parts), re.MULTILINE)


def printed_as_said(expected: tuple[str, ...], printed: str) -> bool:
    return excerpt(expected).search(printed if printed.endswith("\n") else printed + "\n") is not None


def test_every_shell_block_of_the_documentation_is_run_or_said_why_not() -> None:
    firsts = [block.first for block in documented_blocks() if block.is_shell]
    covered = {SET_UP, *SECOND_SHELL, *AFTER_STOP, *NOT_RUNNABLE}
    assert sorted(set(firsts)) == sorted(covered)
    assert len(firsts) == len(set(firsts)), "two shell blocks begin alike: tell them apart"


def test_the_excerpt_matcher_reads_ellipses_as_the_readme_means_them() -> None:
    printed = "a header\nNODE  KIND  \nn1    x\nn2    y\nn3    z\nthe end\n"
    assert printed_as_said(("NODE  KIND", "...", "n3    z"), printed)
    assert printed_as_said(("n... x",), printed)
    assert not printed_as_said(("NODE  KIND", "n3    z"), printed)
    assert not printed_as_said(("n4 ...",), printed)


# --- the clone, its first shell, its second shell -----------------------------------------------------


def fresh_clone(where: Path) -> Path:
    """A clone of this repository holding this work tree's tracked and new (not ignored) files."""
    clone = where / "clone"
    if not (ROOT / ".git").exists() or not shutil.which("git"):
        pytest.skip("not a git work tree, or no git: there is nothing to clone")
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(clone)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    return clone


def reuse_packages(clone: Path) -> None:
    """The clone's own .venv, seeing this one's packages: `./scripts/run` finds its dependencies
    installed and adds only the project (pip leaves packages outside its environment alone)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(clone / ".venv")], check=True)
    purelib = Path(sysconfig.get_paths()["purelib"])
    (site,) = (clone / ".venv" / "lib").glob("python3*/site-packages")
    (site / "reused-packages.pth").write_text(f"{purelib}\n")
    (clone / ".venv" / "bin" / "nats-server").symlink_to(Path(sys.executable).parent / "nats-server")


def shell_environment(home: Path) -> dict[str, str]:
    """A login shell's environment with nothing of ours: no .venv on PATH, no NATS_*, no MESH_*.
    PATH is Debian's login default (root's has the sbin folders: runuser, for PostgreSQL as nobody)."""
    path = "/usr/local/bin:/usr/bin:/bin"
    if os.geteuid() == 0:
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "TERM": "dumb"}


class FirstShell:
    """`./scripts/run` in the clone, its output collected as it comes."""

    def __init__(self, clone: Path, environment: dict[str, str]) -> None:
        pip = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.lower().endswith("_proxy")}
        self.process = subprocess.Popen(
            ["./scripts/run"],
            cwd=clone,
            env={**environment, **pip},
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def wait_for(self, expected: tuple[str, ...], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not printed_as_said(expected, "".join(self.output)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail("./scripts/run never printed what the README says:\n" + "".join(self.output)[-5000:])
            time.sleep(0.2)

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to its process group, as a terminal sends it."""
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout=60)
        finally:
            self._reader.join(timeout=5)

    def kill(self) -> None:
        """Whatever is left of it, and its output pipe: asked to stop first, so that the dev loop
        stops its nats-server and PostgreSQL (each in a session of its own), killed if it will not."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


@dataclass
class SecondShell:
    clone: Path
    environment: dict[str, str]
    prelude: str = ""

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """`command` as typed, after the `source` lines typed before it in this shell."""
        if command.startswith(("source ", ". ")):
            self.prelude += command + "\n"
        script = f"{self.prelude}{command}\n"
        process = subprocess.Popen(
            ["bash", "-c", script],
            cwd=self.clone,
            env=self.environment,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = process.communicate(timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:  # a command that never ends (`top`): its whole group, not bash alone
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            err += f"\n(killed after {COMMAND_TIMEOUT} s: it did not end)"
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def run_blocks(shell: SecondShell, blocks: list[Block], firsts: tuple[str, ...]) -> list[str]:
    """Runs each block beginning with one of `firsts`, command by command; returns what went wrong."""
    wrong = []
    for block in (b for b in blocks if b.is_shell and b.first in firsts):
        commands = list(block.commands())
        for command in commands:
            done = shell.run(command)
            said = shown_output(blocks, block) if command == commands[-1] else None
            if done.returncode != 0:
                wrong.append(f"{where(block)}: {command!r} exited {done.returncode}:\n{done.stderr[-2000:]}")
            elif said is not None and not printed_as_said(said.lines, done.stdout):
                wrong.append(f"{where(block)}: {command!r} printed, not as {where(said)} says:\n{done.stdout[-3000:]}")
    return wrong


def where(block: Block) -> str:
    return f"{block.document} line {block.line}"


@dataclass(frozen=True)
class DemoClone:
    """A fresh clone reusing this work tree's packages, a home folder of its own for its shells, and
    where the dev loop writes its nats context in that home."""

    clone: Path
    home: Path
    environment: dict[str, str]
    context: Path


@pytest.fixture
def demo(tmp_path: Path) -> DemoClone:
    clone = fresh_clone(tmp_path)
    reuse_packages(clone)
    home = tmp_path / "home"
    home.mkdir()
    context = home / ".config" / "nats" / "context" / "mesh-provisioner-dev.json"
    return DemoClone(clone, home, shell_environment(home), context)


@pytest.mark.timeout(READY_TIMEOUT + 240)
@pytest.mark.slow
def test_the_readme_set_up_and_every_command_the_documentation_shows_work_as_printed_on_a_fresh_clone(
    demo: DemoClone,
) -> None:
    blocks = documented_blocks()
    (set_up,) = [b for b in blocks if b.is_shell and b.first == SET_UP]
    assert set_up.document == "README.md", "the set-up is the README's"
    ready = shown_output(blocks, set_up)
    assert ready is not None, "the README says what ./scripts/run prints once it is ready"
    clone, environment, context = demo.clone, demo.environment, demo.context

    first = FirstShell(clone, environment)
    try:
        first.wait_for(ready.lines, READY_TIMEOUT)
        shell = SecondShell(clone, environment)
        assert run_blocks(shell, blocks, SECOND_SHELL) == []
        assert context.exists()
        assert first.interrupt() == 0, "".join(first.output)[-3000:]
    finally:
        first.kill()
    assert not context.exists(), "the dev loop's context is removed at Ctrl-C, as the README says"
    assert (clone / "state" / "demo" / "env" / "app.env").exists()

    assert run_blocks(SecondShell(clone, environment), blocks, AFTER_STOP) == []
    assert not (clone / "state").exists()


# --- the README itself ---------------------------------------------------------------------------------

README_MOST_LINES = 300  # a screen or three: the rest is the documentation site's (docs/)


def test_the_readme_fits_in_300_lines() -> None:
    assert len(README.read_text().splitlines()) <= README_MOST_LINES


def test_each_word_of_the_glossary_is_defined_before_the_readme_uses_it() -> None:
    """A glossary row names its words in bold in its first cell; none of them (or its plural) may
    appear in the README above that row."""
    text = README.read_text()
    rows = [(row.start(), re.findall(r"\*\*([^*]+)\*\*", row.group(1))) for row in GLOSSARY_ROW.finditer(text)]
    assert len(rows) >= 20, "the README's glossary is a table of bold words"
    early = [
        f"{word!r} used before its definition: ...{text[used.start() - 40 : used.end()]}"
        for at, words in rows
        for word in words
        if (used := re.search(rf"(?<![\w-]){re.escape(word)}(?:e?s)?(?![\w-])", text, re.IGNORECASE)) is not None
        and used.start() < at
    ]
    assert early == []


GLOSSARY_ROW = re.compile(r"(?m)^\| (\*\*[^|]*) \|")


# --- a second ./scripts/run on the same clone, then the banner's commands in a new terminal --------

BANNER_BLOCK = re.compile(r"^(?:Ask it from another terminal:|.*from another terminal:)\n((?:  \S.*\n)+)", re.M)


@pytest.mark.timeout(READY_TIMEOUT + 240)
@pytest.mark.slow
def test_a_second_run_on_the_same_clone_is_refused_and_the_banners_commands_work_in_a_new_terminal(
    demo: DemoClone,
) -> None:
    clone, home, environment, context = demo.clone, demo.home, demo.environment, demo.context
    first = FirstShell(clone, environment)
    try:
        first.wait_for(("...", "env files are in state/demo/env (mode 0600); watching for changes, Ctrl-C stops"), 300)
        kept = [clone / "state" / "mesh-provisioner-dev.lock", clone / "state" / "demo" / "client.toml"]
        kept += [clone / "state" / "nats" / "nats-server.conf", context]
        before = {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in kept}
        second = subprocess.run(
            ["./scripts/run"], cwd=clone, env=environment, capture_output=True, text=True, timeout=120, check=False
        )
        assert second.returncode == 6, second.stdout + second.stderr
        assert f"(pid {first.process.pid})" in second.stderr, "names the running loop and its pid"
        assert "== installing" not in second.stdout, "nothing changed since the first run's install"
        assert {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in kept} == before
        banner = "".join(first.output)
        blocks = BANNER_BLOCK.findall(banner)
        assert len(blocks) == 2, banner  # the loop's queries, the demo's client status
        for block in blocks:  # each as printed, in a terminal just opened: in the home folder
            script = "set -e\n" + "".join(line.strip() + "\n" for line in block.splitlines())
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=home,
                env=environment,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, f"{block}\n{done.stdout}{done.stderr}"
            assert "node-1" in done.stdout, block
        assert first.interrupt() == 0, "".join(first.output)[-3000:]
    finally:
        first.kill()
    assert not context.exists()
