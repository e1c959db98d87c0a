"""Running Python code as `nobody`: a fresh interpreter, started as root, imports what it needs
(the interpreter lives under /root, which nobody cannot read), then drops to nobody's uid and gid
with no supplementary groups, and runs the code."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DROP = """
import os
os.setgroups([])
os.setgid({gid})
os.setuid({uid})
"""


def as_nobody(prepare: str, code: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs `prepare` (imports) as root, then `code` as nobody; skips where that cannot be done."""
    if os.geteuid() != 0:
        pytest.skip(f"becoming nobody needs root, and these tests run as uid {os.geteuid()}")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user nobody")
    dropping = DROP.format(uid=nobody.pw_uid, gid=nobody.pw_gid)
    return subprocess.run(
        [sys.executable, "-c", f"{prepare}\n{dropping}\n{code}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
