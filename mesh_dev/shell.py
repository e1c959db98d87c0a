"""What a fresh terminal needs before the commands the dev loop prints work as printed.

The programs are in the virtualenv `./scripts/run` installs into, which only its own shell has on
its PATH, and the state folder's paths are printed relative to where the loop was started: each
block of commands the loop prints starts with the line that goes there and activates it.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def new_terminal() -> str:
    """`cd <where the loop runs>`, then `source <its virtualenv>/bin/activate` when it runs in one."""
    here = Path.cwd()
    line = f"cd {shlex.quote(str(here))}"
    activate = Path(sys.prefix) / "bin" / "activate"
    if sys.prefix != sys.base_prefix and activate.is_file():
        line += f" && source {shlex.quote(_from(here, activate))}"
    return line


def _from(here: Path, path: Path) -> str:
    """`path` relative to `here` when it lies under it, else absolute."""
    try:
        return str(path.relative_to(here))
    except ValueError:
        return str(path)
