"""Issuing the grants costs work linear in the parties, in both modes: twice the nodes, about twice
the work. Measured as the lines of the project's own code run (a count, never a time): rendering
each account's exports by reading every party's imports again (what 1,000 nodes spent 3.9 s of
5.2 s on) made twice the nodes cost 3.4 times the lines. What runs in no line of ours (a name
searched for in a list) is counted by the names read."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, overload

import pytest

import provisioner
import registry
from registry.access import MeshParties, Party, derive_grants, issue_grants
from registry.contract import load_catalogue

OWN_CODE = tuple(str(Path(package.__file__).parent) for package in (registry, provisioner) if package.__file__)
NODES = 40
# Twice the nodes: 1.9 times the lines when each party's work is its own, 3.4 times when it reads
# every other party's again.
LINEAR = 2.25


def lines_run(work: Callable[[], object]) -> int:
    """How many lines of the project's own code `work()` runs (any library's are not counted)."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if not frame.f_code.co_filename.startswith(OWN_CODE):
            return None
        if event == "line":
            count += 1
        return trace

    before = sys.gettrace()
    sys.settrace(trace)
    try:
        work()
    finally:
        sys.settrace(before)
    return count


def issuing(folder: Path, nodes: int, *, jwt: bool) -> int:
    names = [f"n{number}" for number in range(nodes)]
    parties = MeshParties(
        nodes=names, providers=["postgres", "redis"], operators=["ops"], machines={"postgres": names[::4]}
    )
    return lines_run(lambda: issue_grants(folder, parties, jwt=jwt))


@pytest.mark.parametrize("jwt", [False, True], ids=["static accounts", "JWT accounts too"])
def test_twice_the_nodes_cost_about_twice_the_work(tmp_path: Path, jwt: bool) -> None:
    once = issuing(tmp_path / "once", NODES, jwt=jwt)
    twice = issuing(tmp_path / "twice", 2 * NODES, jwt=jwt)
    assert twice / once < LINEAR, f"{NODES} nodes: {once} lines; {2 * NODES}: {twice}"


class CountedNames(Sequence[str]):
    """Names that count how often one is read."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.reads = 0

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        self.reads += 1
        return self.names[index]

    def __len__(self) -> int:
        return len(self.names)


class KeyOf(dict[Party, str]):
    def __missing__(self, party: Party) -> str:
        return f"U{party.label}"


def test_a_provider_running_on_every_node_reads_each_node_name_a_few_times_not_once_per_machine() -> None:
    nodes = CountedNames([f"n{number}" for number in range(200)])
    derive_grants(
        load_catalogue(), nodes=nodes, providers=["postgres"], machines={"postgres": nodes.names}, user_keys=KeyOf()
    )
    assert nodes.reads <= 10 * len(nodes), f"{nodes.reads} reads of {len(nodes)} names"
