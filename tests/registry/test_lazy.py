"""The wire layer's, the contract's and the runtime's names are loaded when first used: each name
the package offers is there, is its module's own, and a name used loads its module alone."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from types import ModuleType

import pytest

import registry.contract
import registry.runtime
import registry.wire

PACKAGES = (registry.contract, registry.runtime, registry.wire)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_every_name_offered_is_its_module_s_own(package: ModuleType) -> None:
    for name in package.__all__:
        value = getattr(package, name)
        if isinstance(value, ModuleType):
            assert value is importlib.import_module(f"{package.__name__}.{name}")
        else:
            home = getattr(value, "__module__", None)
            if isinstance(home, str) and home.startswith(package.__name__ + "."):
                assert getattr(sys.modules[home], name) is value


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_a_name_not_offered_is_an_attribute_error(package: ModuleType) -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        getattr(package, "no_such_name")  # noqa: B009 (the name is the point)


def _loaded(code: str) -> set[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


def test_a_name_used_loads_its_module_alone() -> None:
    loaded = _loaded("from registry.wire import connect_within\nfrom registry.contract import FILTERS")
    assert {"registry.wire.bus", "registry.contract.verb"} <= loaded
    assert not loaded & {"registry.wire.kv", "registry.wire.watch", "registry.contract.catalogue"}


def test_the_package_alone_loads_none_of_its_modules() -> None:
    loaded = _loaded("import registry.wire, registry.contract, registry.runtime")
    assert not {name for name in loaded if name.startswith(("registry.wire.", "registry.runtime."))}
    assert "nats" not in loaded


def test_the_contract_and_the_settings_build_no_adapter_and_need_no_pydantic_settings() -> None:
    """A command's start-up pays for the page adapters only when it reads a page, and the settings
    are plain pydantic models: pydantic-settings (which imports asyncio and builds its sources) is
    loaded by no program."""
    script = (
        "import json, sys\n"
        "import provisioner.settings, provisioner_client.settings, registry.contract.pages as pages\n"
        "print(json.dumps([pages._entry_adapter.cache_info().currsize, pages._any_page.cache_info().currsize,"
        " 'pydantic_settings' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [0, 0, False]
