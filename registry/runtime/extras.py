"""A package of an optional extra, looked for before a program needs it.

`pip install mesh-provisioner` installs every console script, but some need a package that only
an extra brings (`mesh-postgres-provisioner` needs psycopg, the `postgres` extra). Such a program
asks `missing_extra` first and, when the package cannot be imported, says which extra to install
instead of ending in a `ModuleNotFoundError` traceback.
"""

from __future__ import annotations

import importlib

DISTRIBUTION = "mesh-provisioner"


def missing_extra(extra: str, *modules: str) -> str | None:
    """Why a program cannot run without the extra `extra`: the first of `modules` that cannot be
    imported, with the command that installs it; `None` when every one imports."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            return (
                f"the Python package {module} cannot be imported ({err}); it comes with the {extra!r} extra: "
                f"pip install '{DISTRIBUTION}[{extra}]'"
            )
    return None
