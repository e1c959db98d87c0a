"""The layering, enforced: registry under both programs, the server and the node client
never importing each other, mesh_dev above both, and nats-py reached only through registry.wire.bus,
registry.wire.nats_internals and registry.serving.service.

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

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("registry", "provisioner", "provisioner_client", "mesh_dev", "examples", "bench")
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
CONCERNS = "registry-concerns"
CLIENT_FOLDERS = "client-folders"


def surface(package: str) -> str:
    return f"surface-{package}"


VIOLATIONS = [
    pytest.param(
        Violation("provisioner/verb/handler.py", "import mesh_dev", frozenset({LAYERS})),
        id="the server importing the development tooling",
    ),
    pytest.param(
        Violation(
            "provisioner_client/watch/watching.py", "from mesh_dev import standins", frozenset({LAYERS, SERVES_NOTHING})
        ),
        id="the node client importing the development tooling",
    ),
    pytest.param(
        Violation("provisioner_client/resolving/resolve.py", "import provisioner", frozenset({LAYERS, SERVES_NOTHING})),
        id="the node client importing the server",
    ),
    pytest.param(
        Violation("provisioner/verb/listing.py", "import provisioner_client", frozenset({LAYERS})),
        id="the server importing the node client",
    ),
    pytest.param(
        Violation(
            "provisioner/commands/cli.py",
            "def _late() -> None:\n    import provisioner_client.cli\n",
            frozenset({LAYERS}),
        ),
        id="the server importing the node client inside a function",
    ),
    pytest.param(
        # The node client reaches the wire layer, so the contract would reach it through the client
        # (and each of the client's folders would reach the ones above it).
        Violation(
            "registry/contract/keys.py", "import provisioner_client", frozenset({LAYERS, CONCERNS, CLIENT_FOLDERS})
        ),
        id="registry importing the node client",
    ),
    pytest.param(
        Violation("registry/errors.py", "import provisioner.errors", frozenset({LAYERS})),
        id="registry importing the server",
    ),
    pytest.param(
        Violation("registry/contract/templates.py", "import mesh_dev.local_nats", frozenset({LAYERS})),
        id="registry importing the development tooling",
    ),
    pytest.param(
        Violation(
            "provisioner_client/resolving/memory.py",
            "from provisioner_client.materializing import envfile",
            frozenset({CLIENT_FOLDERS}),
        ),
        id="the node client's resolving importing the env files it is resolved into",
    ),
    pytest.param(
        Violation(
            "provisioner_client/state/records.py", "import provisioner_client.rollout.gate", frozenset({CLIENT_FOLDERS})
        ),
        id="the node's state importing a folder that keeps records in it",
    ),
    pytest.param(
        Violation("provisioner_client/reconcile.py", "import nats", frozenset({NATS})),
        id="the node client importing nats-py itself",
    ),
    pytest.param(
        Violation("provisioner/verb/handler.py", "from nats.js import api", frozenset({NATS})),
        id="the server importing a submodule of nats-py",
    ),
    pytest.param(
        Violation("registry/wire/kv.py", "import nats.js.errors", frozenset({NATS})),
        id="registry beyond bus and service importing nats-py",
    ),
    pytest.param(
        Violation("mesh_dev/local_nats.py", "import nats", frozenset({NATS})),
        id="the development tooling importing nats-py itself",
    ),
    pytest.param(
        Violation(
            "provisioner_client/resolving/scope.py",
            "import registry.serving.service",
            frozenset({SERVES_NOTHING, surface("serving")}),
        ),
        id="the node client importing the service layer",
    ),
    pytest.param(
        Violation(
            "registry/wire/verb_client.py",
            "import registry.serving",
            frozenset({SERVES_NOTHING, CONCERNS}),
        ),
        id="the node client reaching the service layer through registry",
    ),
    pytest.param(
        Violation("registry/contract/keys.py", "import registry.wire", frozenset({CONCERNS})),
        id="the contract importing the wire layer",
    ),
    pytest.param(
        Violation("registry/errors.py", "import registry.contract", frozenset({CONCERNS})),
        id="the error tree importing the contract it sits under",
    ),
    pytest.param(
        Violation("registry/wire/kv.py", "import registry.access", frozenset({CONCERNS})),
        id="the wire layer importing the grants",
    ),
    pytest.param(
        Violation("registry/access/grants.py", "import registry.wire", frozenset({CONCERNS})),
        id="the grants importing the wire layer at run time",
    ),
    pytest.param(
        Violation("registry/wire/bus.py", "import registry.edge", frozenset({CONCERNS})),
        id="the wire layer importing a program's edge",
    ),
    pytest.param(
        Violation("registry/runtime/logs.py", "import registry.provider", frozenset({CONCERNS})),
        id="logging importing the provider SDK",
    ),
    pytest.param(
        Violation("registry/runtime/signals.py", "import registry.wire", frozenset({CONCERNS})),
        id="signal handling importing the wire layer",
    ),
    pytest.param(
        Violation(
            "examples/postgres_provisioner/cli.py", "import registry.runtime.logs", frozenset({surface("runtime")})
        ),
        id="a provider program reaching past the runtime's surface",
    ),
    pytest.param(
        Violation(
            "provisioner/verb/handler.py",
            "from registry.contract.escaping import encode_token",
            frozenset({surface("contract")}),
        ),
        id="the server reaching past the contract's surface",
    ),
    pytest.param(
        Violation("provisioner_client/reconcile.py", "import registry.wire.walk", frozenset({surface("wire")})),
        id="the node client reaching past the wire layer's surface",
    ),
    pytest.param(
        Violation(
            "provisioner/seat/server.py", "from registry.serving.service import capped", frozenset({surface("serving")})
        ),
        id="the server reaching past the serving surface",
    ),
    pytest.param(
        Violation(
            "provisioner/commands/grants_command.py", "import registry.access.parties", frozenset({surface("access")})
        ),
        id="the grants command reaching past the grants' surface",
    ),
    pytest.param(
        Violation("mesh_dev/cli.py", "import registry.edge.nats_context", frozenset({surface("edge")})),
        id="the development tooling reaching past the edge's surface",
    ),
    pytest.param(
        Violation(
            "examples/postgres_provisioner/cli.py", "import registry.provider.sdk", frozenset({surface("provider")})
        ),
        id="a provider program reaching past the provider SDK's surface",
    ),
    pytest.param(
        Violation(
            "registry/wire/lease.py", "from registry.contract.models import NeedValue", frozenset({surface("contract")})
        ),
        id="one concern of registry reaching past another's surface",
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
    # rich renders tables and status on a terminal: the commands that print load it when they run.
    pytest.param("provisioner.commands.cli", ("rich",), id="the seat's command line, which serve runs from"),
    pytest.param("provisioner_client.cli", ("rich",), id="the node client's command line"),
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
