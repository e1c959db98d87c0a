"""`python -m bench.startup`: what each program costs before it does anything, as a ratio to a bare
`python -c pass`, measured side by side in one run (rounds of every case in turn, so that the
machine's load weighs on each alike).

Per program: `--help` and `--version`; and a one-shot query's own start-up, everything before its
request: `mesh-provisioner query` and `mesh-provisioner-client status` are pointed at a listener
that accepts and never answers, and the time is the one from starting the process to that
listener's accept (the NATS handshake and the answer are the network's, not the start-up's).
Beside them, the libraries' floor: a bare Python that imports pydantic, nats-py and anyio, checks one
setting with a pydantic model and connects, as every query must before its request.
The programs are run as installed, by their console scripts beside this interpreter. With
`--before DIR` (a checkout of an earlier commit: `git worktree add DIR COMMIT`), every case is also
run on DIR's code (first on the path, over the editable install), in the same rounds: the before
and after figures of one run, side by side.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

PROGRAMS = (
    "mesh-provisioner",
    "mesh-provisioner-client",
    "mesh-provisioner-dev",
    "mesh-postgres-provisioner",
    "mesh-host",
)
QUERIES = {
    "mesh-provisioner query": ("mesh-provisioner", "query"),
    "mesh-provisioner-client status": ("mesh-provisioner-client", "status", "--node", "n1"),
}

# What any query costs before its request, whatever its own code: the interpreter, pydantic and one
# model's first validation, nats-py, and anyio's event loop around nats-py's connect.
FLOOR = """
import sys, anyio, nats
from pydantic import BaseModel
class Settings(BaseModel):
    url: str
settings = Settings.model_validate({"url": sys.argv[-1]})
async def connect() -> None:
    await nats.connect(settings.url, allow_reconnect=False, connect_timeout=30)
anyio.run(connect)
"""
FLOOR_CASE = "floor: pydantic, nats-py, anyio (to its connect)"


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[], float]  # one measurement, in seconds


def script(program: str) -> str:
    return str(Path(sys.executable).parent / program)


def timed(argv: Sequence[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def until_connect(argv: Sequence[str], env: dict[str, str]) -> float:
    """Seconds from starting `argv` to its first connection to a listener that never answers;
    `argv` ends with the listener's URL given to it."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        url = f"nats://127.0.0.1:{listener.getsockname()[1]}"
        started = time.perf_counter()
        child = subprocess.Popen(
            [*argv, "--nats-url", url], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            connection, _ = listener.accept()
            took = time.perf_counter() - started
            connection.close()
        finally:
            child.kill()
            child.wait()
    return took


def cases(env: dict[str, str], label: str = "") -> list[Case]:
    found = [Case(f"python -c pass{label}", partial(timed, [sys.executable, "-c", "pass"], env))]
    for program in PROGRAMS:
        for flag in ("--help", "--version"):
            found.append(Case(f"{program} {flag}{label}", partial(timed, [script(program), flag], env)))
    for name, (program, *rest) in QUERIES.items():
        found.append(Case(f"{name} (to its connect){label}", partial(until_connect, [script(program), *rest], env)))
    if not label:  # the libraries' floor is the same code before and after
        found.append(Case(FLOOR_CASE, partial(until_connect, [sys.executable, "-c", FLOOR], env)))
    return found


def measure(rounds: int, before: Path | None = None) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="startup-") as home:
        # No nats context, settings file or variable of the machine's: each program starts as on a bare one.
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "XDG_CONFIG_HOME": home, "LANG": "C.UTF-8"}
        env["MESH_PROVISIONER_CLIENT_CONFIG"] = ""
        every = cases(env)
        if before is not None:
            every += cases(env | {"PYTHONPATH": str(before.resolve())}, BEFORE)
        for case in every:  # once unmeasured: byte-compiled files written, the disk cache warm
            case.run()
        figures: dict[str, list[float]] = {case.name: [] for case in every}
        for _ in range(rounds):
            for case in every:
                figures[case.name].append(case.run())
    return figures


BEFORE = " [before]"


def report(figures: dict[str, list[float]]) -> str:
    """A line per case: its median, as a ratio to `python -c pass`, and before, when measured."""
    bare = statistics.median(figures["python -c pass"])
    lines = [f"{'case':<50} {'median s':>9} {'x pass':>7} {'before s':>9} {'x pass':>7}"]
    for name, seconds in figures.items():
        if name.endswith(BEFORE):
            continue
        median = statistics.median(seconds)
        line = f"{name:<50} {median:>9.3f} {median / bare:>7.1f}"
        if name + BEFORE in figures:
            then = statistics.median(figures[name + BEFORE])
            line += f" {then:>9.3f} {then / bare:>7.1f}"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="measurements of each case (default 7)")
    parser.add_argument("--before", type=Path, metavar="DIR", help="a checkout of an earlier commit, measured too")
    args = parser.parse_args()
    print(report(measure(args.rounds, args.before)))


if __name__ == "__main__":
    main()
