"""No import cycle in any package: the import graph of the six packages, imports under
`TYPE_CHECKING` and inside functions included, has no strongly connected component of more than
one module and no module importing itself.

grimp builds the graph in a fresh interpreter whose path starts at the tree checked (as
tests/project/test_layering.py runs lint-imports), so that the same check runs on a copy of the packages
with one import added that closes a cycle, and must report exactly that cycle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("registry", "provisioner", "provisioner_client", "mesh_dev", "examples", "bench")

Imports = Mapping[str, Mapping[str, int]]
"""Each module's direct imports within the packages, with the line of the first."""

# Run in the checked tree; prints where each package was found and the graph's edges.
_GRAPH = """
import importlib.util, json, sys
import grimp
packages = sys.argv[1:]
graph = grimp.build_graph(*packages, cache_dir=None)
imports = {
    importer: {
        imported: min(d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported))
        for imported in graph.find_modules_directly_imported_by(importer)
    }
    for importer in graph.modules
}
origins = {package: importlib.util.find_spec(package).origin for package in packages}
print(json.dumps({"origins": origins, "imports": imports}))
"""


def import_graph(root: Path) -> Imports:
    """The packages' import graph as grimp reads it under `root` (first on the path)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(root)
    command = [sys.executable, "-c", _GRAPH, *PACKAGES]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    for package, origin in found["origins"].items():
        assert origin == str(root / package / "__init__.py"), (package, origin)
    imports: Imports = found["imports"]
    return imports


@dataclass(frozen=True)
class Cycle:
    modules: frozenset[str]
    """A strongly connected component: each of its modules imports every other, through the rest."""
    path: tuple[str, ...]
    """A shortest cycle through its first module by name, that module at both ends."""

    def described(self, imports: Imports) -> str:
        steps = [
            f"    {importer} imports {imported} (line {imports[importer][imported]})"
            for importer, imported in pairwise(self.path)
        ]
        return f"import cycle among {', '.join(sorted(self.modules))}:\n" + "\n".join(steps)


def cycles(imports: Imports) -> list[Cycle]:
    """Every strongly connected component of more than one module, and every module importing
    itself, by their first module's name."""
    reach = {module: _reachable(imports, module) for module in imports}
    found: list[Cycle] = []
    placed: set[str] = set()
    for module in sorted(imports):
        if module in placed or module not in reach[module]:
            continue
        component = frozenset(other for other in reach[module] if module in reach[other])
        placed |= component
        found.append(Cycle(component, _shortest_way_back(imports, module, component)))
    return found


def _reachable(imports: Imports, start: str) -> set[str]:
    """The modules `start` imports, directly or not (itself only through a cycle)."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        for imported in imports.get(stack.pop(), {}):
            if imported not in seen:
                seen.add(imported)
                stack.append(imported)
    return seen


def _shortest_way_back(imports: Imports, start: str, component: frozenset[str]) -> tuple[str, ...]:
    """The shortest chain of imports from `start` back to it, breadth first, inside `component`."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while start not in came_from:
        following = []
        for importer in frontier:
            for imported in sorted(imports[importer]):
                if imported in component and imported not in came_from:
                    came_from[imported] = importer
                    following.append(imported)
        frontier = following
    path = [start]
    while len(path) == 1 or path[-1] != start:
        path.append(came_from[path[-1]])
    return tuple(reversed(path))


def test_no_package_has_an_import_cycle() -> None:
    imports = import_graph(ROOT)
    assert "provisioner.verb.answering" in imports  # the graph is the packages', not an empty one
    found = cycles(imports)
    assert found == [], "\n".join(cycle.described(imports) for cycle in found)


@dataclass(frozen=True)
class ClosedCycle:
    module: str
    """The file, relative to the repository root, that gains the import."""
    code: str
    """Appended to that file."""
    path: tuple[str, ...]
    """The one cycle the check must then report."""


CLOSED_CYCLES = [
    pytest.param(
        ClosedCycle(
            "provisioner/verb/pages.py",
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from provisioner.verb.streamed import StreamedListing\n",
            (
                "provisioner.verb.listing",
                "provisioner.verb.pages",
                "provisioner.verb.streamed",
                "provisioner.verb.listing",
            ),
        ),
        id="a page importing the streamed listing for its type only (the circle that was)",
    ),
    pytest.param(
        ClosedCycle(
            "provisioner/verb/pages.py",
            "import provisioner.verb.listing\n",
            ("provisioner.verb.listing", "provisioner.verb.pages", "provisioner.verb.listing"),
        ),
        id="a page importing the listing that lays items out in pages",
    ),
    pytest.param(
        ClosedCycle(
            "registry/contract/escaping.py",
            "import registry.contract.keys\n",
            ("registry.contract.escaping", "registry.contract.keys", "registry.contract.escaping"),
        ),
        id="the escaping importing the keys built on it",
    ),
    pytest.param(
        ClosedCycle(
            "provisioner_client/resolving/manifest.py",
            "def _late() -> None:\n    import provisioner_client.settings\n",
            (
                "provisioner_client.resolving.manifest",
                "provisioner_client.settings",
                "provisioner_client.resolving.manifest",
            ),
        ),
        id="the manifest importing the client's settings inside a function",
    ),
    pytest.param(
        ClosedCycle(
            "provisioner/verb/pages.py",
            "import provisioner.verb.pages\n",
            ("provisioner.verb.pages", "provisioner.verb.pages"),
        ),
        id="a module importing itself",
    ),
]


@pytest.fixture
def packages_copy(tmp_path: Path) -> Path:
    """The six packages, copied where an import closing a cycle can be added to them."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.mark.parametrize("closed", CLOSED_CYCLES)
def test_an_import_closing_a_cycle_is_reported_as_that_cycle(packages_copy: Path, closed: ClosedCycle) -> None:
    target = packages_copy / closed.module
    target.write_text(f"{target.read_text()}\n{closed.code}")
    imports = import_graph(packages_copy)
    found = cycles(imports)
    assert [cycle.path for cycle in found] == [closed.path], "\n".join(c.described(imports) for c in found)
    assert found[0].modules == frozenset(closed.path)
    importer = closed.module.removesuffix(".py").replace("/", ".")
    assert f"    {importer} imports " in found[0].described(imports)
