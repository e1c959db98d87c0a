"""The layering of issue 7, enforced: registry under both programs, the server and the node client
never importing each other, mesh_dev above both, and nats-py reached only through registry.bus and
registry.service.

The contracts live in pyproject.toml (`[tool.importlinter]`) and `lint-imports` checks them in
scripts/test; these tests show that they hold on the tree as it is, that each one catches the edge it
forbids, and that importing a program in a fresh interpreter loads nothing it should not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("registry", "provisioner", "provisioner_client", "mesh_dev")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _contract_names() -> dict[str, str]:
    """Each contract's name by its id, as pyproject.toml declares them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, str]] = config["tool"]["importlinter"]["contracts"]
    return {contract["id"]: contract["name"] for contract in contracts}


CONTRACTS = _contract_names()


def _run(command: list[str], cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("FORCE_COLOR", "PYTHONPATH")}
    # Wide enough that no contract's name and verdict wrap onto two lines.
    env["COLUMNS"] = "250"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    return _run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd, pythonpath)


def _verdicts(output: str) -> dict[str, str]:
    """Each contract's id mapped to the verdict lint-imports printed for it: KEPT or BROKEN."""
    verdicts: dict[str, str] = {}
    for contract_id, name in CONTRACTS.items():
        for line in output.splitlines():
            for verdict in ("KEPT", "BROKEN"):
                if line.startswith(f"{name} {verdict}"):
                    verdicts[contract_id] = verdict
    return verdicts


def test_the_contracts_hold_on_the_tree_as_it_is() -> None:
    result = _lint_imports(ROOT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert _verdicts(output) == dict.fromkeys(CONTRACTS, "KEPT"), output


@dataclass(frozen=True)
class Violation:
    module: str
    """The file, relative to the repository root, that gains the import."""
    code: str
    """Appended to that file."""
    broken: frozenset[str]
    """The ids of the contracts this import must break; every other contract stays kept."""


LAYERS = "layers"
NATS = "nats-through-bus"
SERVES_NOTHING = "client-serves-nothing"

VIOLATIONS = [
    pytest.param(
        Violation("provisioner/verb.py", "import mesh_dev", frozenset({LAYERS})),
        id="the server importing the development tooling",
    ),
    pytest.param(
        Violation(
            "provisioner_client/watching.py", "from mesh_dev import standins", frozenset({LAYERS, SERVES_NOTHING})
        ),
        id="the node client importing the development tooling",
    ),
    pytest.param(
        Violation("provisioner_client/resolve.py", "import provisioner", frozenset({LAYERS, SERVES_NOTHING})),
        id="the node client importing the server",
    ),
    pytest.param(
        Violation("provisioner/listing.py", "import provisioner_client", frozenset({LAYERS})),
        id="the server importing the node client",
    ),
    pytest.param(
        Violation(
            "provisioner/cli.py",
            "def _late() -> None:\n    import provisioner_client.cli\n",
            frozenset({LAYERS}),
        ),
        id="the server importing the node client inside a function",
    ),
    pytest.param(
        Violation("registry/keys.py", "import provisioner_client", frozenset({LAYERS})),
        id="registry importing the node client",
    ),
    pytest.param(
        Violation("registry/errors.py", "import provisioner.errors", frozenset({LAYERS})),
        id="registry importing the server",
    ),
    pytest.param(
        Violation("registry/templates.py", "import mesh_dev.local_nats", frozenset({LAYERS})),
        id="registry importing the development tooling",
    ),
    pytest.param(
        Violation("provisioner_client/reconcile.py", "import nats", frozenset({NATS})),
        id="the node client importing nats-py itself",
    ),
    pytest.param(
        Violation("provisioner/verb.py", "from nats.js import api", frozenset({NATS})),
        id="the server importing a submodule of nats-py",
    ),
    pytest.param(
        Violation("registry/kv.py", "import nats.js.errors", frozenset({NATS})),
        id="registry beyond bus and service importing nats-py",
    ),
    pytest.param(
        Violation("mesh_dev/local_nats.py", "import nats", frozenset({NATS})),
        id="the development tooling importing nats-py itself",
    ),
    pytest.param(
        Violation("provisioner_client/scope.py", "import registry.service", frozenset({SERVES_NOTHING})),
        id="the node client importing the service layer",
    ),
    pytest.param(
        Violation("registry/verb_client.py", "import registry.service", frozenset({SERVES_NOTHING})),
        id="the node client reaching the service layer through registry",
    ),
]


@pytest.fixture
def packages_copy(tmp_path: Path) -> Path:
    """The four packages and pyproject.toml, copied where a forbidden import can be added to them.

    lint-imports runs there with the copy first on PYTHONPATH (and as its working directory), so
    grimp reads the copied packages: the path entries come before the editable install's finder,
    which setuptools appends to the end of sys.meta_path.
    """
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    where = f"import importlib.util\nfor name in {PACKAGES!r}:\n    print(importlib.util.find_spec(name).origin)"
    found = _run([sys.executable, "-c", where], tmp_path, tmp_path)
    assert found.returncode == 0, found.stderr
    for package in PACKAGES:
        assert str(tmp_path / package / "__init__.py") in found.stdout, (package, found.stdout)
    return tmp_path


@pytest.mark.parametrize("violation", VIOLATIONS)
def test_a_forbidden_import_breaks_its_contract(packages_copy: Path, violation: Violation) -> None:
    target = packages_copy / violation.module
    target.write_text(f"{target.read_text()}\n{violation.code}\n")
    result = _lint_imports(packages_copy, packages_copy)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    expected = {contract_id: "BROKEN" if contract_id in violation.broken else "KEPT" for contract_id in CONTRACTS}
    assert _verdicts(output) == expected, output
    importer = violation.module.removesuffix(".py").replace("/", ".")
    assert importer in output, output


# What a fresh interpreter holds after importing one program: prefixes that must not be there.
FORBIDDEN_AFTER_IMPORT = [
    pytest.param("provisioner_client", ("mesh_dev", "provisioner", "nats.micro"), id="the node client"),
    pytest.param("provisioner", ("mesh_dev", "provisioner_client"), id="the server"),
]


@pytest.mark.parametrize(("program", "forbidden"), FORBIDDEN_AFTER_IMPORT)
def test_importing_a_program_loads_no_development_tooling_nor_the_other_program(
    program: str, forbidden: tuple[str, ...]
) -> None:
    script = f"import json, sys\nimport {program}\nprint(json.dumps(sorted(sys.modules)))"
    result = _run([sys.executable, "-c", script], ROOT)
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout)
    offending = [
        module for module in loaded if any(module == prefix or module.startswith(f"{prefix}.") for prefix in forbidden)
    ]
    assert offending == [], f"importing {program} loaded {offending}"
