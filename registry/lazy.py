"""A package's names loaded when first used: a package whose `__init__` re-exports its modules'
names would otherwise import every module (and nats-py, pydantic's models) for the one name a
command needs, and `--help` or a one-shot query would pay for all of them before it starts.

The package imports its names under `TYPE_CHECKING` (what type checkers and the import contracts
read) and, at run time, sets `__getattr__ = lazy_names(__name__, {name: module})`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: each name of `homes` imported from its module on first
    use, then kept on the package so that the next use costs nothing."""

    def load(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # A name imported from the package itself is one of its modules.
        value = (
            importlib.import_module(f"{home}.{name}")
            if home == package
            else getattr(importlib.import_module(home), name)
        )
        setattr(sys.modules[package], name, value)
        return value

    return load
